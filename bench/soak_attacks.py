"""The attackers of bench/soak_hostile.py, each a coroutine that runs until `stop` is set, on loopback only.

Round one (issue 14): clients that send half a request head and stall, malformed requests, connection churn, label
selectors never seen before. Round two (issue 21): request heads that never end (fields of 8 KB, no final CRLF),
clients that pipeline 20 requests and never read the answers, TLS handshakes that never start, `/pods` stream-slot
hogs (without the adapter's token, or with a tenant's), and queries that make a Prometheus answer pathologically.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import string
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp

STALLED = 200
GARBAGE_PER_SECOND = 10
CHURN_PER_SECOND = 20
SELECTORS_PER_SECOND = 5
UNFINISHED_HEADS = 30  # connections sending a head that never ends, at once, per service
PIPELINERS = 32  # connections every PIPELINE_EVERY seconds, per service, each pipelining 20 requests, reading nothing
PIPELINE_EVERY = 5.0
PIPELINER_LIFETIME = 60.0  # how long an attacker keeps its end of a pipeliner open
HANDSHAKES_PER_SECOND = 20  # TLS connections that never send a ClientHello, kept HANDSHAKE_LIFETIME
HANDSHAKE_LIFETIME = 30.0
STREAM_HOGS = 24  # /pods stream requests at once, more than the exporter's slots
PROMETHEUS_QUERIES_PER_SECOND = 2
GARBAGE = (
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header\x00: 1\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage-tls-to-a-plain-port\r\n\r\n",
    b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"BREW /pot HTTP/9.9\r\n\r\n",
)
PODS_PATH = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/pods/*/gpu_utilization"
_OPEN_ERRORS = (OSError, ssl.SSLError, asyncio.IncompleteReadError, TimeoutError)


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    ssl: ssl.SSLContext | None  # how an outsider speaks to it (TLS without a client certificate), or None


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


# ---- round one ---------------------------------------------------------------------------------------------------
Send = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _reconnecting(target: Target, count: int, send: Send, stop: asyncio.Event) -> None:
    """`count` clients, each sending with `send` and then reading until the server closes; reopened whenever it
    does."""

    async def one() -> None:
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(target.host, target.port, ssl=target.ssl)
                await send(reader, writer)
                while await reader.read(4096):
                    pass
                writer.close()
            except _OPEN_ERRORS:
                await asyncio.sleep(0.5)
            await asyncio.sleep(0.1)

    await asyncio.gather(*(one() for _ in range(count)))


async def stalled_clients(target: Target, stop: asyncio.Event) -> None:
    """Keep STALLED connections open that each sent half a request head; reopen one whenever the server closes it."""

    async def half_a_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        await writer.drain()

    await _reconnecting(target, STALLED, half_a_head, stop)


async def garbage_and_churn(target: Target, stop: asyncio.Event) -> None:
    while not stop.is_set():
        for payload in random.choices(GARBAGE, k=GARBAGE_PER_SECOND):
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(target.host, target.port, ssl=target.ssl), 5
                )
                writer.write(payload)
                await asyncio.wait_for(reader.read(1024), 5)
                writer.close()
            except _OPEN_ERRORS:
                pass
        for _ in range(CHURN_PER_SECOND):
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(target.host, target.port), 5)
                writer.close()
            except _OPEN_ERRORS:
                pass
        await _pause(stop, 1.0)


async def distinct_selectors(
    session: aiohttp.ClientSession, url: str, client_ssl: ssl.SSLContext, stop: asyncio.Event
) -> None:
    path = PODS_PATH.format(namespace="bench")
    while not stop.is_set():
        for _ in range(SELECTORS_PER_SECOND):
            label = "".join(random.choices(string.ascii_lowercase, k=12))
            try:
                async with session.get(
                    f"{url}{path}", params={"labelSelector": f"app=infer,{label}=x"}, ssl=client_ssl
                ) as response:
                    await response.read()
            except (aiohttp.ClientError, TimeoutError):
                pass
        await _pause(stop, 1.0)


# ---- round two ---------------------------------------------------------------------------------------------------
async def unfinished_heads(target: Target, stop: asyncio.Event) -> None:
    """UNFINISHED_HEADS connections, each sending a request line and then fields of 8 KB without the CRLF that ends
    the head, as long as the server lets it (it cost 2 MiB a connection before a head's total size was bounded)."""
    field = b"X-Filler: " + b"f" * 8180 + b"\r\n"

    async def endless_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        for _ in range(127):
            writer.write(field)
            await writer.drain()
            if reader.at_eof():
                return
            await asyncio.sleep(0.05)

    await _reconnecting(target, UNFINISHED_HEADS, endless_head, stop)


async def _open_and_hold(
    target: Target, tls: bool, first: bytes, per_round: int, every: float, lifetime: float, stop: asyncio.Event
) -> None:
    """Every `every` seconds open `per_round` connections (TLS as `target` speaks it, or plain TCP), send `first` on
    each, read nothing, and keep this end open for `lifetime` seconds."""
    held: list[tuple[float, asyncio.StreamWriter]] = []
    loop = asyncio.get_running_loop()
    try:
        while not stop.is_set():
            for _ in range(per_round):
                try:
                    _, writer = await asyncio.wait_for(
                        asyncio.open_connection(target.host, target.port, ssl=target.ssl if tls else None), 5
                    )
                    writer.write(first)
                    held.append((loop.time(), writer))
                except _OPEN_ERRORS:
                    pass
            now = loop.time()
            for _, writer in [h for h in held if now - h[0] > lifetime]:
                writer.transport.abort()
            held = [h for h in held if now - h[0] <= lifetime]
            await _pause(stop, every)
    finally:
        for _, writer in held:
            writer.transport.abort()


async def pipelining_non_readers(target: Target, request: bytes, stop: asyncio.Event) -> None:
    """Every PIPELINE_EVERY seconds, PIPELINERS connections that send 20 requests at once and never read a byte of the
    answers; the attacker keeps its end open for PIPELINER_LIFETIME (the server must let go of its end long before)."""
    await _open_and_hold(target, True, request * 20, PIPELINERS, PIPELINE_EVERY, PIPELINER_LIFETIME, stop)


async def handshake_churn(target: Target, stop: asyncio.Event) -> None:
    """HANDSHAKES_PER_SECOND TCP connections a second to a TLS port that never send a ClientHello, each kept
    HANDSHAKE_LIFETIME by the attacker."""
    await _open_and_hold(target, False, b"", HANDSHAKES_PER_SECOND, 1.0, HANDSHAKE_LIFETIME, stop)


async def stream_hogs(exporter_url: str, tenant_token: str, stop: asyncio.Event) -> dict[int, int]:
    """STREAM_HOGS clients that each ask for a `/pods` stream again and again, read whatever they get, and take the
    slot again the moment it frees: half without a token, half with a tenant's. Returns the statuses they got."""
    statuses: dict[int, int] = {}

    async def one(session: aiohttp.ClientSession, headers: dict[str, str]) -> None:
        while not stop.is_set():
            try:
                async with session.get(f"{exporter_url}/pods", params={"watch": "1"}, headers=headers) as response:
                    statuses[response.status] = statuses.get(response.status, 0) + 1
                    async for _ in response.content.iter_chunked(65_536):
                        if stop.is_set():
                            break
            except (aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.05)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=STREAM_HOGS)) as session:
        await asyncio.gather(
            *(one(session, {"Authorization": f"Bearer {tenant_token}"} if i % 2 else {}) for i in range(STREAM_HOGS))
        )
    return statuses


async def pathological_prometheus_queries(
    session: aiohttp.ClientSession, url: str, client_ssl: ssl.SSLContext, namespaces: list[str], stop: asyncio.Event
) -> None:
    """PROMETHEUS_QUERIES_PER_SECOND queries a second of the prometheus-source adapter about namespaces other than the
    HPA's, for which the hostile Prometheus answers pathologically (at most 8 in flight)."""
    in_flight: set[asyncio.Task[None]] = set()

    async def one(namespace: str) -> None:
        try:
            async with session.get(
                f"{url}{PODS_PATH.format(namespace=namespace)}", ssl=client_ssl, timeout=aiohttp.ClientTimeout(total=30)
            ) as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError):
            pass

    while not stop.is_set():
        for _ in range(PROMETHEUS_QUERIES_PER_SECOND):
            if len(in_flight) < 8:
                task = asyncio.create_task(one(random.choice(namespaces)))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
        await _pause(stop, 1.0)
    for task in list(in_flight):
        task.cancel()
    await asyncio.gather(*in_flight, return_exceptions=True)
