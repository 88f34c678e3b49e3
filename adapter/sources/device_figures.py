"""From the exporter's `/pods` view to exact figures of one metric: per device, or per pod for an inference figure
(inference_figures)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal, DivisionByZero, InvalidOperation
from types import MappingProxyType
from typing import Any

from adapter.hotpath_caches import EXACT_BOUND, EXACT_FLOATS, EXACT_INTS, keep
from adapter.metrics_config import Figure, MetricDefinition
from adapter.quantity import QuantityError, decimal_from_float
from adapter.saturation import MAX_PERCENT, Reading
from adapter.sources.aggregation import combined_value, scaled
from adapter.sources.inference_figures import (
    INFERENCE_BOUNDS,
    READY,
    inference_labels,
    inference_number,
    inference_reader,
    inference_sampled_at,
)
from adapter.sources.metricsource import DeviceValue, ListedValue, PodSample, ServedValue
from adapter.sources.saturation_figures import driver_counts, saturation_reading
from toolkit.pods_contract import (
    MEMORY_BYTES_BOUNDS,
    POWER_WATTS_BOUNDS,
    UTILIZATION_PERCENT_BOUNDS,
    DeviceFigures,
    PodView,
)

# What each figure's unit allows (the /pods document's bounds; a fraction of memory in use is 0-1). A figure outside
# its bounds comes from a broken or hostile source and never reaches an HPA.
FIGURE_BOUNDS: dict[Figure, tuple[Decimal, Decimal]] = {
    Figure.UTILIZATION_PERCENT: (Decimal(UTILIZATION_PERCENT_BOUNDS[0]), Decimal(UTILIZATION_PERCENT_BOUNDS[1])),
    Figure.MEMORY_USED_BYTES: (Decimal(MEMORY_BYTES_BOUNDS[0]), Decimal(MEMORY_BYTES_BOUNDS[1])),
    Figure.MEMORY_UTILIZATION: (Decimal(0), Decimal(1)),
    Figure.POWER_WATTS: (Decimal(POWER_WATTS_BOUNDS[0]), Decimal(POWER_WATTS_BOUNDS[1])),
    **INFERENCE_BOUNDS,
    Figure.SATURATION: (Decimal(0), MAX_PERCENT),
}


def within_bounds(figure: Figure, value: Decimal) -> bool:
    low, high = FIGURE_BOUNDS[figure]
    return value.is_finite() and low <= value <= high


_UNKNOWN = Decimal("NaN")  # never a kept value: `exact` gives None for what is not finite


def exact(number: float | int) -> Decimal | None:
    """A JSON number as the decimal it stands for (85.3 stays 85.3, float noise goes); None when not finite. Figures
    repeat across pods and documents: each number's decimal is worked out once (adapter.hotpath_caches)."""
    cache: dict[Any, Decimal | None] = EXACT_FLOATS if type(number) is float else EXACT_INTS
    found = cache.get(number, _UNKNOWN)
    if found is not _UNKNOWN:
        return found
    try:
        found = decimal_from_float(number)
    except QuantityError:
        found = None
    return keep(cache, number, found, EXACT_BOUND)


def figure_of(device: DeviceFigures, figure: Figure) -> Decimal | None:
    """One device's figure in its /pods unit, or None when the exporter does not know it (or it is no device
    figure)."""
    if figure.of_inference:
        return None
    if figure is Figure.UTILIZATION_PERCENT:
        return None if device.utilization_percent is None else exact(device.utilization_percent)
    if figure is Figure.MEMORY_USED_BYTES:
        return None if device.memory_used_bytes is None else exact(device.memory_used_bytes)
    if figure is Figure.POWER_WATTS:
        return None if device.power_watts is None else exact(device.power_watts)
    used, total = device.memory_used_bytes, device.memory_total_bytes
    if used is None or not total:
        return None
    try:
        fraction = Decimal(used) / Decimal(total)
    except (DivisionByZero, InvalidOperation):  # pragma: no cover - total is checked non-zero above
        return None
    return fraction if within_bounds(Figure.MEMORY_UTILIZATION, fraction) else None


def device_labels(node: str, container: str, device: DeviceFigures) -> MappingProxyType[str, str]:
    """The labels `metricLabelSelector` matches, named like the exporter's per-pod series."""
    labels = {
        "node": node,
        "container": container,
        "gpu": str(device.gpu),
        "uuid": device.gpu_uuid,
        "share": device.share,
    }
    if device.gpu_instance is not None:
        labels["gpu_instance"] = str(device.gpu_instance)
    if device.mig_profile:
        labels["mig_profile"] = device.mig_profile
    return MappingProxyType(labels)


