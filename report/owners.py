"""Which workload a pod belongs to: from the Kubernetes API (owner references) when a kubeconfig is given,
then from the history Prometheus holds of kube-state-metrics' owners (it knows pods deleted since, which the API
does not), else the pod is its own workload (kind `Pod`). A ReplicaSet is followed to its Deployment, as the shipped
workload rules do; other owners (StatefulSet, Job, DaemonSet) are the workload. Never guessed from pod names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from report.prometheus import PrometheusClient

PAGE = 500

Owner = tuple[str, str]  # (kind, name)


class OwnerSource(Protocol):
    async def owners(self, namespace: str, pods: Iterable[str]) -> Mapping[str, Owner]: ...


def promql_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class KubernetesOwners:
    """Owner references read from the API, one namespace at a time (pods, ReplicaSets), in a worker thread."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client  # the client is tens of MB: imported only when a kubeconfig is given

        self._core = client.CoreV1Api(api_client)
        self._apps = client.AppsV1Api(api_client)

    async def owners(self, namespace: str, pods: Iterable[str]) -> Mapping[str, Owner]:
        wanted = set(pods)
        return await asyncio.to_thread(self._owners, namespace, wanted)

    def _owners(self, namespace: str, wanted: set[str]) -> dict[str, Owner]:
        direct: dict[str, Owner] = {}
        for pod in _pages(self._core.list_namespaced_pod, namespace):
            name = pod.metadata.name
            if name in wanted:
                direct[name] = _controller(pod.metadata.owner_references) or ("Pod", name)
        parents: dict[Owner, Owner] = {}
        if any(kind == "ReplicaSet" for kind, _ in direct.values()):
            for rs in _pages(self._apps.list_namespaced_replica_set, namespace):
                owner = _controller(rs.metadata.owner_references)
                if owner is not None:
                    parents[("ReplicaSet", rs.metadata.name)] = owner
        return {pod: parents.get(owner, owner) for pod, owner in direct.items()}


def _pages(call: Any, namespace: str) -> Iterable[Any]:
    token = None
    while True:
        answer = call(namespace, limit=PAGE, _continue=token) if token else call(namespace, limit=PAGE)
        yield from answer.items or ()
        token = answer.metadata._continue if answer.metadata is not None else None
        if not token:
            return


def _controller(references: Any) -> Owner | None:
    for ref in references or ():
        if ref.controller:
            return (str(ref.kind), str(ref.name))
    return None


class PrometheusOwners:
    """The owners kube-state-metrics reported during the window (`kube_pod_owner`, and `kube_replicaset_owner` from a
    ReplicaSet to its Deployment), read through the series API: the index only, no samples, and pods deleted since
    are still there. The same owners the shipped workload rules join (rules/workloads.py)."""

    def __init__(self, client: PrometheusClient, start: float, end: float) -> None:
        self._client = client
        self._start = start
        self._end = end

    async def owners(self, namespace: str, pods: Iterable[str]) -> Mapping[str, Owner]:
        where = f"namespace={promql_string(namespace)}"
        wanted = set(pods)
        direct: dict[str, Owner] = {}
        for labels in await self._client.series(f"kube_pod_owner{{{where}}}", self._start, self._end):
            pod, kind, name = labels.get("pod", ""), labels.get("owner_kind", ""), labels.get("owner_name", "")
            if pod not in wanted or labels.get("owner_is_controller") == "false" or not kind:
                continue
            direct.setdefault(pod, ("Pod", pod) if kind == "<none>" else (kind, name))
        parents: dict[str, Owner] = {}
        if any(kind == "ReplicaSet" for kind, _ in direct.values()):
            matcher = f'kube_replicaset_owner{{{where}, owner_kind="Deployment"}}'
            for labels in await self._client.series(matcher, self._start, self._end):
                parents.setdefault(labels.get("replicaset", ""), ("Deployment", labels.get("owner_name", "")))
        return {
            pod: parents.get(name, (kind, name)) if kind == "ReplicaSet" else (kind, name)
            for pod, (kind, name) in direct.items()
        }
