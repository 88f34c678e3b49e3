"""The harness's scheduler and kubelets (nodes.py) against an in-memory API: what they write is what the real control
plane gets in test_aggregation.py and test_hpa.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from simulation.kubelet import FakeKubelet
from tests.controlplane.nodes import GPU_RESOURCE, GpuNode, GpuNodes

pytestmark = pytest.mark.controlplane


def _pod(namespace: str, name: str, app: str, gpus: int) -> k8s.V1Pod:
    container = k8s.V1Container(
        name="main", image="img", resources=k8s.V1ResourceRequirements(limits={GPU_RESOURCE: str(gpus)})
    )
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(namespace=namespace, name=name, uid=f"uid-{name}", labels={"app": app}),
        spec=k8s.V1PodSpec(containers=[container]),
        status=k8s.V1PodStatus(phase="Pending", qos_class="BestEffort"),
    )


@dataclass
class InMemoryApi:
    """The few CoreV1Api calls the scheduler and kubelets make, on a dict of pods."""

    pods: dict[tuple[str, str], k8s.V1Pod] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)

    def list_pod_for_all_namespaces(self) -> k8s.V1PodList:
        return k8s.V1PodList(items=list(self.pods.values()))

    def create_namespaced_pod_binding(self, name: str, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self.calls.append(("bind", name))
        self.pods[(namespace, name)].spec.node_name = body["target"]["name"]

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.calls.append(("status", name))
        status = body["status"]
        self.pods[(namespace, name)].status.phase = status["phase"]
        assert {c["type"] for c in status["conditions"]} >= {"Ready", "ContainersReady", "PodScheduled"}
        assert all(c["status"] == "True" for c in status["conditions"])
        assert [c["name"] for c in status["containerStatuses"]] == ["main"]

    def delete_namespaced_pod(self, name: str, namespace: str, body: k8s.V1DeleteOptions) -> None:
        self.calls.append(("delete", name))
        assert body.grace_period_seconds == 0 and body.preconditions.uid == f"uid-{name}"
        del self.pods[(namespace, name)]


@pytest.fixture
def world(tmp_path: Path) -> tuple[InMemoryApi, GpuNodes]:
    api = InMemoryApi()
    nodes = {
        name: GpuNode(name, tuple(f"GPU-{name}-{i}" for i in range(2)), FakeKubelet(tmp_path / f"{name}.sock"),
                      tmp_path / f"{name}.json", api, "10.0.0.1")  # type: ignore[arg-type]
        for name in ("a", "b")
    }  # fmt: skip
    return api, GpuNodes(nodes, api)  # type: ignore[arg-type]


def test_pods_are_bound_within_each_nodes_gpus_and_started(world: tuple[InMemoryApi, GpuNodes]) -> None:
    api, nodes = world
    for n in range(5):
        api.pods[("ns", f"p{n}")] = _pod("ns", f"p{n}", "serve", 1)
    nodes.step()  # binds
    bound = [p.spec.node_name for p in api.pods.values()]
    assert sorted(b for b in bound if b) == ["a", "a", "b", "b"] and bound.count(None) == 1  # 4 GPUs, 5 pods
    nodes.step()  # starts
    assert sum(p.status.phase == "Running" for p in api.pods.values()) == 4
    held = [gpu for node in nodes.nodes.values() for gpu in node.held]
    assert len(held) == len(set(held)) == 4


def test_demand_is_spread_over_the_running_pods_gpus(world: tuple[InMemoryApi, GpuNodes]) -> None:
    api, nodes = world
    for n in range(3):
        api.pods[("ns", f"p{n}")] = _pod("ns", f"p{n}", "serve", 1)
    nodes.set_demand("ns", "serve", 150.0)
    for _ in range(3):
        nodes.step()
    loads = {**json.loads(nodes.nodes["a"].load_file.read_text()), **json.loads(nodes.nodes["b"].load_file.read_text())}
    assert sorted(loads.values()) == [0.0, 50.0, 50.0, 50.0]
    listed = [p for node in nodes.nodes.values() for p in node.kubelet.pods]
    assert sorted(p.name for p in listed) == ["p0", "p1", "p2"]
    assert all(len(p.containers[0].devices[0].device_ids) == 1 for p in listed)


def test_a_deleted_pod_is_removed_for_good_and_its_gpu_freed(world: tuple[InMemoryApi, GpuNodes]) -> None:
    api, nodes = world
    api.pods[("ns", "p0")] = _pod("ns", "p0", "serve", 2)
    nodes.set_demand("ns", "serve", 100.0)
    for _ in range(3):
        nodes.step()
    node = nodes.nodes[api.pods[("ns", "p0")].spec.node_name]
    assert len(node.held) == 2 and sorted(json.loads(node.load_file.read_text()).values()) == [50.0, 50.0]
    api.pods[("ns", "p0")].metadata.deletion_timestamp = datetime.now(UTC)  # the ReplicaSet controller deleted it
    nodes.step()
    assert not api.pods and not node.held
    nodes.step()
    assert node.kubelet.pods == () and set(json.loads(node.load_file.read_text()).values()) == {0.0}