def pod_sample(
    node: str, pod: PodView, metric: MetricDefinition, clock_offset: float = 0.0, generated_at: float | None = None
) -> PodSample | None:
    """A pod's sample of the figure `metric` reads, or None when none of its devices (its engine, for an inference
    figure) has that figure. `clock_offset` places the exporter's sample time on the adapter's clock
    (nodeanswer.exporter_clock_offset); `generated_at` is the document's time on the exporter's clock."""
    figure = metric.figure
    if figure.of_inference:
        return _inference_sample(node, pod, metric, clock_offset, generated_at)
    devices: list[DeviceValue] = []
    for container in pod.containers:
        for device in container.devices:
            value = figure_of(device, figure)
            if value is not None:
                devices.append(DeviceValue(value, device_labels(node, container.name, device)))
    if not devices:
        return None
    return PodSample(
        namespace=pod.namespace,
        name=pod.name,
        devices=tuple(devices),
        sampled_at=pod.sampled_at.timestamp() + clock_offset,
        window_seconds=pod.window_seconds,
        uid=pod.uid,
    )


def _inference_sample(
    node: str, pod: PodView, metric: MetricDefinition, clock_offset: float, generated_at: float | None
) -> PodSample | None:
    inference = pod.inference
    labels = None if inference is None else inference_labels(node, inference)
    if metric.figure is Figure.SATURATION:
        reading = saturation_reading(pod, metric, exact)
        value = None if reading is None else reading.percent
        if labels is not None and reading is not None:  # which term drives it: a metricLabelSelector may pick by it
            labels = MappingProxyType({**labels, "term": reading.driver})
    else:
        number = inference_number(inference, metric)
        value = None if number is None else exact(number)
    if inference is None or labels is None or value is None or not within_bounds(metric.figure, value):
        return None
    return PodSample(
        namespace=pod.namespace,
        name=pod.name,
        devices=(DeviceValue(value, labels),),
        sampled_at=inference_sampled_at(inference, generated_at) + clock_offset,
        window_seconds=inference.window_seconds,
        uid=pod.uid,
    )


def pod_served_value(metric: MetricDefinition, pod: PodView, sampled_at: float) -> ServedValue | None:
    """A pod's value of `metric` over all its devices, as `aggregation.pod_value` gives it for the pod's `pod_sample`,
    without building the sample (its device labels are only needed for a metricLabelSelector): this is worked out
    for every pod of every document that arrives. `sampled_at`: the pod's sample time on the adapter's clock."""
    figure = metric.figure
    containers = pod.containers
    if len(containers) == 1 and len(containers[0].devices) == 1:  # most pods: one container on one device
        value = figure_of(containers[0].devices[0], figure)
        found = [] if value is None else [value]
    else:
        found = [
            value
            for container in containers
            for device in container.devices
            if (value := figure_of(device, figure)) is not None
        ]
    if not found:
        return None
    return combined_value(metric, found, sampled_at, pod.window_seconds)


# the figures a device carries as they are (memory utilization is worked out from two)
_PLAIN_FIGURES = {
    Figure.UTILIZATION_PERCENT: "utilization_percent",
    Figure.MEMORY_USED_BYTES: "memory_used_bytes",
    Figure.POWER_WATTS: "power_watts",
}
_ONE = Decimal(1)


