"""Both sources side by side: each metric answered by the source it names (`source` in the metrics file), else by the
default (`--source`).

GPU and inference figures keep the direct source (fresh, no Prometheus), a metric that says `source: prometheus` is
answered by PromQL, in one adapter. Each source keeps its own readiness (`checks`, one /readyz check each) and its own
self-metrics (the `source` label of gpu_pulse_adapter_source_duration_seconds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from adapter.metrics_config import MetricDefinition
from adapter.sources.metricsource import MetricSource, PodKey, PodSample, ServedValue, SourceError
from toolkit.pods import Pod


class SourcesByMetric:
    """A MetricSource that hands each metric to the source it is answered by."""

    name = "per-metric"

    def __init__(self, sources: Mapping[str, MetricSource], default: str) -> None:
        if default not in sources:
            raise ValueError(f"the default source {default!r} is not among {sorted(sources)}")
        self._sources = dict(sources)
        self._default = default

    def source_for(self, metric: MetricDefinition) -> MetricSource | None:
        return self._sources.get(metric.source_name(self._default))

    def _answering(self, metric: MetricDefinition) -> MetricSource:
        source = self.source_for(metric)
        if source is None:
            raise SourceError(f"metric {metric.name} names the source {metric.source}, which this adapter does not run")
        return source

    @property
    def checks(self) -> list[tuple[str, Callable[[], bool]]]:
        """One readiness check per source."""
        return [(f"metrics-source-{name}", source.ready) for name, source in sorted(self._sources.items())]

    async def start(self) -> None:
        for source in self._sources.values():
            await source.start()

    async def close(self) -> None:
        for source in self._sources.values():
            await source.close()

    def ready(self) -> bool:
        return all(source.ready() for source in self._sources.values())

    def serves(self, metric: MetricDefinition) -> bool:
        source = self.source_for(metric)
        return source is not None and source.serves(metric)

    async def samples(self, metric: MetricDefinition, pods: Sequence[Pod]) -> Mapping[PodKey, PodSample]:
        return await self._answering(metric).samples(metric, pods)

    async def pod_values(self, metric: MetricDefinition, pods: Sequence[Pod]) -> list[ServedValue | None]:
        return await self._answering(metric).pod_values(metric, pods)
