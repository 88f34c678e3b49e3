"""bench/fleet_prometheus.py's kube-state-metrics series: one owner per pod (its ReplicaSet) and per ReplicaSet (its
Deployment), in the text format Prometheus scrapes, so that the workload rules group the fleet's pods as a cluster
with kube-state-metrics does."""

from __future__ import annotations

import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from fleet_prometheus import fleet, owner_series


def test_every_pod_is_owned_by_its_replica_set_and_every_replica_set_by_its_deployment() -> None:
    placements = fleet(pods=120, namespaces=5, namespace_pods=40)
    families = {f.name: f.samples for f in text_string_to_metric_families(owner_series(placements))}
    pods = {(s.labels["namespace"], s.labels["pod"]): s.labels for s in families["kube_pod_owner"]}
    assert len(pods) == len(placements) == 120
    for p in placements:
        labels = pods[(p.namespace, p.pod)]
        assert (labels["owner_kind"], labels["owner_name"], labels["owner_is_controller"]) == (
            "ReplicaSet",
            p.replica_set,
            "true",
        )
    replica_sets = {
        (s.labels["namespace"], s.labels["replicaset"]): s.labels for s in families["kube_replicaset_owner"]
    }
    assert set(replica_sets) == {(p.namespace, p.replica_set) for p in placements}
    for p in placements:
        labels = replica_sets[(p.namespace, p.replica_set)]
        assert (labels["owner_kind"], labels["owner_name"]) == ("Deployment", p.deployment)
    assert len({labels["uid"] for labels in pods.values()}) == 120, "a pod's uid is its own"


def test_pods_without_gpus_are_owned_too_and_every_replica_set_has_its_deployment() -> None:
    placements = fleet(pods=120, namespaces=5, namespace_pods=40)
    families = {f.name: f.samples for f in text_string_to_metric_families(owner_series(placements, cpu_pods=101))}
    owners = families["kube_pod_owner"]
    assert len({(s.labels["namespace"], s.labels["pod"]) for s in owners}) == 120 + 101
    kinds = [s.labels["owner_kind"] for s in owners]
    assert kinds.count("DaemonSet") == 50 and kinds.count("ReplicaSet") == 120 + 51
    gpu_pods = {(p.namespace, p.pod) for p in placements}
    cpu_pods = [s.labels for s in owners if (s.labels["namespace"], s.labels["pod"]) not in gpu_pods]
    assert {labels["namespace"] for labels in cpu_pods} - {"kube-system"} <= {p.namespace for p in placements}
    replica_sets = {(s.labels["namespace"], s.labels["replicaset"]) for s in families["kube_replicaset_owner"]}
    owned_by_replica_sets = {
        (labels["namespace"], labels["owner_name"]) for labels in cpu_pods if labels["owner_kind"] == "ReplicaSet"
    }
    assert owned_by_replica_sets <= replica_sets
    assert len({labels["uid"] for labels in cpu_pods}) == 101
