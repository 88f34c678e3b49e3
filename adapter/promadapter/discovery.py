"""Discovery: which metrics the rules give, relisted from Prometheus every `--metrics-relist-interval`.

As prometheus-adapter's listers (pkg/custom-provider/provider.go `cachingMetricsLister.updateMetrics`,
pkg/external-provider/basic_metric_lister.go): each distinct `seriesQuery` is asked once per relist, in parallel, for
the series seen since now - `--metrics-max-age`; each rule keeps the series its filters pass; the registry is replaced
whole. A relist that fails in any call changes nothing (the metrics found before stay served) and is logged and
counted; custom and external rules relist independently, as upstream's two providers do. The first relist runs at
start; the rules are `ready` once it has finished, whether Prometheus answered or not: a Prometheus that is down keeps
the rules' metrics out of discovery (until a relist succeeds), never the GPU metrics out of a replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from adapter.promadapter.naming import MetricNamer, SeriesName
from adapter.promadapter.promapi import PrometheusApi
from adapter.promadapter.registry import ExternalSeriesRegistry, SeriesRegistry
from adapter.sources.metricsource import SourceError, SourceUnavailableError

log = logging.getLogger(__name__)

CUSTOM, EXTERNAL = "custom", "external"


class RuleDiscovery:
    """The rules' relisting, and the two registries it fills."""

    def __init__(
        self,
        api: PrometheusApi,
        custom: SeriesRegistry,
        custom_namers: Sequence[MetricNamer],
        external: ExternalSeriesRegistry,
        external_namers: Sequence[MetricNamer],
        *,
        interval: float,
        max_age: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.custom = custom
        self.external = external
        self._namers = {CUSTOM: tuple(custom_namers), EXTERNAL: tuple(external_namers)}
        self._interval = interval
        self._max_age = max_age
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self.generation = 0  # grows with each relist that changed a registry
        self.relists = {(api_name, outcome): 0 for api_name in (CUSTOM, EXTERNAL) for outcome in ("ok", "error")}
        self.last_success: dict[str, float] = {}
        self._attempted: set[str] = set()
        self._relisted = asyncio.Event()

    def ready(self) -> bool:
        return all(name in self._attempted or not namers for name, namers in self._namers.items())

    async def start(self) -> None:
        await self.api.start()
        self._task = asyncio.create_task(self._run(), name="gpu-pulse-rule-discovery")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.api.close()

    async def _run(self) -> None:
        while True:
            try:
                await self.relist()
            except Exception:  # a relist never ends discovery: the next one may succeed
                log.exception("relisting prometheus-adapter's rules failed")
            await asyncio.sleep(self._interval)

    async def relist(self) -> None:
        """One relist of both kinds of rules (each kept as it was when its calls fail)."""
        await asyncio.gather(*(self._relist(name) for name, namers in self._namers.items() if namers))
        self._relisted.set()

    async def _relist(self, which: str) -> None:
        try:
            await self._relist_once(which)
        finally:
            self._attempted.add(which)

    async def _relist_once(self, which: str) -> None:
        namers = self._namers[which]
        start = self._clock() - self._max_age
        selectors = list(dict.fromkeys(n.selector for n in namers))  # "don't do duplicate queries"
        try:
            answers = await asyncio.gather(*(self.api.series(selector, start) for selector in selectors))
        except (SourceUnavailableError, SourceError) as exc:
            self.relists[which, "error"] += 1
            log.warning("listing the series of the %s rules failed, the metrics found before stay: %s", which, exc)
            return
        by_selector = dict(zip(selectors, answers, strict=True))
        kept: list[list[SeriesName]] = [n.filter_series(by_selector[n.selector]) for n in namers]
        if which == CUSTOM:
            self.custom.set_series(kept, namers)
        else:
            self.external.set_series(kept, namers)
        self.relists[which, "ok"] += 1
        self.last_success[which] = self._clock()
        self.generation += 1


class RuleDiscoveryCollector(Collector):
    """The discovery's self-metrics, read at scrape time."""

    def __init__(self, discovery: RuleDiscovery) -> None:
        self._discovery = discovery

    def collect(self) -> Iterable[Metric]:
        discovery = self._discovery
        relists = CounterMetricFamily(
            "gpu_pulse_adapter_rules_relists",
            "Relists of prometheus-adapter's rules (--config) from Prometheus, by API (custom, external) and outcome.",
            labels=["api", "outcome"],
        )
        for (api_name, outcome), count in sorted(discovery.relists.items()):
            relists.add_metric([api_name, outcome], count)
        yield relists
        found = GaugeMetricFamily(
            "gpu_pulse_adapter_rules_metrics",
            "Metrics the last successful relist of prometheus-adapter's rules found, by API.",
            labels=["api"],
        )
        found.add_metric([CUSTOM], len(discovery.custom.list_all_metrics()))
        found.add_metric([EXTERNAL], len(discovery.external.list_all_metrics()))
        yield found
        last = GaugeMetricFamily(
            "gpu_pulse_adapter_rules_last_relist_timestamp_seconds",
            "When the rules of each API were last relisted successfully (Unix seconds).",
            labels=["api"],
        )
        for api_name, when in sorted(discovery.last_success.items()):
            last.add_metric([api_name], when)
        yield last
