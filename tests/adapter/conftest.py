"""Fixtures of the adapter tests: the simulated cluster (tests.adapter.simcluster) and adapters over it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp.test_utils import TestClient

from adapter.api.selfmetrics import AdapterMetrics
from adapter.application import build_app
from adapter.metrics_config import MetricsConfig, default_metrics_config
from adapter.podcache.cache import PodCache
from adapter.podcache.selfmetrics import PodCacheCollector
from adapter.sources.direct import DirectSource
from adapter.sources.exporters import ExporterLocator
from adapter.sources.feedmetrics import NodeFeedsCollector
from adapter.sources.metricsource import MetricSource, PodDirectory
from adapter.sources.nodefeeds import NodeFeeds
from simulation.kubeapi import KubeApiServer
from tests.adapter.simcluster import AdapterFactory, Cluster, populate, set_figures
from tests.adapter.simnodes import SimulatedNode
from toolkit.backoff import Backoff
from toolkit.kubeclient import api_client


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    kube = KubeApiServer(bookmark_interval=0.2)
    await kube.start()
    populate(kube)
    # documents streamed every 50 ms of real time, whatever the (manual) clock says: after a test moves its clock, the
    # next document (tests.adapter.simcluster.next_documents) is sampled at the new time
    nodes = {name: SimulatedNode(name, pace=0.05) for name in ("gpu-1", "gpu-2")}
    for node in nodes.values():
        await node.start()
    set_figures(nodes)
    cache = PodCache(api_client(base_url=kube.url), backoff=Backoff(initial=0.05, maximum=0.2))
    await cache.start()
    assert await cache.wait_synced(10), "the pod cache never synced"
    try:
        yield Cluster(kube, nodes, cache)
    finally:
        await cache.stop()
        for node in nodes.values():
            await node.stop()
        await kube.stop()


@pytest.fixture
def make_adapter(
    cluster: Cluster,
    aiohttp_client: Callable[..., Awaitable[TestClient]],  # type: ignore[type-arg]
) -> AdapterFactory:
    """An adapter (no auth) over the cluster, with the direct source on the simulated nodes unless told otherwise."""

    async def make(
        *,
        source: MetricSource | None = None,
        config: MetricsConfig | None = None,
        locator: ExporterLocator | None = None,
        max_age: float | None = None,
        metrics: AdapterMetrics | None = None,
        pods: PodDirectory | None = None,
    ) -> TestClient:  # type: ignore[type-arg]
        metrics = metrics or AdapterMetrics("direct")
        pods = pods or cluster.pods
        metrics.registry.register(PodCacheCollector(pods))  # as adapter/parts.py registers the pod cache's
        if source is None:
            cache = NodeFeeds(timeout=1.0, observe=metrics.observe_source_call)
            metrics.registry.register(NodeFeedsCollector(cache))
            source = DirectSource(locator or cluster.locator(), cache, max_age=max_age)
        app = build_app(config=config or default_metrics_config(), pods=pods, source=source, metrics=metrics)
        return await aiohttp_client(app)

    return make
