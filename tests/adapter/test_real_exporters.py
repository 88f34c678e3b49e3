"""The adapter against real exporter processes (`python -m exporter --simulate ...`: the real collector, attribution
and server on the NVML simulator and its simulated kubelet), read directly and through a real Prometheus."""

from __future__ import annotations

import calendar
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from adapter.api.selfmetrics import AdapterMetrics
from adapter.application import build_app
from adapter.metrics_config import default_metrics_config
from adapter.podcache.cache import PodCache
from adapter.quantity import decimal_from_float, parse_quantity
from adapter.sources.direct import DirectSource
from adapter.sources.exporters import StaticExporters
from adapter.sources.nodefeeds import NodeFeeds
from adapter.sources.prometheus import PrometheusSource
from exporter.catalogue import Dialect
from simulation.kubeapi import KubeApiServer
from tests.adapter.promserver import Prometheus
from tests.support.exporters import ExporterProcess, start_exporter
from tests.support.processes import ChildProcesses
from tests.support.waiting import eventually, patience, wait_for
from toolkit.backoff import Backoff
from toolkit.kubeclient import api_client

# node -> (scenario, dialect): the default metrics must work with either dialect, and DRA claims with both sources
SCENARIOS = {
    "gpu-h100": ("h100x8", "prometheus"),
    "gpu-shared": ("shared", "prometheus"),
    "gpu-mig": ("a100-mig", "prometheus"),
    "gpu-dra": ("dra", "dcgm"),
}
V2 = "/apis/custom.metrics.k8s.io/v1beta2"


# a figure that is a rate over two samples (GPM's, a process's utilization) is there from the second on
SETTLED_CYCLES = 2


def _serves_settled_pods(processes: ChildProcesses, exporter: ExporterProcess, since: list[datetime]) -> bool:
    """Whether the exporter's document has pods and was made SETTLED_CYCLES intervals after the first one that had:
    by then every figure its devices will have is in it (a test reading an earlier one raced the exporter's start)."""
    processes.check_running(exporter.name)
    document = exporter.document()
    if not document.pods:
        return False
    if not since:
        since.append(document.generated_at)
    return document.generated_at >= since[0] + timedelta(seconds=SETTLED_CYCLES * document.interval_seconds)


@pytest.fixture(scope="module")
def exporters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ExporterProcess]]:
    processes = ChildProcesses(tmp_path_factory.mktemp("exporters"))
    try:
        running = {
            node: start_exporter(processes, node, scenario, dialect=Dialect(dialect))
            for node, (scenario, dialect) in SCENARIOS.items()
        }
        for node, exporter in running.items():
            wait_for(
                partial(_serves_settled_pods, processes, exporter, []),
                f"the exporter for {node} serving its pods, settled",
                patience(60),
            )
        yield running
    finally:
        processes.stop_all()


@dataclass
class RealCluster:
    kube: KubeApiServer
    pods: PodCache
    exporters: dict[str, ExporterProcess]


@pytest.fixture
async def real_cluster(exporters: dict[str, ExporterProcess]) -> AsyncIterator[RealCluster]:
    """The Kubernetes API test server holding exactly the pods the exporters attribute GPUs to, with their uids."""
    kube = KubeApiServer()
    await kube.start()
    for exporter in exporters.values():
        for pod in exporter.document().pods:
            app = pod.name.rsplit("-", 1)[0]
            kube.put_pod(pod.namespace, pod.name, node=exporter.node, labels={"app": app}, uid=pod.uid)
    cache = PodCache(api_client(base_url=kube.url), backoff=Backoff(initial=0.05, maximum=0.2))
    await cache.start()
    assert await cache.wait_synced(10)
    try:
        yield RealCluster(kube, cache, exporters)
    finally:
        await cache.stop()
        await kube.stop()


def documents(cluster: RealCluster) -> dict[tuple[str, str], tuple[str, list[Any]]]:
    """Every pod's node and devices, from the exporters' /pods right now."""
    found = {}
    for exporter in cluster.exporters.values():
        for pod in exporter.document().pods:
            found[(pod.namespace, pod.name)] = (exporter.node, [d for c in pod.containers for d in c.devices])
    return found


async def served(client: Any, path: str) -> dict[str, dict[str, Any]]:
    response = await client.get(path)
    body = await response.json()
    assert response.status == 200, body
    return {item["describedObject"]["name"]: item for item in body["items"]}


