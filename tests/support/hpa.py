"""The HorizontalPodAutoscaler's replica count for a Pods metric with an AverageValue target, as a reference for
tests (kubernetes pkg/controller/podautoscaler/replica_calculator.go, every ready pod reporting a value): with
`current` pods, desired = ceil(current * average / target), unless |average / target - 1| <= tolerance, when the
count stays."""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import ROUND_CEILING, Decimal


def milli_units(value: Decimal) -> int:
    """A quantity as the HPA reads it: milli-units, rounded up."""
    return int((value * 1000).to_integral_value(rounding=ROUND_CEILING))


def hpa_desired_replicas(values: Sequence[Decimal], target: Decimal, tolerance: float = 0.1) -> int:
    """Desired replicas when each of the `len(values)` current pods reports one value."""
    if not values:
        raise ValueError("the HPA does not scale without a single value")
    current = len(values)
    ratio = sum(milli_units(v) for v in values) / current / milli_units(target)
    if abs(1.0 - ratio) <= tolerance:
        return current
    return math.ceil(ratio * current)
