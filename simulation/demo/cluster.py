"""The demo's Kubernetes side: the Kubernetes API test server holding the simulated nodes' pods, their owners, and
an authorization policy that lets the demo's user read the metrics APIs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from simulation.demo.scenarios import WORKLOADS, DemoWorkload
from simulation.kubeapi import AccessGrant, KubeApiServer
from simulation.scenario import Scenario

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
    for workload in WORKLOADS:
        if workload.kind == "Deployment":
            labels = {"app": workload.name}
            kube.put_deployment("demo", workload.name, replicas=replicas[workload.name], labels=labels)
            kube.put_replica_set("demo", workload.replica_set, deployment=workload.name, labels=labels)
    uids = {(p.namespace, p.name): p for s in scenarios.values() for p in s.pods}
    nodes = sorted(scenarios)
    for n, pod in enumerate(demo_pods(scenarios), start=1):
        spec = uids[(pod.namespace, pod.name)]
        workload = pod.workload
        owner = ("ReplicaSet", workload.replica_set) if workload.kind == "Deployment" else ("Job", workload.name)
        kube.put_pod(
            pod.namespace,
            pod.name,
            node=pod.node,
            labels=dict(spec.labels),
            uid=spec.uid,
            owner=owner,
            pod_ip=f"10.244.{nodes.index(pod.node)}.{n}",
            containers=[c.name for c in spec.containers],
            gpus_per_container=1,
        )
    kube.set_authorization(POLICY)
