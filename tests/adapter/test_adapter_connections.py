"""Hostile clients against the adapter as `Adapter.serve` runs it (TLS, client certificates requested): handshakes
never started, TLS connections that never send a request, more connections than the cap, malformed requests. Low caps
and short timeouts, as the flags would set them; a few dozen sockets."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapter.api.selfmetrics import AdapterMetrics, ConnectionsCollector
from adapter.application import build_app
from adapter.metrics_config import default_metrics_config
from adapter.server import Adapter
from adapter.settings import ListenAddress
from adapter.sources.direct import DirectSource
from adapter.sources.nodefeeds import NodeFeeds
from tests.adapter.simcluster import Cluster
from toolkit.certs import CertificateAuthority
from toolkit.connections import ConnectionGuard, ConnectionLimits
from toolkit.kubeclient import api_client
from toolkit.logthrottle import installed_throttle
from toolkit.selfsigned import build_server_ssl_context

LIMITS = ConnectionLimits(max_connections=8, header_read_timeout=0.5, idle_timeout=1.0)


class Served:
    def __init__(self, adapter: Adapter, metrics: AdapterMetrics, url: str) -> None:
        self.adapter, self.metrics, self.url = adapter, metrics, url
        host, _, port = url.removeprefix("https://").rpartition(":")
        self.host, self.port = host, int(port)


@pytest.fixture
async def served(cluster: Cluster, tmp_path: Path) -> AsyncIterator[Served]:
    client_ca = CertificateAuthority.create("clients")
    context = build_server_ssl_context(None, None, tmp_path, (), client_ca_data=[client_ca.cert_pem])
    metrics = AdapterMetrics("direct")
    source = DirectSource(cluster.locator(), NodeFeeds(timeout=1.0))
    app = build_app(config=default_metrics_config(), pods=cluster.pods, source=source, metrics=metrics)
    connections = ConnectionGuard(LIMITS)
    metrics.registry.register(ConnectionsCollector(connections))  # as adapter/parts.py does
    adapter = Adapter(app, context, ListenAddress("127.0.0.1", 0), api_client(base_url=cluster.kube.url), connections)
    stop = asyncio.Event()
    urls: asyncio.Queue[str] = asyncio.Queue()
    task = asyncio.create_task(adapter.serve(stop, [urls.put_nowait]))
    url = await asyncio.wait_for(urls.get(), 30)
    try:
        yield Served(adapter, metrics, url)
    finally:
        stop.set()
        await task


def client_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


async def closed_by_server(reader: asyncio.StreamReader, within: float = 10.0) -> bool:
    """Whether the server closes the connection before `within` seconds pass (a generous bound, not a speed)."""
    try:
        while await asyncio.wait_for(reader.read(65536), within):
            pass
    except TimeoutError:
        return False
    except (ConnectionError, ssl.SSLError):
        return True
    return True


async def get(served: Served, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(served.url + path, ssl=client_context()) as response:
        return response.status, await response.text()


async def test_tls_connections_that_never_send_a_request_are_closed(served: Served) -> None:
    """Handshake done, no client certificate, no request: the aggregator's idle peers and stalled clients alike."""
    connections = [await asyncio.open_connection(served.host, served.port, ssl=client_context()) for _ in range(4)]
    assert all(await asyncio.gather(*(closed_by_server(reader) for reader, _ in connections)))
    assert served.adapter.connections.stats().header_timeouts == 4
    for _, writer in connections:
        writer.close()


async def test_handshakes_that_never_start_are_given_up(served: Served) -> None:
    connections = [await asyncio.open_connection(served.host, served.port) for _ in range(4)]  # no ClientHello
    assert all(await asyncio.gather(*(closed_by_server(reader) for reader, _ in connections)))
    for _, writer in connections:
        writer.close()


async def test_stalled_clients_beyond_the_cap_never_keep_a_query_out(served: Served) -> None:
    held = []
    for _ in range(20):
        _, writer = await asyncio.open_connection(served.host, served.port, ssl=client_context())
        writer.write(b"GET /healthz HTTP/1.1\r\n")  # half a head
        held.append(writer)
    assert served.adapter.connections.stats().open <= LIMITS.max_connections + 1
    assert [(await get(served, "/healthz"))[0] for _ in range(3)] == [200] * 3
    status, text = await get(served, "/metrics")
    assert status == 200
    closed = {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "gpu_pulse_adapter_http_connections_closed_total"
    }
    assert closed["evicted"] + closed["header_timeout"] >= 20 - LIMITS.max_connections  # room made either way
    for writer in held:
        writer.close()


async def test_malformed_requests_do_not_flood_the_log(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    throttle = installed_throttle("aiohttp.server")  # installed by the server's start
    suppressed_before = throttle.suppressed_total if throttle is not None else 0
    for _ in range(30):
        reader, writer = await asyncio.open_connection(served.host, served.port, ssl=client_context())
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\x00: 1\r\n\r\n")
        assert b" 400 " in await reader.readline()
        writer.close()
    records = [r for r in caplog.records if r.name == "aiohttp.server" and r.levelno >= logging.WARNING]
    assert throttle is not None
    # each one logged or counted as left out (at most one line a second: toolkit.logthrottle's tests hold the clock)
    assert len(records) + throttle.suppressed_total - suppressed_before == 30
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in records)
