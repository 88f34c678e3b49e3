"""The direct source's own metrics: the nodes whose `/pods` feeds it follows, the documents they brought and the
requests it made to exporters, read from the feeds' cache at scrape time through its public `size`, `documents` and
`connections`; and, for each saturation metric, how many pods each term drives in the nodes' newest documents.

The driving-term counts are labelled by metric and term only: both come from the configuration (at most five terms a
metric), so the family's size does not grow with pods, workloads or namespaces. Which pod a term drives is in the
served value itself (its `term` label, for a metricLabelSelector) and in the demo's summary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from adapter.metrics_config import MetricDefinition
from adapter.saturation import DRIVERS


class Answer(Protocol):
    def drivers(self, metric: MetricDefinition) -> Mapping[str, int] | None:
        """How many pods each term of a saturation metric drives, once its values are worked out."""
        ...


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

    def current_answers(self) -> Sequence[Answer]:
        """The newest answer of each node followed that answers now."""
        ...


class NodeFeedsCollector(Collector):
    def __init__(self, feeds: NodeFeeds, saturation_metrics: Iterable[MetricDefinition] = ()) -> None:
        """`saturation_metrics`: the configured metrics whose figure is saturation, whose driving terms are counted."""
        self._feeds = feeds
        self._saturation = {metric.name: metric for metric in saturation_metrics}  # custom and external share names

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
        driving = GaugeMetricFamily(
            "gpu_pulse_adapter_saturation_driving_pods",
            "Pods whose saturation metric's value a term drives (idle: the idle floor applies), in the newest "
            "documents of the nodes the direct source follows; counted once a query has asked for the metric.",
            labels=["metric", "term"],
        )
        if self._saturation:
            answers = self._feeds.current_answers()
            for name, metric in self._saturation.items():
                totals = dict.fromkeys(DRIVERS, 0)
                for answer in answers:
                    for term, count in (answer.drivers(metric) or {}).items():
                        totals[term] += count
                for term, count in totals.items():
                    driving.add_metric([name, term], count)
        yield driving
