"""What a scheduler and the kubelets would do for the pods of a control plane that has neither, and the GPU nodes the
pods run on: each node's simulated pod-resources service and GPU load follow the real pods.

`GpuNodes.step()` does, through the API, what those components do:
- the scheduler binds each unscheduled pod to a node with enough free `nvidia.com/gpu` (pods/binding, as
  system:kube-scheduler);
- the node's kubelet, as system:node:<name> (the Node authorizer and NodeRestriction check it), starts a bound pod:
  the device plugin hands it free GPUs, and the pod's status turns Running with its containers ready and the
  Ready condition true (kubernetes/kubernetes pkg/kubelet/status/generate.go names the conditions);
- a pod being deleted (a deletionTimestamp: the ReplicaSet controller scaled down) has its containers stopped and is
  deleted for good with grace period 0, as the kubelet's status manager does, and its GPUs are free again.

Each node's pod-resources service (simulation/kubelet.py's FakeKubelet, in this process; its exporter is started
with `--kubelet-socket` pointing at it) lists the running pods with the GPUs they hold, and its exporter's simulated
GPUs take the load the test sets per workload: a workload's demand, in percent of one GPU, spread evenly over the GPUs
of its running pods (at most 100 % each), written to the node's load file (simulation/loadfile.py). So more replicas
mean less utilization per pod, as for a service whose requests are balanced over its pods.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from exporter.kubelet.podresources import ContainerDevices, ContainerResources, PodResources
from simulation.kubelet import FakeKubelet

GPU_RESOURCE = "nvidia.com/gpu"
SCHEDULER_USER = "system:kube-scheduler"


def node_user(node: str) -> str:
    return f"system:node:{node}"


@dataclass
class GpuNode:
    name: str
    gpus: tuple[str, ...]  # the GPUs' UUIDs, in index order (the device plugin's device ids)
    kubelet: FakeKubelet
    load_file: Path
    api: k8s.CoreV1Api  # as system:node:<name>
    host_ip: str
    held: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # GPU UUID -> (namespace, pod, container)
    pod_ips: dict[str, str] = field(default_factory=dict)  # pod UID -> its IP
    published_load: bytes = b""

    def free_gpus(self) -> list[str]:
        return [gpu for gpu in self.gpus if gpu not in self.held]

    def register(self) -> None:
        """Create its Node object and report it Ready with its GPUs, as a kubelet with the device plugin does."""
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": {"kubernetes.io/hostname": self.name}},
        }
        self.api.create_node(node)
        now = _now()
        capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU_RESOURCE: str(len(self.gpus))}
        status = {
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "addresses": [
                    {"type": "InternalIP", "address": self.host_ip},
                    {"type": "Hostname", "address": self.name},
                ],
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    },
                ],
            }
        }
        self.api.patch_node_status(self.name, status)


@dataclass
class GpuNodes:
    """The nodes, the scheduler and the kubelets; `demand` is the load per workload (namespace, app label)."""

    nodes: dict[str, GpuNode]
    scheduler: k8s.CoreV1Api
    demand: dict[tuple[str, str], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _counter: int = 0

    def set_demand(self, namespace: str, app: str, percent: float) -> None:
        """The workload's load in percent of one GPU, spread over its running pods' GPUs from the next step on."""
        with self._lock:
            self.demand[(namespace, app)] = percent

    def step(self) -> None:
        with self._lock:
            pods = self.scheduler.list_pod_for_all_namespaces().items
            # GPUs the pods bound to each node request, started or not: what the scheduler counts as allocated
            committed = {name: 0 for name in self.nodes}
            for pod in pods:
                if pod.spec.node_name in committed:
                    committed[pod.spec.node_name] += _gpus_requested(pod)
            for pod in pods:
                if pod.metadata.deletion_timestamp is not None:
                    self._stop(pod)
                elif not pod.spec.node_name:
                    self._bind(pod, committed)
                elif pod.status.phase == "Pending" and pod.spec.node_name in self.nodes:
                    self._start(pod)
            self._publish([p for p in pods if p.metadata.deletion_timestamp is None])

    def _bind(self, pod: Any, committed: dict[str, int]) -> None:
        wanted = _gpus_requested(pod)
        for node in self.nodes.values():
            if len(node.gpus) - committed[node.name] >= wanted:
                committed[node.name] += wanted
                binding = {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node.name},
                }
                self.scheduler.create_namespaced_pod_binding(
                    pod.metadata.name, pod.metadata.namespace, binding, _preload_content=False
                )
                return

    def _start(self, pod: Any) -> None:
        node = self.nodes[pod.spec.node_name]
        uid = pod.metadata.uid
        key = (pod.metadata.namespace, pod.metadata.name)
        if not any(holder[:2] == key for holder in node.held.values()):  # a status update that failed: kept GPUs
            for container in pod.spec.containers:
                limits = (container.resources.limits or {}) if container.resources else {}
                for gpu in node.free_gpus()[: int(limits.get(GPU_RESOURCE, 0))]:
                    node.held[gpu] = (*key, container.name)
        self._counter += 1
        ip = node.pod_ips.setdefault(uid, f"10.244.{self._counter // 250}.{self._counter % 250 + 1}")
        now = _now()
        conditions = [
            {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
            for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
        ]
        containers = [
            {"name": c.name, "image": c.image, "imageID": f"{c.image}@sha256:{'0' * 64}",
             "containerID": f"containerd://{uid.replace('-', '')}{n:02d}", "ready": True, "started": True,
             "restartCount": 0, "state": {"running": {"startedAt": now}}}
            for n, c in enumerate(pod.spec.containers)
        ]  # fmt: skip
        status = {
            "status": {
                "phase": "Running",
                "conditions": conditions,
                "hostIP": node.host_ip,
                "hostIPs": [{"ip": node.host_ip}],
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "startTime": now,
                "containerStatuses": containers,
                "qosClass": pod.status.qos_class or "BestEffort",
            }
        }
        node.api.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, status)

    def _stop(self, pod: Any) -> None:
        node = self.nodes.get(pod.spec.node_name or "")
        if node is None:  # never scheduled: nothing runs, the API server deletes it at once
            return
        for gpu, (namespace, name, _) in list(node.held.items()):
            if (namespace, name) == (pod.metadata.namespace, pod.metadata.name):
                del node.held[gpu]
        options = k8s.V1DeleteOptions(grace_period_seconds=0, preconditions=k8s.V1Preconditions(uid=pod.metadata.uid))
        try:
            node.api.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, body=options)
        except k8s.ApiException as error:
            if error.status not in (404, 409):
                raise

    def _publish(self, pods: list[Any]) -> None:
        """Each node's pod-resources answer and load file, from the GPUs its running pods hold."""
        running = {(p.metadata.namespace, p.metadata.name): p for p in pods if p.status.phase == "Running"}
        gpus_of: dict[tuple[str, str], int] = {}
        for node in self.nodes.values():
            for namespace, name, _ in node.held.values():
                pod = running.get((namespace, name))
                if pod is not None:
                    key = (namespace, (pod.metadata.labels or {}).get("app", ""))
                    gpus_of[key] = gpus_of.get(key, 0) + 1
        for node in self.nodes.values():
            containers: dict[tuple[str, str], dict[str, list[str]]] = {}
            loads: dict[str, float] = {}
            for gpu in node.gpus:
                holder = node.held.get(gpu)
                pod = running.get(holder[:2]) if holder is not None else None
                if holder is None or pod is None:
                    loads[gpu] = 0.0
                    continue
                containers.setdefault(holder[:2], {}).setdefault(holder[2], []).append(gpu)
                key = (holder[0], (pod.metadata.labels or {}).get("app", ""))
                loads[gpu] = min(100.0, self.demand.get(key, 0.0) / gpus_of[key])
            node.kubelet.set_pods(
                PodResources(
                    namespace,
                    name,
                    tuple(
                        ContainerResources(container, (ContainerDevices(GPU_RESOURCE, tuple(gpus)),))
                        for container, gpus in by_container.items()
                    ),
                )
                for (namespace, name), by_container in sorted(containers.items())
            )
            document = json.dumps(loads, sort_keys=True).encode()
            if document != node.published_load:
                _replace(node.load_file, document)
                node.published_load = document

    @contextmanager
    def running(self, period: float = 0.2) -> Iterator[GpuNodes]:
        """Step in a background thread every `period` seconds while the block runs."""
        stop = threading.Event()
        failures: list[BaseException] = []

        def loop() -> None:
            while not stop.wait(period):
                try:
                    self.step()
                except Exception as error:
                    failures.append(error)

        thread = threading.Thread(target=loop, name="scheduler-and-kubelets", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=10)


def _gpus_requested(pod: Any) -> int:
    total = 0
    for container in pod.spec.containers:
        limits = (container.resources.limits or {}) if container.resources else {}
        total += int(limits.get(GPU_RESOURCE, 0))
    return total


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _replace(path: Path, data: bytes) -> None:
    """Write the file whole: a reader sees the old content or the new, never half of it."""
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)
