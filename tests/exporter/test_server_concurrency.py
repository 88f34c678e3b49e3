"""200 concurrent scrapes while the loop polls every 20 ms: every response is a complete exposition of one snapshot.

Each response is compared byte for byte with what the renderer produced for the snapshot it claims to come from (by its
`gpu_pulse_snapshot_timestamp_seconds`), and that with a fresh rendering of the snapshot, so a response mixing two
cycles, or cut short, cannot pass.
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

INTERVAL = 0.02
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
        server = await start_server(build_app(loop), ListenAddress("127.0.0.1", 0))
        try:
            # past the first cycles, whose series are still filling in (GPM ratios need samples > 100 ms apart)
            while (published := loop.published) is None or published.cycle < 15:
                await asyncio.sleep(INTERVAL)
            scrapes: list[Scrape] = []
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False) as session:
                for _ in range(5):  # bursts of 200 until responses span more than one cycle
                    burst = [_scrape(session, server.url + "/metrics", VARIANTS[i % 4]) for i in range(200)]
                    scrapes += await asyncio.gather(*burst)
                    stamps = {_timestamp(s.body.decode()) for s in scrapes}
                    if len(stamps) > 1:
                        break
        finally:
            await server.stop()
    assert len(stamps) > 1, "the loop polled during the scrapes"
    fresh: dict[float, tuple[bytes, bytes]] = {}
    for scrape in scrapes:
        assert scrape.encoding == ("gzip" if scrape.gzip_asked else None)
        stamp = _timestamp(scrape.body.decode())
        snapshot, rendered = recorder.seen[stamp]
        assert scrape.body == (rendered.openmetrics if scrape.openmetrics else rendered.text), "one snapshot, whole"
        if stamp not in fresh:  # and those bytes are that snapshot's: a fresh renderer agrees
            again = ExpositionRenderer(Dialect.DCGM, interval_seconds=INTERVAL, version="test").render(snapshot)
            fresh[stamp] = (again.text, again.openmetrics)
        assert (rendered.text, rendered.openmetrics) == fresh[stamp]
    # identical bodies were checked above; parse each distinct one (the parsers reject an incomplete document). The
    # set of series may differ between two cycles' snapshots: on a loaded machine a GPU whose read outlasts the
    # collector's slow-call deadline (the poll interval, 20 ms here) is reported stalled for that cycle, with other
    # series (exporter/nvml/collector.py). So each snapshot's responses are compared with that snapshot's rendering
    # above, not with another cycle's.
    distinct = {(scrape.openmetrics, scrape.body) for scrape in scrapes}
    series = {(om, _series(body.decode(), om)) for om, body in distinct}
    assert {om for om, _ in series} == {False, True}
    assert all(sets for _, sets in series)
    assert all(body.endswith(b"\n# EOF\n") == om for om, body in distinct)
