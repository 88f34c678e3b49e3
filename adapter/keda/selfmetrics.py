"""The external scaler's own metrics, in the adapter's registry (served on its `/metrics`): call durations and activity
changes as they happen, and the streams and followed workloads read from the scaler at scrape time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from adapter.keda.admission import CallAdmission
    from adapter.keda.front import ScalerFront

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LiveScaler(Protocol):
    @property
    def streams(self) -> int:
        """StreamIsActive streams open."""
        ...

    @property
    def workloads(self) -> int:
        """Workloads whose activity is followed."""
        ...


class ScalerCollector(Collector):
    def __init__(self, scaler: LiveScaler) -> None:
        self._scaler = scaler

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "gpu_pulse_adapter_keda_streams", "StreamIsActive streams KEDA holds open.", value=self._scaler.streams
        )
        yield GaugeMetricFamily(
            "gpu_pulse_adapter_keda_workloads",
            "Workloads whose activity the external scaler follows (those KEDA asked about recently).",
            value=self._scaler.workloads,
        )


class AdmissionCollector(Collector):
    """The calls waiting for their request message, and those the port ended (keda/admission.py)."""

    def __init__(self, admission: CallAdmission) -> None:
        self._admission = admission

    def collect(self) -> Iterable[Metric]:
        stats = self._admission.stats()
        yield GaugeMetricFamily(
            "gpu_pulse_adapter_keda_calls_waiting",
            "Calls of the external scaler whose request message has not arrived yet.",
            value=stats.waiting,
        )
        ended = CounterMetricFamily(
            "gpu_pulse_adapter_keda_calls_ended",
            "Calls the external scaler ended before answering, by reason: request_timeout (no request message in "
            "time), displaced (ended while waiting for it, for a newer call), too_many (unary calls in flight past "
            "the bound).",
            labels=["reason"],
        )
        ended.add_metric(["request_timeout"], stats.request_timeouts)
        ended.add_metric(["displaced"], stats.displaced)
        ended.add_metric(["too_many"], stats.refused)
        yield ended


class FrontCollector(Collector):
    """The port's connections, and those its front closed (keda/front.py)."""

    def __init__(self, front: ScalerFront) -> None:
        self._front = front

    def collect(self) -> Iterable[Metric]:
        stats = self._front.stats
        yield GaugeMetricFamily(
            "gpu_pulse_adapter_keda_connections",
            "Connections the external scaler's port holds.",
            value=self._front.connections,
        )
        closed = CounterMetricFamily(
            "gpu_pulse_adapter_keda_connections_closed",
            "Connections the external scaler's port closed, by reason: over_limit (past --keda-max-connections, as "
            "accepted), handshake (no TLS handshake and HTTP/2 preface in time, or not HTTP/2), resets and settings "
            "(stream resets or SETTINGS frames past their rate: GOAWAY ENHANCE_YOUR_CALM).",
            labels=["reason"],
        )
        for reason, count in stats.closed.items():
            closed.add_metric([reason], count)
        yield closed


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

    def activity_changed(self, active: bool) -> None:
        self.activity_changes.labels("active" if active else "inactive").inc()
