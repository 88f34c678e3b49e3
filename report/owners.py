"""Which workload a pod belongs to: from the Kubernetes API (owner references; a ReplicaSet to its Deployment, a Job
to its CronJob) when a kubeconfig is given, else from the history Prometheus holds of kube-state-metrics' owners
(the shipped rules record it as `namespace_workload_pod:gpu_pulse_kube_pod_owner:relabel`: it knows pods deleted
since, which the API does not), else the pod is its own workload (kind `Pod`). Never guessed from pod names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from report.prometheus import PrometheusClient

OWNER_SERIES = "namespace_workload_pod:gpu_pulse_kube_pod_owner:relabel"
PAGE = 500

Owner = tuple[str, str]  # (kind, name)


class OwnerSource(Protocol):
    async def owners(self, namespace: str, pods: Iterable[str]) -> Mapping[str, Owner]: ...


def promql_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class KubernetesOwners:
    """Owner references read from the API, one namespace at a time (pods, ReplicaSets, Jobs), in a worker thread."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client  # the client is tens of MB: imported only when a kubeconfig is given

        self._core = client.CoreV1Api(api_client)
        self._apps = client.AppsV1Api(api_client)
        self._batch = client.BatchV1Api(api_client)

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
        if any(kind == "Job" for kind, _ in direct.values()):
            for job in _pages(self._batch.list_namespaced_job, namespace):
                owner = _controller(job.metadata.owner_references)
                if owner is not None:
                    parents[("Job", job.metadata.name)] = owner
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
    """The owners kube-state-metrics reported over the window, as the shipped rules recorded them."""

    def __init__(self, client: PrometheusClient, end: float, seconds: int) -> None:
        self._client = client
        self._end = end
        self._seconds = seconds

    async def owners(self, namespace: str, pods: Iterable[str]) -> Mapping[str, Owner]:
        expr = (
            f"max by (pod, workload, workload_type) (last_over_time({OWNER_SERIES}"
            f"{{namespace={promql_string(namespace)}}}[{self._seconds}s]))"
        )
        wanted = set(pods)
        found: dict[str, Owner] = {}
        for sample in await self._client.instant_query(expr, self._end):
            pod, kind = sample.labels.get("pod", ""), sample.labels.get("workload_type", "")
            if pod in wanted and kind and kind != "unknown":
                found[pod] = (kind, sample.labels.get("workload", pod))
        return found
