"""Kubernetes' own HorizontalPodAutoscaler controller scaling Deployments on gpu-pulse's metrics, read through the real
aggregator: the replica counts are the HPA's own status and conditions, not a re-derivation of its arithmetic.

The load model (tests/controlplane/nodes.py): a workload's demand, in percent of one GPU, is spread over the GPUs of
its running pods, so the count an HPA should settle on follows from the demand and the target alone:
ceil(demand / target), the one count n where demand / n is within the target and demand / (n - 1) is above it.
"""

from __future__ import annotations

import math

import pytest
from kubernetes import client as k8s

from tests.controlplane.stack import Cluster
from tests.controlplane.workloads import (
    HpaState,
    external_metric_hpa,
    gpu_deployment,
    hpa_state,
    namespace_with_default_account,
    pods_metric_hpa,
    running_pods,
)
from tests.support.waiting import patience, wait_for

# minutes per test as the HPA settles, and the first test's time includes starting the cluster (and the control
# plane's first build on a fresh machine: tests/controlplane/build.py)
pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(3600)]

TARGET = 60  # gpu_utilization, percent, per pod
# the exporter's /pods figure is a mean over the last minute, so each step takes a minute or two to settle
SETTLE_S = 240


def _settled(cluster: Cluster, namespace: str, name: str, replicas: int, seen: list[HpaState]) -> bool:
    state = hpa_state(k8s.AutoscalingV2Api(cluster.api), namespace, name)
    seen.append(state)
    if not state.conditions:  # not synced by the controller yet: its status is all zeroes
        return False
    scale = k8s.AppsV1Api(cluster.api).read_namespaced_deployment_scale(name, namespace)
    running = running_pods(k8s.CoreV1Api(cluster.api), namespace, name)
    # a Scale's spec.replicas is omitted when 0 (`json:"replicas,omitempty"`, k8s.io/api/autoscaling/v1 ScaleSpec),
    # which the client reads as None
    wanted = scale.spec.replicas or 0
    return state.desired == state.current == wanted == len(running) == replicas


def _wait_settled(cluster: Cluster, namespace: str, name: str, replicas: int) -> HpaState:
    seen: list[HpaState] = []
    try:
        wait_for(
            lambda: _settled(cluster, namespace, name, replicas, seen), f"{name} at {replicas}", patience(SETTLE_S), 1.0
        )
    except AssertionError as error:
        history = "\n".join(s.describe() for s in seen[-5:])
        raise AssertionError(f"{error}; the HPA's last states:\n{history}") from None
    return seen[-1]


def test_scales_on_gpu_utilization_up_and_down(cluster: Cluster) -> None:
    namespace, app = "inference", "llm-serve"
    namespace_with_default_account(k8s.CoreV1Api(cluster.api), namespace)
    k8s.AppsV1Api(cluster.api).create_namespaced_deployment(namespace, gpu_deployment(app, 1))
    high = 150.0  # 2.5 GPUs' worth of work: 3 pods at 50 %, 2 at 75 %
    cluster.nodes.set_demand(namespace, app, high)
    k8s.AutoscalingV2Api(cluster.api).create_namespaced_horizontal_pod_autoscaler(
        namespace, pods_metric_hpa(app, "gpu_utilization", str(TARGET), min_replicas=1, max_replicas=6)
    )

    up = _wait_settled(cluster, namespace, app, math.ceil(high / TARGET))
    assert up.condition("AbleToScale") == "True", up.describe()
    assert up.condition("ScalingActive") == "True", up.describe()
    assert up.condition("ScalingLimited") == "False", up.describe()

    low = 50.0  # one pod at 50 %
    cluster.nodes.set_demand(namespace, app, low)
    down = _wait_settled(cluster, namespace, app, math.ceil(low / TARGET))
    assert down.condition("ScalingActive") == "True", down.describe()


def test_external_metric_takes_a_deployment_to_zero_and_back(cluster: Cluster) -> None:
    """minReplicas 0 (HPAScaleToZero): a batch Deployment follows the GPU utilization of the pods that feed it, an
    External metric; with their GPUs idle the HPA takes it to 0 replicas, and brings it back when they are busy."""
    namespace = "pipeline"
    core = k8s.CoreV1Api(cluster.api)
    apps = k8s.AppsV1Api(cluster.api)
    namespace_with_default_account(core, namespace)
    apps.create_namespaced_deployment(namespace, gpu_deployment("feeder", 1))
    apps.create_namespaced_deployment(namespace, gpu_deployment("batch", 1))
    cluster.nodes.set_demand(namespace, "feeder", 0.0)
    per_batch_pod = 30
    k8s.AutoscalingV2Api(cluster.api).create_namespaced_horizontal_pod_autoscaler(
        namespace,
        external_metric_hpa(
            "batch", "namespace_gpu_utilization", {"app": "feeder"}, str(per_batch_pod), min_replicas=0,
            max_replicas=4,
        ),
    )  # fmt: skip

    zero = _wait_settled(cluster, namespace, "batch", 0)
    assert zero.condition("AbleToScale") == "True", zero.describe()

    busy = 90.0
    cluster.nodes.set_demand(namespace, "feeder", busy)
    back = _wait_settled(cluster, namespace, "batch", math.ceil(busy / per_batch_pod))
    assert back.condition("ScalingActive") == "True", back.describe()
