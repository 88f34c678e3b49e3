"""Hostile clients against the exporter's server as the CLI starts it (`start_server`): stalled request heads, idle
connections, more connections than the cap, malformed requests that must not flood the log. Low caps and short
timeouts set as the flags would; a few dozen sockets."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from exporter.attribution.pods_builder import PodsDocumentBuilder
from exporter.catalogue import Dialect
from exporter.exposition import ExpositionRenderer
from exporter.loop import PollLoop
from exporter.server import build_app
from tests.support.clocks import ManualClock
from tests.support.snapshots import SimulatedNode, simulated_node
from tests.support.waiting import eventually
from toolkit.connections import ConnectionGuard, ConnectionLimits
from toolkit.logthrottle import installed_throttle
from toolkit.serving import RunningServer, start_server
from toolkit.settings import ListenAddress

LIMITS = ConnectionLimits(max_connections=8, header_read_timeout=0.5, idle_timeout=1.0)
HALF_A_HEAD = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"  # never finished


@pytest.fixture
def node() -> Iterator[SimulatedNode]:
    with simulated_node("h100x8", pods_view=PodsDocumentBuilder(interval_seconds=1.0), clock=ManualClock()) as node:
        node.loop.poll_once()
        yield node


@pytest.fixture
async def server(node: SimulatedNode) -> AsyncIterator[RunningServer]:
    running = await start_server(
        build_app(node.loop, run_poll_loop=False), ListenAddress("127.0.0.1", 0), connections=ConnectionGuard(LIMITS)
    )
    yield running
    await running.stop()


async def connect(server: RunningServer, first: bytes = b"") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    if first:
        writer.write(first)
        await writer.drain()
    return reader, writer


async def closed_by_server(reader: asyncio.StreamReader, within: float = 10.0) -> bool:
    """Whether the server closes the connection (EOF) before `within` seconds pass (a generous bound, not a speed)."""
    try:
        while await asyncio.wait_for(reader.read(65536), within):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


async def scrape(server: RunningServer) -> int:
    async with aiohttp.ClientSession() as session, session.get(server.url + "/metrics") as response:
        await response.read()
        return response.status


async def test_a_request_head_that_never_ends_is_cut_off(server: RunningServer) -> None:
    stalled = [await connect(server, HALF_A_HEAD) for _ in range(3)]
    silent = [await connect(server) for _ in range(3)]
    results = await asyncio.gather(*(closed_by_server(reader) for reader, _ in stalled + silent))
    assert all(results), results
    assert server.connections.stats().header_timeouts == 6
    for _, writer in stalled + silent:
        writer.close()


async def test_connections_show_in_the_self_metrics(node: SimulatedNode) -> None:
    guard = ConnectionGuard(LIMITS)
    renderer = ExpositionRenderer(Dialect.DCGM, interval_seconds=1.0, version="test")
    # as the CLI builds it: the loop reads the guard's counts into each snapshot
    poll_loop = PollLoop(node.collector, renderer, interval=1.0, node="sim-node", connection_stats=guard.stats)
    poll_loop.poll_once()
    server = await start_server(
        build_app(poll_loop, run_poll_loop=False), ListenAddress("127.0.0.1", 0), connections=guard
    )
    try:
        await _connections_in_the_self_metrics(server, poll_loop)
    finally:
        await server.stop()


async def _connections_in_the_self_metrics(server: RunningServer, poll_loop: PollLoop) -> None:
    _, writer = await connect(server, HALF_A_HEAD)
    while server.connections.stats().header_timeouts < 1:
        await asyncio.sleep(0.05)
    writer.close()
    poll_loop.poll_once()
    async with aiohttp.ClientSession() as session, session.get(server.url + "/metrics") as response:
        text = await response.text()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("gpu_pulse_http_connections")
    }
    assert samples[("gpu_pulse_http_connections_max", ())] == LIMITS.max_connections
    assert samples[("gpu_pulse_http_connections_closed_total", (("reason", "header_timeout"),))] == 1
    assert samples[("gpu_pulse_http_connections_closed_total", (("reason", "refused"),))] == 0
    assert samples[("gpu_pulse_http_connections_accepted_total", ())] >= 1


async def test_an_idle_kept_alive_connection_is_closed(server: RunningServer) -> None:
    reader, writer = await connect(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await reader.readline()).startswith(b"HTTP/1.1 200")
    assert await closed_by_server(reader)
    assert server.connections.stats().idle_timeouts == 1
    writer.close()


def _taken(server: RunningServer) -> int:
    stats = server.connections.stats()
    return stats.accepted + stats.refused


async def test_stalled_clients_beyond_the_cap_never_keep_a_scrape_out(server: RunningServer) -> None:
    held = [await connect(server, HALF_A_HEAD) for _ in range(24)]  # three times the cap
    # connected means queued by the kernel: the server evicts as it accepts them
    await eventually(lambda: _taken(server) >= 24, "every connection accepted (or refused)")
    stats = server.connections.stats()
    assert stats.open <= LIMITS.max_connections
    # shed beyond the cap: evicted as they came, or, where connecting all took longer than the head's deadline (a busy
    # machine), closed by it first
    assert stats.evicted + stats.header_timeouts >= 24 - LIMITS.max_connections
    assert [await scrape(server) for _ in range(5)] == [200] * 5
    for _, writer in held:
        writer.close()


async def test_when_every_connection_is_busy_a_new_one_gets_503() -> None:
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="done\n")

    app = web.Application()
    app.router.add_get("/slow", slow)
    limits = ConnectionLimits(max_connections=2, header_read_timeout=5.0, idle_timeout=5.0)
    server = await start_server(app, ListenAddress("127.0.0.1", 0), connections=ConnectionGuard(limits))
    try:
        async with aiohttp.ClientSession() as session:
            busy = [asyncio.create_task(session.get(f"{server.url}/slow")) for _ in range(2)]
            while server.connections.stats().open < 2:
                await asyncio.sleep(0.01)
            reader, writer = await connect(server)
            answer = await asyncio.wait_for(reader.read(), 10)
            assert answer.startswith(b"HTTP/1.1 503") and answer.endswith(b"too many open connections\n")
            assert server.connections.stats().refused == 1
            writer.close()
            release.set()
            for task in busy:
                response = await task
                assert response.status == 200
                response.release()
    finally:
        await server.stop()


async def test_malformed_requests_do_not_flood_the_log(server: RunningServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    throttle = installed_throttle("aiohttp.server")  # installed by the server's start
    suppressed_before = throttle.suppressed_total if throttle is not None else 0
    for number in range(40):
        reader, writer = await connect(
            server, b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header\x00: %d\r\n\r\n" % number
        )
        assert b" 400 " in await reader.readline()
        writer.close()
    records = [r for r in caplog.records if r.name == "aiohttp.server" and r.levelno >= logging.WARNING]
    assert throttle is not None
    # each one logged or counted as left out (at most one line a second: toolkit.logthrottle's tests hold the clock)
    assert len(records) + throttle.suppressed_total - suppressed_before == 40
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in records)
