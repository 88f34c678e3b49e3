"""A pod's saturation (adapter.saturation) from its `/pods` view: its engine's signals and its GPUs' utilization.

Only an engine in the `ready` state has a saturation, as every inference figure (inference_figures). The latency
terms read the percentile their SLO names; the idle floor and the cap read the pod's busiest GPU (its utilization
over the exporter's window), so a pod on several GPUs is idle only when all of them are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from adapter.metrics_config import MetricDefinition
from adapter.quantity import QuantityError, decimal_from_float
from adapter.saturation import DRIVERS, LatencySlo, Reading, SaturationSpec, Signals, saturation
from adapter.sources.inference_figures import READY
from toolkit.pods_contract import InferenceFigures, LatencyQuantiles, PodView


def _decimal(number: float | None) -> Decimal | None:
    if number is None:
        return None
    try:
        return decimal_from_float(number)
    except QuantityError:
        return None


def _latency(quantiles: LatencyQuantiles | None, slo: LatencySlo | None) -> Decimal | None:
    if quantiles is None or slo is None:
        return None
    return _decimal(getattr(quantiles, slo.percentile))


def busiest_gpu_percent(pod: PodView) -> Decimal | None:
    """The utilization of the pod's busiest GPU (percent over the exporter's window); None when none is known (a MIG
    instance has none: toolkit.pods_contract)."""
    known = [
        value
        for container in pod.containers
        for device in container.devices
        if (value := _decimal(device.utilization_percent)) is not None
    ]
    return max(known) if known else None


def signals_of(pod: PodView, inference: InferenceFigures, spec: SaturationSpec) -> Signals:
    """The pod's signals that `spec`'s terms, idle floor and cap read."""
    return Signals(
        queued_requests=_decimal(inference.queued_requests),
        kv_cache_utilization=_decimal(inference.kv_cache_utilization),
        time_to_first_token_seconds=_latency(inference.time_to_first_token_seconds, spec.time_to_first_token),
        inter_token_latency_seconds=_latency(inference.inter_token_latency_seconds, spec.inter_token_latency),
        gpu_utilization_percent=busiest_gpu_percent(pod),
    )


def saturation_reading(pod: PodView, metric: MetricDefinition) -> Reading | None:
    """The pod's saturation as `metric` configures it; None when its engine is not ready, no term has its signal, or
    the metric is no saturation figure."""
    inference = pod.inference
    spec = metric.saturation
    if spec is None or inference is None or inference.state != READY:
        return None
    return saturation(signals_of(pod, inference, spec), spec)


def driver_counts(readings: Iterable[Reading]) -> Mapping[str, int]:
    """How many of `readings` each term drives (every term and `idle`, zeros included)."""
    counts = dict.fromkeys(DRIVERS, 0)
    for reading in readings:
        counts[reading.driver] += 1
    return counts
