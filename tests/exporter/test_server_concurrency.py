"""200 concurrent scrapes while the loop publishes new snapshots: every response is a complete exposition of one
snapshot.

The test drives the poll loop's cycles itself (`PollLoop.poll_once` on a worker thread, as the loop's own thread runs
it) between waves of scrapes that stay in flight, so the responses span several snapshots on any machine, however
loaded, without depending on a 20-ms timer. Each response is compared byte for byte with what the renderer produced
for the snapshot it claims to come from (by its `gpu_pulse_snapshot_timestamp_seconds`), and that with a fresh
rendering of the snapshot, so a response mixing two cycles, or cut short, cannot pass.
"""

from __future__ import annotations

import asyncio
import gzip
from dataclasses import dataclass

import aiohttp
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from exporter.attribution.pods_builder import PodsDocumentBuilder
from exporter.catalogue import Dialect
from exporter.exposition import ExpositionRenderer, Rendered
from exporter.exposition.textformat import format_value
from exporter.loop import PollLoop
from exporter.server import build_app
from exporter.snapshot import Snapshot
from tests.support.snapshots import simulated_node
from toolkit.serving import start_server
from toolkit.settings import ListenAddress

INTERVAL = 1.0  # the loop's thread never runs: the test publishes each cycle (and no GPU read outlasts a second)
WAVES = 4  # waves of scrapes, the next snapshot published after the first response of each
SCRAPES = 200
VARIANTS = [
    {},
    {"Accept-Encoding": "gzip"},
    {"Accept": "application/openmetrics-text; version=1.0.0"},
    {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"},
]


class RecordingRenderer(ExpositionRenderer):
    """The real renderer, remembering what it rendered for each snapshot (by the snapshot's time)."""

    def __init__(self) -> None:
        super().__init__(Dialect.DCGM, interval_seconds=INTERVAL, version="test")
        self.seen: dict[float, tuple[Snapshot, Rendered]] = {}

    def render(self, snapshot: Snapshot) -> Rendered:
        rendered = super().render(snapshot)
        self.seen[float(format_value(snapshot.taken_at))] = (snapshot, rendered)  # as served: 15 significant digits
        return rendered


@dataclass(frozen=True)
class Scrape:
    openmetrics: bool
    gzip_asked: bool
    encoding: str | None
    body: bytes


async def _scrape(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Scrape:
    async with session.get(url, headers={"Accept-Encoding": "identity"} | headers) as response:
        assert response.status == 200
        raw = await response.read()
        encoding = response.headers.get("Content-Encoding")
        body = gzip.decompress(raw) if encoding == "gzip" else raw
        return Scrape("openmetrics" in headers.get("Accept", ""), "Accept-Encoding" in headers, encoding, body)


def _timestamp(text: str) -> float:
    for line in text.splitlines():
        if line.startswith("gpu_pulse_snapshot_timestamp_seconds "):
            return float(line.split()[1])
    raise AssertionError("no snapshot timestamp")


def _series(text: str, openmetrics: bool) -> frozenset[tuple[str, tuple[tuple[str, str], ...]]]:
    """The series of a complete document; the real parsers raise on a document cut short."""
    parse = parse_openmetrics if openmetrics else text_string_to_metric_families
    return frozenset((s.name, tuple(sorted(s.labels.items()))) for f in parse(text) for s in f.samples)


async def test_200_concurrent_scrapes_during_polling_get_complete_consistent_expositions() -> None:
    recorder = RecordingRenderer()
    with simulated_node("h100x8", interval=INTERVAL) as node:
        pods_view = PodsDocumentBuilder(interval_seconds=INTERVAL)
        loop = PollLoop(node.collector, recorder, interval=INTERVAL, node="sim-node", pods_view=pods_view)
        await asyncio.to_thread(loop.poll_once)  # a snapshot to serve from the first request on
        server = await start_server(build_app(loop, run_poll_loop=False), ListenAddress("127.0.0.1", 0))
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False) as session:
                in_flight: list[asyncio.Task[Scrape]] = []
                for wave in range(WAVES):
                    size = SCRAPES // WAVES
                    scrapes = [
                        _scrape(session, server.url + "/metrics", VARIANTS[(wave * size + i) % 4]) for i in range(size)
                    ]
                    tasks = [asyncio.create_task(scrape) for scrape in scrapes]
                    in_flight += tasks
                    # once this snapshot has been served, publish the next while the rest of the wave is in flight
                    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                    await asyncio.to_thread(loop.poll_once)
                responses = await asyncio.gather(*in_flight)
        finally:
            await server.stop()
    stamps = {_timestamp(s.body.decode()) for s in responses}
    assert len(responses) == SCRAPES
    # wave k's first response came from snapshot k (published before the wave started, replaced only after it)
    assert len(stamps) >= WAVES, "responses span every snapshot published during the scrapes"
    fresh: dict[float, tuple[bytes, bytes]] = {}
    for scrape in responses:
        assert scrape.encoding == ("gzip" if scrape.gzip_asked else None)
        stamp = _timestamp(scrape.body.decode())
        snapshot, rendered = recorder.seen[stamp]
        assert scrape.body == (rendered.openmetrics if scrape.openmetrics else rendered.text), "one snapshot, whole"
        if stamp not in fresh:  # and those bytes are that snapshot's: a fresh renderer agrees
            again = ExpositionRenderer(Dialect.DCGM, interval_seconds=INTERVAL, version="test").render(snapshot)
            fresh[stamp] = (again.text, again.openmetrics)
        assert (rendered.text, rendered.openmetrics) == fresh[stamp]
    # identical bodies were checked above; parse each distinct one (the parsers reject an incomplete document). The
    # set of series may differ between two cycles' snapshots (a GPU reported stalled for a cycle has other series,
    # exporter/nvml/collector.py), so each response is compared with its own snapshot's rendering above.
    distinct = {(scrape.openmetrics, scrape.body) for scrape in responses}
    series = {(om, _series(body.decode(), om)) for om, body in distinct}
    assert {om for om, _ in series} == {False, True}
    assert all(sets for _, sets in series)
    assert all(body.endswith(b"\n# EOF\n") == om for om, body in distinct)
