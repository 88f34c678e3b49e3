"""A pod's saturation (adapter.saturation) from its `/pods` view: its engine's signals and its GPUs' utilization.

Only an engine in the `ready` state has a saturation, as every inference figure (inference_figures). The latency
terms read the percentile their SLO names; the idle floor and the cap read the pod's busiest GPU (its utilization
over the exporter's window), so a pod on several GPUs is idle only when all of them are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal

from adapter.metrics_config import MetricDefinition
from adapter.quantity import QuantityError, decimal_from_float
from adapter.saturation import DRIVERS, LatencySlo, Reading, SaturationSpec, Signals, saturation
from adapter.sources.inference_figures import READY
from toolkit.pods_contract import InferenceFigures, LatencyQuantiles, PodView

Number = Callable[[float], Decimal | None]  # a JSON number as the decimal it stands for; None when not finite
_ZERO = Decimal(0)


def _decimal(number: float) -> Decimal | None:
    try:
        return decimal_from_float(number)
    except QuantityError:
        return None


def _latency(quantiles: LatencyQuantiles | None, slo: LatencySlo | None, number: Number) -> Decimal | None:
    if quantiles is None or slo is None:
        return None
    value: float | None = getattr(quantiles, slo.percentile)
    return None if value is None else number(value)


def busiest_gpu_percent(pod: PodView, number: Number = _decimal) -> Decimal | None:
    """The utilization of the pod's busiest GPU (percent over the exporter's window); None when none is known (a MIG
    instance has none: toolkit.pods_contract)."""
    known = [
        value
        for container in pod.containers
        for device in container.devices
        if device.utilization_percent is not None and (value := number(device.utilization_percent)) is not None
    ]
    return max(known) if known else None


def signals_of(pod: PodView, inference: InferenceFigures, spec: SaturationSpec, number: Number = _decimal) -> Signals:
    """The pod's signals that `spec`'s terms, idle floor and cap read. The GPUs are read only where the idle floor
    (an empty queue) or the cap could apply: elsewhere they change nothing (adapter.saturation.saturation)."""
    queued = None if inference.queued_requests is None else number(inference.queued_requests)
    kv = None if inference.kv_cache_utilization is None else number(inference.kv_cache_utilization)
    floor = queued == _ZERO and spec.idle_gpu_utilization_percent > _ZERO
    return Signals(
        queued_requests=queued,
        kv_cache_utilization=kv,
        time_to_first_token_seconds=_latency(inference.time_to_first_token_seconds, spec.time_to_first_token, number),
        inter_token_latency_seconds=_latency(inference.inter_token_latency_seconds, spec.inter_token_latency, number),
        gpu_utilization_percent=busiest_gpu_percent(pod, number) if floor or spec.cap is not None else None,
    )


def saturation_reading(pod: PodView, metric: MetricDefinition, number: Number = _decimal) -> Reading | None:
    """The pod's saturation as `metric` configures it; None when its engine is not ready, no term has its signal, or
    the metric is no saturation figure. `number`: how the document's numbers become decimals (the direct source
    passes its cached conversion, device_figures.exact)."""
    inference = pod.inference
    spec = metric.saturation
    if spec is None or inference is None or inference.state != READY:
        return None
    return saturation(signals_of(pod, inference, spec, number), spec)


def driver_counts(readings: Iterable[Reading]) -> Mapping[str, int]:
    """How many of `readings` each term drives (every term and `idle`, zeros included)."""
    counts = dict.fromkeys(DRIVERS, 0)
    for reading in readings:
        counts[reading.driver] += 1
    return counts
