"""The demo's Kubernetes side: the Kubernetes API test server holding the simulated nodes, their pods, the pods'
owners, an HPA on the Deployment (its status written by the demo, as no controller runs), and an authorization policy
that lets the demo's user read the metrics APIs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from exporter.engines.endpoint import ANNOTATION_PORT
from simulation.demo.hpa import ScaleSuggestion
from simulation.demo.scenarios import DEPLOYMENT, NAMESPACE, TARGET_UTILIZATION, WORKLOADS, DemoWorkload
from simulation.kubeapi import AccessGrant, KubeApiServer
from simulation.kubeapi.objects import JsonObject, hpa_object, hpa_status, node_object, stateful_set_object
from simulation.scenario import Pod, Scenario

GPU_PRODUCTS = {"H100-SXM5-80GB": "NVIDIA-H100-80GB-HBM3"}  # as the GPU Operator's feature discovery labels nodes
HPA = hpa_object(
    NAMESPACE,
    DEPLOYMENT,
    target=("Deployment", DEPLOYMENT),
    metric="gpu_utilization",
    average_value=str(TARGET_UTILIZATION),
    max_replicas=8,
)

DEMO_USER = "gpu-pulse-demo"
DEMO_GROUPS = ("system:authenticated",)
POLICY = (
    AccessGrant(user=DEMO_USER),  # every resource request (the metrics APIs)
    AccessGrant(user=DEMO_USER, path="*"),  # every non-resource request (discovery, openapi)
)


@dataclass(frozen=True, slots=True)
class DemoPod:
    namespace: str
    name: str
    node: str
    workload: DemoWorkload


def demo_pods(scenarios: Mapping[str, Scenario]) -> tuple[DemoPod, ...]:
    """Every pod of the simulated nodes, with its node and workload."""
    by_name = {w.name: w for w in WORKLOADS}
    return tuple(
        DemoPod(pod.namespace, pod.name, node, by_name[pod.labels["app"]])
        for node, scenario in sorted(scenarios.items())
        for pod in scenario.pods
    )


def populate(kube: KubeApiServer, scenarios: Mapping[str, Scenario]) -> None:
    """The Deployments, their ReplicaSets and every pod (Running on its node, with the UID the exporter reports)."""
    replicas = {w.name: sum(1 for p in demo_pods(scenarios) if p.workload == w) for w in WORKLOADS}
    nodes = sorted(scenarios)
    for index, node in enumerate(nodes):
        kube.put_object("nodes", _node(node, scenarios[node], f"10.0.0.{index + 1}"))
    for workload in WORKLOADS:
        labels = {"app": workload.name}
        if workload.kind == "Deployment":
            kube.put_deployment("demo", workload.name, replicas=replicas[workload.name], labels=labels)
            kube.put_replica_set("demo", workload.replica_set, deployment=workload.name, labels=labels)
        elif workload.kind == "StatefulSet":
            sts = stateful_set_object("demo", workload.name, replicas=replicas[workload.name], labels=labels)
            kube.put_object("statefulsets", sts)
    kube.put_object("horizontalpodautoscalers", hpa_status(HPA, current_replicas=0, desired_replicas=0, average=None))
    uids = {(p.namespace, p.name): p for s in scenarios.values() for p in s.pods}
    for n, pod in enumerate(demo_pods(scenarios), start=1):
        spec = uids[(pod.namespace, pod.name)]
        workload = pod.workload
        owner = (
            ("ReplicaSet", workload.replica_set) if workload.kind == "Deployment" else (workload.kind, workload.name)
        )
        kube.put_pod(
            pod.namespace,
            pod.name,
            node=pod.node,
            labels=dict(spec.labels),
            uid=spec.uid,
            owner=owner,
            pod_ip=spec.ip or f"10.244.{nodes.index(pod.node)}.{n}",
            containers=[c.name for c in spec.containers],
            gpus_per_container=1,
            annotations=_engine_annotations(spec),
        )
    kube.set_authorization(POLICY)


def _engine_annotations(pod: Pod) -> dict[str, str]:
    """Where a pod's engine serves, as its manifest would say it (exporter/engines/endpoint.py reads these)."""
    annotations = dict(pod.annotations)
    if pod.engine is not None and pod.engine.port is not None:
        annotations[ANNOTATION_PORT] = str(pod.engine.port)
    return annotations


def _node(name: str, scenario: Scenario, address: str) -> JsonObject:
    """A GPU node as the GPU Operator labels it: `nvidia.com/gpu.present`, the product, the GPU count as capacity."""
    models = [gpu.model for gpu in scenario.gpus for _ in range(gpu.count)]
    labels = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(len(models))}
    if models:
        labels["nvidia.com/gpu.product"] = GPU_PRODUCTS.get(models[0], models[0])
    return node_object(name, labels=labels, capacity={"nvidia.com/gpu": str(len(models))}, internal_ip=address)


def hpa_seen(suggestion: ScaleSuggestion, average: Decimal | None) -> JsonObject:
    """The demo HPA with the status an HPA controller would write from the summary: the pods' average as the metrics
    API serves it (a quantity in thousandths), the current and the suggested replica count."""
    value = None if average is None else f"{int(average * 1000)}m"
    return hpa_status(HPA, current_replicas=suggestion.current, desired_replicas=suggestion.desired, average=value)
