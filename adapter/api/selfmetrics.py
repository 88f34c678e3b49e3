"""The adapter's own metrics (`/metrics`): request and source latency, age of the figures it serves, connections.

The parts add their own collectors to the same registry where they are built (adapter/podcache/selfmetrics.py,
adapter/sources/feedmetrics.py, adapter/auth/selfmetrics.py, adapter/keda/selfmetrics.py). All names start with
`gpu_pulse_adapter_`, but for the standard `process_*` series (prometheus-client's process collector: CPU time,
memory, file descriptors, start time), which the exporter serves under the same names. The registry is the adapter's
own (not prometheus_client's global one), so two adapters in one process, as in tests, never share counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector

from adapter.api.stalls import Stalls
from toolkit.connections import CLOSED_REASONS_HELP, ConnectionStats
from toolkit.negotiation import content_type, wants_openmetrics

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_AGE_BUCKETS = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0)


class GuardedConnections(Protocol):
    def stats(self) -> ConnectionStats: ...


class ConnectionsCollector(Collector):
    """The HTTP server's connection counts, read at scrape time from its guard (toolkit.connections)."""

    def __init__(self, connections: GuardedConnections) -> None:
        self._connections = connections

    def collect(self) -> Iterable[Metric]:
        stats = self._connections.stats()
        yield GaugeMetricFamily("gpu_pulse_adapter_http_connections", "HTTP connections open.", value=stats.open)
        yield GaugeMetricFamily(
            "gpu_pulse_adapter_http_connections_max",
            "The cap on open HTTP connections (--max-connections).",
            value=stats.limit,
        )
        yield CounterMetricFamily(
            "gpu_pulse_adapter_http_connections_accepted",
            "HTTP connections accepted since the start.",
            value=stats.accepted,
        )
        closed = CounterMetricFamily(
            "gpu_pulse_adapter_http_connections_closed",
            f"HTTP connections the server closed on its own, by reason: {CLOSED_REASONS_HELP}.",
            labels=["reason"],
        )
        for reason, count in stats.closed_by_reason():
            closed.add_metric([reason], count)
        yield closed


class AdapterMetrics:
    def __init__(self, source: str, version: str = "0.1.0") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Histogram(
            "gpu_pulse_adapter_request_duration_seconds",
            "Time to answer an API request, by API group, version and HTTP status code.",
            ["group", "version", "code"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.source_calls = Histogram(
            "gpu_pulse_adapter_source_duration_seconds",
            "Time of one call to the number source (an exporter /pods fetch or a PromQL query), by outcome.",
            ["source", "outcome"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.figure_age = Histogram(
            "gpu_pulse_adapter_served_figure_age_seconds",
            "Age of the oldest figure behind each answer, from its sample time to the answer.",
            ["group"],
            buckets=_AGE_BUCKETS,
            registry=self.registry,
        )
        self.served_values = Counter(
            "gpu_pulse_adapter_served_values",
            "Metric values served, by API group.",
            ["group"],
            registry=self.registry,
        )
        self.info = Gauge(
            "gpu_pulse_adapter_build_info",
            "Version and number source of the adapter; always 1.",
            ["version", "source"],
            registry=self.registry,
        )
        self.info.labels(version, source).set(1)
        self._source = source
        self.stalls = Stalls(self.registry)  # the loop's lag and the collector's pauses, watched while the app runs
        # process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds, ... (toolkit.process names them)
        ProcessCollector(registry=self.registry)

    def observe_source_call(self, outcome: str, seconds: float) -> None:
        self.source_calls.labels(self._source, outcome).observe(seconds)

    def source_observer(self, source: str) -> Callable[[str, float], None]:
        """`observe_source_call` for one of several sources running side by side (adapter/sources/routing.py)."""

        def observe(outcome: str, seconds: float) -> None:
            self.source_calls.labels(source, outcome).observe(seconds)

        return observe

    async def handle(self, request: web.Request) -> web.Response:
        """GET /metrics: the registry in the format the scraper asks for (toolkit.negotiation, as the exporter)."""
        openmetrics = wants_openmetrics(request.headers.get("Accept", ""))
        body = generate_openmetrics(self.registry) if openmetrics else generate_latest(self.registry)  # type: ignore[no-untyped-call]
        return web.Response(body=body, headers={"Content-Type": content_type(openmetrics)})
