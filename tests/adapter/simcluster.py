"""The simulated cluster adapter tests run against (see conftest.py for the fixtures that build it).

Namespace `ml`:  Deployment `infer` (pods infer-a on gpu-1, infer-b on gpu-2 with two GPUs, infer-pending unscheduled),
                 StatefulSet `train` (train-0 on gpu-1), web-0 on cpu-1 (a node without GPUs or exporter).
Namespace `other`: solo on gpu-2.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp.test_utils import TestClient

from adapter.podcache.cache import PodCache
from adapter.sources.exporters import StaticExporters
from simulation.kubeapi import KubeApiServer
from tests.adapter.simnodes import Gpu, SimulatedNode
from tests.support.waiting import eventually

EXPORTER_LABELS = {"app.kubernetes.io/name": "gpu-pulse-exporter"}


@dataclass
class Cluster:
    kube: KubeApiServer
    nodes: dict[str, SimulatedNode]
    pods: PodCache

    def locator(self) -> StaticExporters:
        return StaticExporters({name: node.url for name, node in self.nodes.items()})

    async def next_documents(self) -> None:
        """Wait until every node streaming to an adapter has sent three more documents: the adapter then holds one
        made after this call began (tests move their manual clock, then wait here for documents sampled at the new
        time; a node streams every 50 ms of real time)."""
        sent = {name: node.documents for name, node in self.nodes.items() if node.open_streams}
        await eventually(
            lambda: all(self.nodes[name].documents >= count + 3 for name, count in sent.items()),
            "the streaming nodes sent their next documents",
        )


def populate(kube: KubeApiServer) -> None:
    kube.put_replica_set("ml", "infer-7d9", deployment="infer", labels={"app": "infer"})
    rs = ("ReplicaSet", "infer-7d9")
    kube.put_pod("ml", "infer-a", node="gpu-1", labels={"app": "infer", "tier": "gpu"}, pod_ip="10.0.1.1", owner=rs)
    kube.put_pod("ml", "infer-b", node="gpu-2", labels={"app": "infer", "tier": "gpu"}, pod_ip="10.0.2.1", owner=rs)
    kube.put_pod("ml", "infer-pending", labels={"app": "infer"}, phase="Pending", owner=rs)
    kube.put_pod(
        "ml", "train-0", node="gpu-1", labels={"app": "train"}, pod_ip="10.0.1.2", owner=("StatefulSet", "train")
    )
    kube.put_pod("ml", "web-0", node="cpu-1", labels={"app": "web"}, pod_ip="10.0.3.1")
    kube.put_pod("other", "solo", node="gpu-2", labels={"app": "x"}, pod_ip="10.0.2.2")


def set_figures(nodes: dict[str, SimulatedNode]) -> None:
    nodes["gpu-1"].set_pod("ml", "infer-a", [Gpu(utilization=80.0, memory_used=20 * 2**30, power=250.5)])
    nodes["gpu-1"].set_pod("ml", "train-0", [Gpu(utilization=90.0, index=1, power=300.0)])
    nodes["gpu-2"].set_pod(
        "ml",
        "infer-b",
        [
            Gpu(utilization=40.0, memory_used=4 * 2**30, power=100.0, index=0),
            Gpu(utilization=60.5, memory_used=40 * 2**30, power=150.25, index=1),
        ],
    )
    nodes["gpu-2"].set_pod("other", "solo", [Gpu(utilization=10.0, index=2, share="process", power=None)])


AdapterFactory = Callable[..., Awaitable[TestClient]]  # type: ignore[type-arg]