async def test_direct_source_serves_what_the_real_exporters_report(
    real_cluster: RealCluster, aiohttp_client: Any
) -> None:
    locator = StaticExporters({node: e.url for node, e in real_cluster.exporters.items()})
    app = build_app(
        config=default_metrics_config(),
        pods=real_cluster.pods,
        source=DirectSource(locator, NodeFeeds()),
        metrics=AdapterMetrics("direct"),
    )
    client = await aiohttp_client(app)
    truth = documents(real_cluster)
    namespaces = {ns for ns, _ in truth}
    for namespace in namespaces:
        memory = await served(client, f"{V2}/namespaces/{namespace}/pods/*/gpu_memory_used_bytes")
        utilization = await served(client, f"{V2}/namespaces/{namespace}/pods/*/gpu_utilization")
        for (ns, name), (_, devices) in truth.items():
            if ns != namespace:
                continue
            if any(d.memory_used_bytes is not None for d in devices):
                assert name in memory, f"{ns}/{name} has memory figures but is not served"
                assert parse_quantity(memory[name]["value"]) > 0
            figures = [d.utilization_percent for d in devices if d.utilization_percent is not None]
            if not figures:
                assert name not in utilization  # no figure (a MIG instance without GPM): nothing is made up
                continue
            value = parse_quantity(utilization[name]["value"])
            mean = sum(decimal_from_float(f) for f in figures) / len(figures)
            assert abs(value - mean) <= 10, f"{ns}/{name}: served {value}, the exporter says {mean}"
            assert Decimal(0) <= value <= Decimal(100)
            # values are exact decimals: no float noise such as 20.999999999999996 reaches the wire
            assert len(utilization[name]["value"]) <= 12
            sampled = calendar.timegm(time.strptime(utilization[name]["timestamp"], "%Y-%m-%dT%H:%M:%SZ"))
            assert time.time() - sampled <= 5 + 1  # max-age (3 intervals + 2 s), plus the timestamp's rounding down


async def test_both_sources_agree_on_the_real_exporters(
    real_cluster: RealCluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    prometheus = Prometheus(tmp_path)
    try:
        prometheus.set_targets([e.url for e in real_cluster.exporters.values()])
        nodes = set(real_cluster.exporters)

        def scraped() -> bool:
            series = prometheus.query("gpu_pulse_pod_gpu_memory_used_bytes")
            dcgm = prometheus.query("DCGM_FI_DEV_FB_FREE")
            return {s["metric"].get("node") for s in series} == nodes and bool(dcgm)

        await eventually(scraped, "prometheus scraped the real exporters", timeout=30)
        locator = StaticExporters({node: e.url for node, e in real_cluster.exporters.items()})
        direct = await aiohttp_client(
            build_app(
                config=default_metrics_config(),
                pods=real_cluster.pods,
                source=DirectSource(locator, NodeFeeds()),
                metrics=AdapterMetrics("direct"),
            )
        )
        via_prometheus = await aiohttp_client(
            build_app(
                config=default_metrics_config(),
                pods=real_cluster.pods,
                source=PrometheusSource(prometheus.url),
                metrics=AdapterMetrics("prometheus"),
            )
        )
        compared = 0
        for namespace in {ns for ns, _ in documents(real_cluster)}:
            for metric, tolerance in (("gpu_utilization", Decimal(10)), ("gpu_memory_utilization", Decimal(10))):
                path = f"{V2}/namespaces/{namespace}/pods/*/{metric}"
                one, other = await served(direct, path), await served(via_prometheus, path)
                assert set(one) == set(other), f"{path}: the sources serve different pods"
                for name in one:
                    a, b = parse_quantity(one[name]["value"]), parse_quantity(other[name]["value"])
                    assert abs(a - b) <= tolerance, f"{path} {name}: direct {a}, prometheus {b}"
                    if metric == "gpu_utilization":  # avg_over_time(...[1m]): the window it reads, as /pods says
                        assert other[name]["windowSeconds"] == 60, other[name]
                    compared += 1
        assert compared >= 25
        dra = await served(via_prometheus, f"{V2}/namespaces/serve/pods/*/gpu_memory_utilization")
        assert set(dra) == {"infer-a", "infer-b"}, "DRA pods on a dcgm-dialect exporter, through prometheus"
    finally:
        prometheus.stop()
