"""Kubernetes objects as the API serves them: pods, nodes, ReplicaSets, Deployments, StatefulSets, HPAs, owner
references, Status."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

JsonObject = dict[str, Any]

UID_NAMESPACE: Final = uuid.UUID("6f1c1a52-1d0e-4b43-9d86-6b2a1f0c9e11")
_OWNER_API_VERSIONS: Final = {
    "ReplicaSet": "apps/v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
}


@dataclass(frozen=True, slots=True)
class Kind:
    resource: str
    kind: str
    group_version: str  # "v1" or "apps/v1"
    prefix: str  # "/api/v1" or "/apis/apps/v1"
    namespaced: bool = True
    short_names: tuple[str, ...] = ()  # what discovery lists, so that `kubectl get deploy` resolves
    # field selectors the API server accepts for this resource (any other is a 400, as kube-apiserver answers);
    # None: any path
    fields: frozenset[str] | None = None


KINDS: Final = {
    "pods": Kind("pods", "Pod", "v1", "/api/v1", short_names=("po",)),
    "configmaps": Kind("configmaps", "ConfigMap", "v1", "/api/v1", short_names=("cm",)),
    "replicasets": Kind("replicasets", "ReplicaSet", "apps/v1", "/apis/apps/v1", short_names=("rs",)),
    "deployments": Kind("deployments", "Deployment", "apps/v1", "/apis/apps/v1", short_names=("deploy",)),
    "statefulsets": Kind("statefulsets", "StatefulSet", "apps/v1", "/apis/apps/v1", short_names=("sts",)),
    "nodes": Kind("nodes", "Node", "v1", "/api/v1", namespaced=False, short_names=("no",)),
    "horizontalpodautoscalers": Kind(
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        "autoscaling/v2",
        "/apis/autoscaling/v2",
        short_names=("hpa",),
    ),
    # cluster-scoped; kube-apiserver selects ResourceSlices by metadata.name, spec.nodeName and spec.driver only
    # (kubernetes/api resource/v1/types.go ResourceSliceSpec: "A field selector can be used to list only ResourceSlice
    # objects belonging to a certain node" / "with a certain driver name")
    "resourceslices": Kind(
        "resourceslices",
        "ResourceSlice",
        "resource.k8s.io/v1",
        "/apis/resource.k8s.io/v1",
        namespaced=False,
        fields=frozenset({"metadata.name", "spec.nodeName", "spec.driver"}),
    ),
}


def owner_uid(namespace: str, kind: str, name: str) -> str:
    """The uid this server gives a controller object, so that ownerReferences and owners agree."""
    return str(uuid.uuid5(UID_NAMESPACE, f"{kind}/{namespace}/{name}"))


def owner_reference(namespace: str, kind: str, name: str) -> JsonObject:
    return {
        "apiVersion": _OWNER_API_VERSIONS.get(kind, "v1"),
        "kind": kind,
        "name": name,
        "uid": owner_uid(namespace, kind, name),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_object(
    namespace: str,
    name: str,
    *,
    node: str | None = None,
    labels: Mapping[str, str] | None = None,
    phase: str = "Running",
    pod_ip: str | None = None,
    host_ip: str | None = None,
    owner: tuple[str, str] | None = None,
    containers: Sequence[str] = ("main",),
    gpus_per_container: int = 0,
    uid: str | None = None,
    claims: Mapping[str, Sequence[str]] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> JsonObject:
    """A Pod as the API returns it (uid, resourceVersion and creationTimestamp are set when it is stored). `claims`:
    container name -> the ResourceClaims it uses (spec.resourceClaims and the containers' resources.claims). A
    running pod is Ready (its Ready condition True)."""
    metadata: JsonObject = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if uid is not None:
        metadata["uid"] = uid
    if owner is not None:
        metadata["ownerReferences"] = [owner_reference(namespace, *owner)]
    limits = {"nvidia.com/gpu": str(gpus_per_container)} if gpus_per_container else {}
    spec: JsonObject = {
        "containers": [
            {
                "name": c,
                "image": f"registry.example/{c}:1.0",
                "resources": {"limits": limits, "requests": dict(limits)},
                "terminationMessagePath": "/dev/termination-log",
                "imagePullPolicy": "IfNotPresent",
            }
            for c in containers
        ],
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
    }
    if claims:
        names = sorted({claim for used in claims.values() for claim in used})
        spec["resourceClaims"] = [{"name": claim, "resourceClaimName": claim} for claim in names]
        for container in spec["containers"]:
            used = claims.get(container["name"]) or ()
            if used:
                container["resources"]["claims"] = [{"name": claim} for claim in used]
    if node is not None:
        spec["nodeName"] = node
    status: JsonObject = {"phase": phase, "qosClass": "BestEffort"}
    if pod_ip is not None:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    if host_ip is not None:
        status["hostIP"] = host_ip
    if phase == "Running":
        status["conditions"] = [{"type": "Ready", "status": "True"}]
        status["containerStatuses"] = [
            {
                "name": c,
                "ready": True,
                "restartCount": 0,
                "image": f"registry.example/{c}:1.0",
                "imageID": "",
                "started": True,
                "state": {"running": {}},
            }
            for c in containers
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def replica_set_object(
    namespace: str, name: str, *, deployment: str | None = None, labels: Mapping[str, str] | None = None
) -> JsonObject:
    """A ReplicaSet, owned by `deployment` when given."""
    metadata: JsonObject = {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels or {}),
        "uid": owner_uid(namespace, "ReplicaSet", name),
    }
    if deployment is not None:
        metadata["ownerReferences"] = [owner_reference(namespace, "Deployment", deployment)]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": metadata,
        "spec": {"replicas": 1, "selector": {"matchLabels": dict(labels or {})}},
        "status": {"replicas": 1},
    }


def deployment_object(
    namespace: str,
    name: str,
    *,
    replicas: int = 1,
    labels: Mapping[str, str] | None = None,
    containers: Sequence[str] = ("main",),
) -> JsonObject:
    """A Deployment whose pods carry `labels`, with all `replicas` ready."""
    return _workload_object("Deployment", namespace, name, replicas, labels or {}, containers)


def _workload_object(
    kind: str,
    namespace: str,
    name: str,
    replicas: int,
    labels: Mapping[str, str],
    containers: Sequence[str],
    spec: Mapping[str, object] | None = None,
    status: Mapping[str, object] | None = None,
) -> JsonObject:
    """An apps/v1 workload of `kind` whose pods carry `labels`, with all `replicas` ready (and `spec`, `status`
    fields of that kind's own)."""
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "uid": owner_uid(namespace, kind, name),
        },
        "spec": {
            "replicas": replicas,
            **(spec or {}),
            "selector": {"matchLabels": dict(labels)},
            "template": _pod_template(labels, containers),
        },
        "status": {
            "replicas": replicas,
            "readyReplicas": replicas,
            **(status or {}),
            "updatedReplicas": replicas,
            "availableReplicas": replicas,
        },
    }


