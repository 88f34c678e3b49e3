"""What a connection may cost the server, plain and over TLS (issue 21, items 2 and 3): a request head has a total
size bound; a socket the server closed, evicted or gave up on is released within a bounded time whatever its peer
does; the cap counts every socket the server holds, TLS handshakes included.

"Held" is read from the kernel (tests/support/sockets.py: the server's sockets in /proc/net/tcp), not from the guard's
own books: the point is what the process really holds."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.support.sockets import server_sockets
from tests.support.waiting import eventually
from toolkit.certs import CertificateAuthority
from toolkit.connections import ConnectionGuard, ConnectionLimits
from toolkit.memory_return import MemoryReturn
from toolkit.serving import RunningServer, start_server
from toolkit.settings import ListenAddress
from toolkit.tls import server_context

LIMITS = ConnectionLimits(max_connections=8, header_read_timeout=1.0, idle_timeout=2.0, max_head_bytes=16 * 1024)
BIG = b"x" * 256 * 1024  # an answer larger than what the kernel and the transport buffer for a client that never reads

Start = Callable[[bool], Awaitable[RunningServer]]


async def big(request: web.Request) -> web.Response:
    return web.Response(body=BIG)


async def small(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    started: list[RunningServer] = []
    ca = CertificateAuthority.create("test")
    serving = ca.issue_server(["127.0.0.1"])
    serving.write(tmp_path / "tls.crt", tmp_path / "tls.key")

    async def run(tls: bool) -> RunningServer:
        app = web.Application()
        app.router.add_get("/big", big)
        app.router.add_get("/small", small)
        context = server_context(tmp_path / "tls.crt", tmp_path / "tls.key") if tls else None
        server = await start_server(
            app, ListenAddress("127.0.0.1", 0), ssl_context=context, connections=ConnectionGuard(LIMITS)
        )
        started.append(server)
        return server

    yield run
    for server in started:
        await server.stop()


def client_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


Connected = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(server: RunningServer, *, tls: bool | None = None) -> Connected:
    use_tls = server.tls if tls is None else tls
    return await asyncio.open_connection(server.host, server.port, ssl=client_tls() if use_tls else None)


async def get(server: RunningServer, path: str = "/small") -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.url + path, ssl=client_tls() if server.tls else None) as response,
    ):
        await response.read()
        return response.status


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
async def test_a_request_head_past_its_bound_is_431_at_once(start: Start, tls: bool) -> None:
    """Fields of 8 KB, under aiohttp's own limits each, never finished: cut when the whole passes the bound, long
    before the header deadline, and answered, not dropped."""
    server = await start(tls)
    reader, writer = await connect(server)
    writer.write(b"GET /small HTTP/1.1\r\nHost: x\r\n")
    for number in range(4):  # 32 KB in all, twice the bound
        writer.write(b"X-Field-%d: %s\r\n" % (number, b"y" * 8000))
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]
    stats = server.connections.stats()
    assert stats.heads_too_large == 1 and stats.header_timeouts == 0
    writer.close()
    assert await get(server) == 200  # the next client is served as ever


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
async def test_a_head_within_its_bound_is_served(start: Start, tls: bool) -> None:
    server = await start(tls)
    reader, writer = await connect(server)
    writer.write(b"GET /small HTTP/1.1\r\nHost: x\r\nX-Token: %s\r\nConnection: close\r\n\r\n" % (b"t" * 8000))
    await writer.drain()
    assert (await asyncio.wait_for(reader.read(), 10)).startswith(b"HTTP/1.1 200 ")
    writer.close()


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
async def test_clients_that_pipeline_and_never_read_lose_their_sockets(start: Start, tls: bool) -> None:
    """20 requests sent at once, no byte of the answers read: the answers wait on a reader that never reads. The
    server gives up on them (an answer unread for the header deadline, or an idle connection closed and its close not
    taken) and releases the sockets, though the clients keep theirs."""
    server = await start(tls)
    clients = []
    for _ in range(4):
        reader, writer = await connect(server)
        writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
        await writer.drain()
        clients.append((reader, writer))
    await eventually(lambda: server_sockets(server.port) == 0, "every server socket released", 15)
    await eventually(lambda: server.connections.stats().open == 0, "the guard's count follows", 5)
    assert await get(server) == 200
    for _, writer in clients:
        writer.transport.abort()


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
async def test_at_the_cap_evicted_clients_lose_their_sockets_at_once(start: Start, tls: bool) -> None:
    """Clients that are answered but never read, then more clients than the cap: the ones dropped to make room are
    dropped for real (over TLS too, where a graceful close would wait for the peer's close), so the sockets the
    server holds never pass the cap."""
    server = await start(tls)
    held = []
    for _ in range(3 * LIMITS.max_connections):
        reader, writer = await connect(server)
        writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        held.append((reader, writer))
        assert server_sockets(server.port) <= LIMITS.max_connections
    # connected means queued by the kernel: the server evicts as it accepts them
    await eventually(lambda: _taken(server) >= 3 * LIMITS.max_connections, "every connection accepted (or refused)")
    assert server_sockets(server.port) <= LIMITS.max_connections
    assert server.connections.stats().open <= LIMITS.max_connections
    assert server.connections.stats().evicted >= 2 * LIMITS.max_connections
    assert await get(server) == 200
    for _, writer in held:
        writer.transport.abort()


def _taken(server: RunningServer) -> int:
    stats = server.connections.stats()
    return stats.accepted + stats.refused


async def test_tls_handshakes_count_against_the_cap(start: Start) -> None:
    """Connections that never start their TLS handshake hold sockets too: the cap counts them, and a new connection
    takes the place of the oldest, so a client that completes its handshake and asks is always served."""
    server = await start(True)
    idle = []
    for _ in range(3 * LIMITS.max_connections):
        idle.append(await connect(server, tls=False))  # TCP only: no ClientHello
    await asyncio.sleep(0.1)
    assert server_sockets(server.port) <= LIMITS.max_connections
    assert server.connections.stats().open <= LIMITS.max_connections
    assert [await get(server) for _ in range(3)] == [200] * 3
    for _, writer in idle:
        writer.transport.abort()


async def test_a_handshake_that_never_ends_is_cut_at_the_header_deadline(start: Start) -> None:
    server = await start(True)
    _, writer = await connect(server, tls=False)
    await eventually(lambda: server.connections.stats().header_timeouts == 1, "a handshake timeout", 10)
    await eventually(lambda: server_sockets(server.port) == 0, "the socket released", 10)
    writer.transport.abort()


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
async def test_a_closed_connection_whose_peer_does_not_take_the_close_is_aborted(start: Start, tls: bool) -> None:
    """The server closes an idle connection; a peer that neither reads nor answers the close (a TLS close_notify)
    does not keep the socket beyond the grace."""
    server = await start(tls)
    _, writer = await connect(server)
    writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")  # aiohttp closes after the answer
    await writer.drain()
    await eventually(lambda: server_sockets(server.port) == 0, "every server socket released", 15)
    writer.transport.abort()


async def test_what_closed_connections_held_is_handed_back_to_the_system() -> None:
    """512 unfinished heads under the bound took the exporter from 77 to 110 MiB and it kept them after they closed
    (issue 42): once enough connections have closed, the guard trims the C heap (toolkit/memory_return.py)."""
    trims: list[int] = []

    def trim(pad: int) -> int:
        trims.append(pad)
        return 1

    guard = ConnectionGuard(LIMITS)
    guard.memory = MemoryReturn(after_closed=4, min_interval=0.0, trim=trim)
    app = web.Application()
    app.router.add_get("/small", small)
    server = await start_server(app, ListenAddress("127.0.0.1", 0), connections=guard)
    try:
        for _ in range(3):
            connected = await connect(server, tls=False)
            connected[1].write(b"GET /small HTTP/1.1\r\nX-Part: " + b"a" * 8000)
            await connected[1].drain()
            connected[1].close()
        await eventually(lambda: guard.stats().open == 0, "three connections closed")
        guard.sweep()
        assert trims == [], "fewer than after_closed closed: no trim"
        connected = await connect(server, tls=False)
        connected[1].close()
        await eventually(lambda: trims == [0], "the heap trimmed once four connections had closed")
    finally:
        await server.stop()
