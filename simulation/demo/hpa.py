"""What a HorizontalPodAutoscaler would do with the figures the adapter serves: its replica calculation for a Pods
metric with an AverageValue target (kubernetes pkg/controller/podautoscaler/replica_calculator.go).

Values are read as the HPA reads quantities (milli-units, rounded up). With every pod reporting: desired =
ceil(ratio x pods), where ratio = average / target, unless |1 - ratio| <= tolerance (then nothing changes). Pods
without a value count as using the target when the others say "scale down", and as 0 when they say "scale up"; if
that flips the direction or lands within the tolerance, nothing changes. The result is then held within the HPA's
minimum and maximum replicas; its scaling behaviour (stabilization windows, rate policies) is not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

DEFAULT_TOLERANCE = 0.1


def milli_units(value: Decimal) -> int:
    """A quantity as the HPA reads it: milli-units, rounded up."""
    return int((value * 1000).to_integral_value(rounding=ROUND_CEILING))


@dataclass(frozen=True, slots=True)
class ScaleSuggestion:
    current: int
    desired: int
    ratio: float | None  # average over the pods with a value, divided by the target; None without values
    missing: int  # pods without a value

    @property
    def verdict(self) -> str:
        if self.ratio is None:
            return "no figures: the HPA would not scale"
        if self.desired > self.current:
            return "scale up"
        if self.desired < self.current:
            return "scale down"
        return "stay (within tolerance)" if abs(1.0 - self.ratio) <= DEFAULT_TOLERANCE else "stay"


def suggest_replicas(
    pods: Sequence[str],
    values: Mapping[str, Decimal],
    target: Decimal,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    min_replicas: int = 1,
    max_replicas: int | None = None,
) -> ScaleSuggestion:
    """The desired replica count for `pods` (the current ones, all ready) given the served `values` by pod name."""
    suggestion = _calculate(pods, values, target, tolerance)
    desired = max(suggestion.desired, min_replicas)
    if max_replicas is not None:
        desired = min(desired, max_replicas)
    return ScaleSuggestion(suggestion.current, desired, suggestion.ratio, suggestion.missing)


def _calculate(
    pods: Sequence[str], values: Mapping[str, Decimal], target: Decimal, tolerance: float
) -> ScaleSuggestion:
    target_milli = milli_units(target)
    if target_milli <= 0:
        raise ValueError(f"the target must be positive, got {target}")
    current = len(pods)
    usage = {pod: milli_units(values[pod]) for pod in pods if pod in values}
    missing = [pod for pod in pods if pod not in values]
    if not usage:
        return ScaleSuggestion(current, current, None, len(missing))
    ratio = sum(usage.values()) / len(usage) / target_milli
    if not missing:
        desired = current if abs(1.0 - ratio) <= tolerance else math.ceil(ratio * len(usage))
        return ScaleSuggestion(current, desired, ratio, 0)
    assumed = target_milli if ratio < 1.0 else 0
    filled = [*usage.values(), *(assumed for _ in missing)]
    new_ratio = sum(filled) / len(filled) / target_milli
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return ScaleSuggestion(current, current, ratio, len(missing))
    desired = math.ceil(new_ratio * len(filled))
    if (new_ratio < 1.0 and desired > current) or (new_ratio > 1.0 and desired < current):
        desired = current
    return ScaleSuggestion(current, desired, ratio, len(missing))