def listed_values(
    metric: MetricDefinition, pods: Iterable[PodView], clock_offset: float, generated_at: float | None = None
) -> dict[str, dict[str, ListedValue]]:
    """Each pod's value of `metric` (`pod_served_value`) with its uid, by namespace and then pod name: what the direct
    source works out for every document that arrives, so the common case (one container on one device, a figure as
    the device carries it, no scale) is done inline. `clock_offset` places the exporter's sample times on the adapter's
    clock. Keyed by names, not (namespace, name) tuples, so that nothing in it is tracked by the garbage collector
    (metricsource.ListedValue). `generated_at`: the document's time on the exporter's clock, which no inference figure
    is taken as sampled after (inference_figures)."""
    if metric.figure is Figure.SATURATION:
        return listed_saturation(metric, pods, clock_offset, generated_at)[0]
    if metric.figure.of_inference:
        return _listed_inference_values(metric, pods, clock_offset, generated_at)
    attribute = _PLAIN_FIGURES.get(metric.figure)
    plain = attribute is not None and metric.scale == _ONE
    fixed_window = metric.window_seconds
    found: dict[str, dict[str, ListedValue]] = {}
    last_at, when = None, 0.0  # a document's pods mostly share one sample time
    last_namespace = ""  # a document's pods mostly come namespace by namespace
    in_namespace: dict[str, ListedValue] = {}
    for pod in pods:
        if pod.sampled_at != last_at:
            last_at = pod.sampled_at
            when = last_at.timestamp() + clock_offset
        containers = pod.containers
        if plain and len(containers) == 1 and len(containers[0].devices) == 1:
            raw = getattr(containers[0].devices[0], attribute)  # type: ignore[arg-type]
            value = None if raw is None else exact(raw)
            if value is None:
                continue
            window = fixed_window if fixed_window is not None else max(1, math.ceil(pod.window_seconds))
            served = ServedValue(value, when, window)
        else:
            combined = pod_served_value(metric, pod, when)
            if combined is None:
                continue
            served = combined
        if pod.namespace != last_namespace or not found:
            last_namespace = pod.namespace
            in_namespace = found.setdefault(last_namespace, {})
        in_namespace[pod.name] = ListedValue(served, pod.uid)
    return found


def _listed_inference_values(
    metric: MetricDefinition, pods: Iterable[PodView], clock_offset: float, generated_at: float | None
) -> dict[str, dict[str, ListedValue]]:
    """`listed_values` of an inference figure: the pods whose engine is ready and gives it, each value as
    `_inference_sample` and `aggregation.pod_value` would give it, inline (this runs for every document that
    arrives). The figures' bounds are the document's, checked as it is decoded (toolkit.pods_contract)."""
    read = inference_reader(metric)
    scale = metric.scale
    fixed_window = metric.window_seconds
    latest = math.inf if generated_at is None else generated_at
    found: dict[str, dict[str, ListedValue]] = {}
    last_at, when = None, 0.0  # a document's engines are mostly read at one time, over one window
    last_window, window = -1.0, 0
    for pod in pods:
        inference = pod.inference
        if inference is None or inference.state != READY:  # most GPU pods run no engine the exporter reads
            continue
        number = read(inference)
        value = None if number is None else exact(number)
        if value is None:
            continue
        if scale != _ONE:
            value = scaled(value, scale)
        if inference.sampled_at != last_at:
            last_at = inference.sampled_at
            when = min(last_at.timestamp(), latest) + clock_offset
        if inference.window_seconds != last_window:
            last_window = inference.window_seconds
            window = fixed_window if fixed_window is not None else max(1, math.ceil(last_window))
        found.setdefault(pod.namespace, {})[pod.name] = ListedValue(ServedValue(value, when, window), pod.uid)
    return found


def listed_saturation(
    metric: MetricDefinition, pods: Iterable[PodView], clock_offset: float, generated_at: float | None = None
) -> tuple[dict[str, dict[str, ListedValue]], Mapping[str, int]]:
    """`listed_values` of a saturation figure (saturation_figures), and how many of the listed pods each term drives
    (for the adapter's self-metric, worked out as the values are)."""
    scale = metric.scale
    fixed_window = metric.window_seconds
    latest = math.inf if generated_at is None else generated_at
    found: dict[str, dict[str, ListedValue]] = {}
    readings: list[Reading] = []
    last_at, when = None, 0.0  # a document's engines are mostly read at one time, over one window
    last_window, window = -1.0, 0
    for pod in pods:
        inference = pod.inference
        if inference is None or inference.state != READY:
            continue
        reading = saturation_reading(pod, metric, exact)
        if reading is None:
            continue
        readings.append(reading)
        value = reading.percent if scale == _ONE else scaled(reading.percent, scale)
        if inference.sampled_at != last_at:
            last_at = inference.sampled_at
            when = min(last_at.timestamp(), latest) + clock_offset
        if inference.window_seconds != last_window:
            last_window = inference.window_seconds
            window = fixed_window if fixed_window is not None else max(1, math.ceil(last_window))
        found.setdefault(pod.namespace, {})[pod.name] = ListedValue(ServedValue(value, when, window), pod.uid)
    return found, driver_counts(readings)
