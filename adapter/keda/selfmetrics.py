"""The external scaler's own metrics, in the adapter's registry (served on its `/metrics`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Live(Collector):
    """Counts read at scrape time from the live server and board."""

    def __init__(self) -> None:
        self.streams: Callable[[], int] = lambda: 0
        self.workloads: Callable[[], int] = lambda: 0

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "gpu_pulse_adapter_keda_streams", "StreamIsActive streams KEDA holds open.", value=self.streams()
        )
        yield GaugeMetricFamily(
            "gpu_pulse_adapter_keda_workloads",
            "Workloads whose activity the external scaler follows (those KEDA asked about recently).",
            value=self.workloads(),
        )


class KedaMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Histogram(
            "gpu_pulse_adapter_keda_call_duration_seconds",
            "Time to answer a call of KEDA's external scaler API, by method and gRPC status code (streams: until "
            "the first message or the refusal).",
            ["method", "code"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.activity_changes = Counter(
            "gpu_pulse_adapter_keda_activity_changes",
            "Workloads that became active or inactive (after hysteresis), by the new state.",
            ["state"],
            registry=registry,
        )
        self.live = _Live()
        registry.register(self.live)

    def activity_changed(self, active: bool) -> None:
        self.activity_changes.labels("active" if active else "inactive").inc()
