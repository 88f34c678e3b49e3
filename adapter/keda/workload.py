"""A trigger's workload as KEDA asks about it: the pods its selector picks, and their current values of its metric.

The pods come from the pod directory and the values from the source's `pod_values`, exactly as an HPA's Pods-metric
question on custom.metrics.k8s.io gets them (adapter/api/custom.py): the same pods, the same values, the same freshness
(a pod whose figure is older than `--max-age` has none). KEDA's HPA divides the sum of the values by the per-pod target
(`AverageValue`), which is what the HPA's Pods metric computes from their mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from adapter.demand.signals import DemandNotServedError, DemandSignals, DemandUnavailableError
from adapter.keda.trigger import Trigger
from adapter.metrics_config import Combine, MetricDefinition, MetricsConfig
from adapter.sources.aggregation import combine
from adapter.sources.metricsource import MetricSource, PodDirectory, SourceUnavailableError


class UnknownMetricError(LookupError):
    """The trigger names a metric the adapter does not serve for pods."""


class NoFiguresError(Exception):
    """Pods are selected, and none of them has a fresh figure: no value may be served (never a stale one)."""


@dataclass(frozen=True, slots=True)
class Reading:
    """The selected pods' values at one moment. `total` and `busiest` are over the `reporting` pods, those with a
    fresh figure, of the `selected` ones; `sampled_at` is the time of the oldest figure behind them."""

    selected: int
    reporting: int
    total: Decimal
    busiest: Decimal | None
    sampled_at: float
    demand: bool = False  # a demand's requests waiting (adapter/demand/), not pods' values

    def busy(self, activation_target: Decimal) -> bool:
        """Whether some pod's value exceeds `activation_target`."""
        return self.busiest is not None and self.busiest > activation_target


NOTHING_SELECTED = Reading(0, 0, Decimal(0), None, math.inf)


class WorkloadReader:
    """Reads triggers' workloads from the pod directory and the number source the custom metrics API uses."""

    def __init__(
        self, config: MetricsConfig, pods: PodDirectory, source: MetricSource, demand: DemandSignals | None = None
    ) -> None:
        self._config = config
        self._pods = pods
        self._source = source
        self._demand = demand

    def check(self, trigger: Trigger, namespace: str) -> None:
        """UnknownMetricError unless the adapter serves the trigger's metric, of the kind its selector picks (a demand:
        for `namespace`)."""
        if not trigger.of_demand:
            self.metric(trigger.metric)
        elif self._demand is not None and self._demand.serves(trigger.metric):
            if not self._demand.serves_in(trigger.metric, namespace):
                raise UnknownMetricError(f"the demand {trigger.metric!r} is not read for namespace {namespace}")
        else:
            served = (
                ", ".join(self._demand.names) if self._demand is not None else "none: the metrics file has no demand"
            )
            raise UnknownMetricError(f"the adapter serves no demand {trigger.metric!r} (it serves {served})")

    def metric(self, name: str) -> MetricDefinition:
        """The pod metric `name`; UnknownMetricError when the adapter does not serve it (with this source)."""
        metric = self._config.custom(name)
        if metric is None or not self._source.serves(metric):
            served = ", ".join(m.name for m in self._config.metrics if self._source.serves(m))
            raise UnknownMetricError(f"the adapter serves no pod metric {name!r} (it serves {served})")
        return metric

    async def read(self, namespace: str, trigger: Trigger) -> Reading:
        """The workload's values now. UnknownMetricError; SourceUnavailableError when the pod cache has not synced or
        the source cannot answer; NoFiguresError when pods are selected and none has a fresh figure. A demand
        trigger reads the requests waiting: SourceUnavailableError (with the reason) when its endpoint failed."""
        if trigger.of_demand:
            return await self._read_demand(namespace, trigger)
        metric = self.metric(trigger.metric)
        if not self._pods.synced:
            raise SourceUnavailableError("the adapter's pod cache has not synced with the Kubernetes API yet")
        pods = self._pods.pods_in_namespace(namespace, trigger.selector)
        if not pods:
            return NOTHING_SELECTED
        values = [v for v in await self._source.pod_values(metric, pods) if v is not None]
        if not values:
            raise NoFiguresError(
                f"none of the {len(pods)} pods {trigger.selector} selects in {namespace} has a fresh figure of "
                f"{metric.name}"
            )
        figures = [v.value for v in values]
        return Reading(
            selected=len(pods),
            reporting=len(values),
            total=combine(figures, Combine.SUM),
            busiest=max(figures),
            sampled_at=min(v.sampled_at for v in values),
        )

    async def _read_demand(self, namespace: str, trigger: Trigger) -> Reading:
        self.check(trigger, namespace)
        assert self._demand is not None
        try:
            waiting = await self._demand.value(namespace, trigger.metric, trigger.selector)
        except DemandUnavailableError as exc:
            raise SourceUnavailableError(str(exc)) from None
        except DemandNotServedError as exc:
            raise UnknownMetricError(str(exc)) from None
        return Reading(1, 1, waiting.value, waiting.value, waiting.sampled_at, demand=True)
