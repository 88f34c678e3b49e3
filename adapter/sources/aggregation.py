"""From source samples to served values: filter a pod's device figures, combine them, scale them.

A pod's value combines the figures of its GPUs (mean, max or sum, as the metric says); an object standing for several
pods (a Deployment, a Namespace, an external metric's selection) combines the figures of all their GPUs the same way,
so the mean of a workload is the mean over its GPUs. The sample time of a combined value is that of its oldest figure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import ROUND_HALF_EVEN, Context, Decimal

from adapter.metrics_config import Combine, MetricDefinition
from adapter.selectors import Selector
from adapter.sources.metricsource import PodSample, ServedValue

DEFAULT_WINDOW_SECONDS = 60  # the HPA's own assumption when a metric says nothing
# Arithmetic in an explicit context (not the thread's): sums of figures are exact, a mean keeps 34 digits, far finer
# than the nano step a Quantity keeps.
_ARITHMETIC = Context(prec=34, rounding=ROUND_HALF_EVEN)
_ONE = Decimal(1)


def combine(values: list[Decimal], how: Combine) -> Decimal:
    if len(values) == 1:
        return values[0]
    if how is Combine.MAX:
        return max(values)
    total = values[0]
    for value in values[1:]:
        total = _ARITHMETIC.add(total, value)
    return _ARITHMETIC.divide(total, len(values)) if how is Combine.MEAN else total


def scaled(value: Decimal, scale: Decimal) -> Decimal:
    """`value` x `scale`, in the arithmetic's context."""
    return _ARITHMETIC.multiply(value, scale)


def _window(metric: MetricDefinition, window: float) -> int:
    if metric.window_seconds is not None:
        return metric.window_seconds
    return max(1, math.ceil(window)) if window > 0 else DEFAULT_WINDOW_SECONDS


def combined_value(
    metric: MetricDefinition, figures: list[Decimal], sampled_at: float, window_seconds: float | None
) -> ServedValue:
    """The served value of one pod's device figures (at least one), sampled at `sampled_at`."""
    value = figures[0] if len(figures) == 1 else combine(figures, metric.combine)
    if metric.scale != _ONE:
        value = _ARITHMETIC.multiply(value, metric.scale)
    return ServedValue(value, sampled_at, _window(metric, window_seconds or 0.0))


def pod_value(metric: MetricDefinition, sample: PodSample) -> ServedValue:
    """One pod's value over all its devices: `served_value` for the most common case, without its generality."""
    return combined_value(metric, [d.value for d in sample.devices], sample.sampled_at, sample.window_seconds)


def served_value(
    metric: MetricDefinition, samples: Iterable[PodSample], metric_selector: Selector
) -> ServedValue | None:
    """The value of `metric` over the devices of `samples` that `metric_selector` keeps; None when none is left."""
    figures: list[Decimal] = []
    oldest = math.inf
    window = 0.0
    everything = metric_selector.empty
    for sample in samples:
        if everything:
            kept = [d.value for d in sample.devices]
        else:
            kept = [d.value for d in sample.devices if metric_selector.matches(d.labels)]
        if not kept:
            continue
        figures.extend(kept)
        oldest = min(oldest, sample.sampled_at)
        window = max(window, sample.window_seconds or 0.0)
    if not figures:
        return None
    value = combine(figures, metric.combine)
    if metric.scale != _ONE:
        value = _ARITHMETIC.multiply(value, metric.scale)
    return ServedValue(value, oldest, _window(metric, window))
