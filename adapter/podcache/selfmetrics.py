"""The pod cache's own metrics: how many pods it holds and whether it has synced, read from it at scrape time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class CachedPods(Protocol):
    @property
    def size(self) -> int: ...

    @property
    def synced(self) -> bool: ...


class PodCacheCollector(Collector):
    def __init__(self, pods: CachedPods) -> None:
        self._pods = pods

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "gpu_pulse_adapter_pod_cache_pods", "Pods held in the adapter's pod cache.", value=self._pods.size
        )
        yield GaugeMetricFamily(
            "gpu_pulse_adapter_pod_cache_synced",
            "1 once the pod cache has listed every pod and follows the watch.",
            value=1.0 if self._pods.synced else 0.0,
        )