def _pod_template(labels: Mapping[str, str], containers: Sequence[str]) -> JsonObject:
    return {
        "metadata": {"labels": dict(labels)},
        "spec": {"containers": [{"name": c, "image": f"registry.example/{c}:1.0"} for c in containers]},
    }


def stateful_set_object(
    namespace: str,
    name: str,
    *,
    replicas: int = 1,
    labels: Mapping[str, str] | None = None,
    containers: Sequence[str] = ("main",),
) -> JsonObject:
    """A StatefulSet whose pods (`<name>-0`, `<name>-1`, ...) carry `labels`, with all `replicas` ready."""
    return _workload_object(
        "StatefulSet", namespace, name, replicas, labels or {}, containers,
        spec={"serviceName": name}, status={"currentReplicas": replicas},
    )  # fmt: skip


def node_object(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    capacity: Mapping[str, str] | None = None,
    internal_ip: str | None = None,
    kubelet_version: str = "v1.32.0",
) -> JsonObject:
    """A Ready node; `capacity` is also its allocatable (e.g. {"nvidia.com/gpu": "4"})."""
    addresses = [{"type": "Hostname", "address": name}]
    if internal_ip is not None:
        addresses.insert(0, {"type": "InternalIP", "address": internal_ip})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {},
        "status": {
            "capacity": dict(capacity or {}),
            "allocatable": dict(capacity or {}),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": addresses,
            "nodeInfo": {
                "kubeletVersion": kubelet_version,
                "osImage": "Ubuntu 24.04 LTS",
                "kernelVersion": "6.8.0",
                "containerRuntimeVersion": "containerd://2.0.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def hpa_object(
    namespace: str,
    name: str,
    *,
    target: tuple[str, str],
    metric: str,
    average_value: str,
    min_replicas: int = 1,
    max_replicas: int = 10,
) -> JsonObject:
    """An autoscaling/v2 HorizontalPodAutoscaler of `target` (kind, name) on a Pods metric's average value; its
    status is what `hpa_status` sets (the stand-in runs no controller)."""
    kind, target_name = target
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target_name},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metric},
                        "target": {"type": "AverageValue", "averageValue": average_value},
                    },
                }
            ],
        },
        "status": {"currentReplicas": 0, "desiredReplicas": 0, "currentMetrics": []},
    }


def hpa_status(hpa: JsonObject, *, current_replicas: int, desired_replicas: int, average: str | None) -> JsonObject:
    """`hpa` with the status a controller would write: the replicas, and the metric's current average (None: unknown,
    as an HPA shows `<unknown>` while the metrics API gives nothing)."""
    metric = hpa["spec"]["metrics"][0]["pods"]["metric"]
    current = (
        [] if average is None else [{"type": "Pods", "pods": {"metric": metric, "current": {"averageValue": average}}}]
    )
    return {
        **hpa,
        "status": {"currentReplicas": current_replicas, "desiredReplicas": desired_replicas, "currentMetrics": current},
    }


def status_object(code: int, reason: str, message: str) -> JsonObject:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
