"""The direct source's own metrics: the nodes whose `/pods` feeds it follows, the documents they brought and the
requests it made to exporters, read from the feeds' cache at scrape time through its public `size`, `documents` and
`connections`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class NodeFeeds(Protocol):
    @property
    def size(self) -> int:
        """Nodes followed."""
        ...

    @property
    def documents(self) -> int:
        """Documents received, all nodes."""
        ...

    @property
    def connections(self) -> int:
        """Requests made to exporters (each stream is one), all nodes."""
        ...


class NodeFeedsCollector(Collector):
    def __init__(self, feeds: NodeFeeds) -> None:
        self._feeds = feeds

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "gpu_pulse_adapter_node_documents",
            "Nodes whose /pods documents the direct source follows (those queries asked about recently).",
            value=self._feeds.size,
        )
        yield CounterMetricFamily(
            "gpu_pulse_adapter_node_documents_received",
            "Exporter /pods documents received by the direct source, all nodes.",
            value=self._feeds.documents,
        )
        yield CounterMetricFamily(
            "gpu_pulse_adapter_exporter_requests",
            "Requests the direct source made to exporters (each /pods stream is one), all nodes.",
            value=self._feeds.connections,
        )
