"""The end-to-end cluster as data: five simulated GPU nodes (whole GPUs, MIG, a time-sliced GPU, GPUs allocated through
DRA ResourceClaims on an exporter of the dcgm dialect, and a node that goes through a driver upgrade and a MIG mode
change), the workloads whose pods run on them, and what the simulator does on the nodes' timelines.

Each node is a scenario file written for the run (the simulator's file format); the Kubernetes API test server gets
the same pods, with the UIDs the scenario loader derives, their workload's labels, and owner references (Deployment
pods through a ReplicaSet), as a cluster would have them.

Timeline (seconds of each node's scenario time, which starts when its exporter starts), stretched by
TIMELINE_STRETCH on a busy machine so that the stack is up before the first event (tests/support/waiting.py):
- LOAD_CHANGE_AT: the two GPUs of Deployment `llm-serve` go from 30 % (flat) to 90 %;
- GPU_LOST_AT: GPU 5 of `e2e-whole` (no pod on it) falls off the bus, and GPU 4 (chat's) reports XID 13 (an
  application error). Its driver (550.54.15) posts no event for the lost GPU, as a real one does not: the exporter
  counts the loss, GPU_IS_LOST, as the XID 79 the driver logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from exporter.catalogue import Dialect
from simulation import load_scenario
from simulation.kubeapi import KubeApiServer
from simulation.scenario import Scenario
from tests.support.waiting import patience

TIMELINE_STRETCH = patience(1.0)  # the load when the test file is imported: 1 on an idle machine
LOAD_CHANGE_AT = 45.0 * TIMELINE_STRETCH
GPU_LOST_AT = LOAD_CHANGE_AT + 5.0
LOW_LOAD = 30.0
HIGH_LOAD = 90.0
LOST_GPU = ("e2e-whole", 5)
XID_GPU = ("e2e-whole", 4, 13)  # at the same time, the chat pod's GPU reports an application XID
SEED = 11


@dataclass(frozen=True)
class Workload:
    namespace: str
    name: str
    kind: Literal["Deployment", "StatefulSet", "Pod"]
    template_hash: str = ""  # a Deployment's ReplicaSet is <name>-<hash>

    @property
    def selector(self) -> str:
        return f"app={self.name}"

    @property
    def replica_set(self) -> str:
        return f"{self.name}-{self.template_hash}"


LLM_SERVE = Workload("serving", "llm-serve", "Deployment", "6d9c7f")
CHAT = Workload("serving", "chat", "Deployment", "5b8d4c")
EMBED = Workload("search", "embed", "Deployment", "7f6b9d")
TRAINER = Workload("research", "trainer", "StatefulSet")
FINETUNE = Workload("research", "finetune", "StatefulSet")
NOTEBOOK = Workload("lab", "notebook-dana", "Pod")
RERANK = Workload("search", "rerank", "Deployment", "3c5a8e")  # GPUs from DRA ResourceClaims
INDEXER = Workload("batch", "indexer", "StatefulSet")  # on the node that is upgraded (test_upgrades.py)
WORKLOADS = (LLM_SERVE, CHAT, EMBED, TRAINER, FINETUNE, NOTEBOOK, RERANK, INDEXER)
# workloads whose GPUs report utilization (A100 MIG instances have none: `finetune` reports memory only)
WITH_UTILIZATION = (LLM_SERVE, CHAT, EMBED, TRAINER, NOTEBOOK, RERANK, INDEXER)
RERANK_LOAD = 75.0  # two pods at 75 % against a 60 % target: an HPA asks for ceil(2 x 1.25) = 3 replicas


def _pod(
    workload: Workload,
    name: str,
    gpus: list[dict[str, Any]],
    pids: list[int],
    claims: tuple[str, ...] = (),
    **extra: Any,
) -> dict[str, Any]:
    labels = {"app": workload.name}
    if workload.kind == "Deployment":
        labels["pod-template-hash"] = workload.template_hash
    return {
        "namespace": workload.namespace,
        "name": name,
        "labels": labels,
        "containers": [{"name": "main", "gpus": gpus, "pids": pids, "claims": list(claims)}],
        **extra,
    }


def _flat(percent: float) -> dict[str, Any]:
    return {"baseline": percent}


def _wavy(percent: float, amplitude: float, period: float, phase: float = 0.0) -> dict[str, Any]:
    return {"baseline": percent, "waves": [{"amplitude": amplitude, "period_s": period, "phase": phase}], "noise": 1}


WHOLE = {
    "description": "6 x H100: llm-serve on GPUs 0-1 (30 % until the load change), a 2-GPU trainer, a chat pod, "
    "GPU 5 idle until it falls off the bus",
    "node": "e2e-whole",
    "gpus": [
        {"model": "H100-SXM5-80GB", "count": 2, "load": _flat(LOW_LOAD)},
        {"model": "H100-SXM5-80GB", "count": 2, "load": _wavy(80, 4, 90)},
        {"model": "H100-SXM5-80GB", "load": _wavy(45, 3, 70)},
        {"model": "H100-SXM5-80GB"},
    ],
    "processes": [
        {"pid": 11001, "gpu": 0, "memory_mib": 30000},
        {"pid": 11002, "gpu": 1, "memory_mib": 30000},
        {"pid": 12001, "gpu": 2, "memory_mib": 60000},
        {"pid": 12002, "gpu": 3, "memory_mib": 60000},
        {"pid": 13001, "gpu": 4, "memory_mib": 20000},
    ],
    "pods": [
        _pod(LLM_SERVE, "llm-serve-6d9c7f-k2x4p", [{"gpu": 0}], [11001]),
        _pod(LLM_SERVE, "llm-serve-6d9c7f-q8z5m", [{"gpu": 1}], [11002]),
        _pod(TRAINER, "trainer-0", [{"gpu": 2}, {"gpu": 3}], [12001, 12002], qos="guaranteed"),
        _pod(CHAT, "chat-5b8d4c-w7r2t", [{"gpu": 4}], [13001]),
    ],
    "timeline": [
        {"at": LOAD_CHANGE_AT, "action": "set_load", "target": "0", "percent": HIGH_LOAD},
        {"at": LOAD_CHANGE_AT, "action": "set_load", "target": "1", "percent": HIGH_LOAD},
        {"at": GPU_LOST_AT, "action": "lose_gpu", "gpu": LOST_GPU[1]},
        {"at": GPU_LOST_AT, "action": "xid", "gpu": XID_GPU[1], "xid": XID_GPU[2]},
    ],
}

MIG = {
    "description": "an H100 with two 3g.40gb MIG instances (GPM gives per-instance utilization) for embed, and an "
    "A100 with a 3g.20gb instance (no utilization on A100 MIG) for finetune; an idle V100 beside them (the one "
    "generation that retires pages, so the node dashboard's page retirement panels have data)",
    "node": "e2e-mig",
    "gpus": [
        {
            "model": "H100-SXM5-80GB",
            "mig": [
                {"profile": "3g.40gb", "load": _wavy(40, 3, 80)},
                {"profile": "3g.40gb", "load": _wavy(55, 3, 100, 0.5)},
            ],
        },
        {"model": "A100-SXM4-40GB", "mig": [{"profile": "3g.20gb", "load": _flat(60)}, {"profile": "2g.10gb"}]},
        {"model": "V100-SXM2-16GB"},
    ],
    "processes": [
        {"pid": 21001, "gpu": 0, "mig": 0, "memory_mib": 30000},
        {"pid": 21002, "gpu": 0, "mig": 1, "memory_mib": 25000},
        {"pid": 22001, "gpu": 1, "mig": 0, "memory_mib": 15000},
    ],
    "pods": [
        _pod(EMBED, "embed-7f6b9d-h3n8c", [{"gpu": 0, "mig": 0}], [21001]),
        _pod(EMBED, "embed-7f6b9d-v5t2j", [{"gpu": 0, "mig": 1, "strategy": "single"}], [21002]),
        _pod(FINETUNE, "finetune-0", [{"gpu": 1, "mig": 0}], [22001]),
    ],
}

SHARED = {
    "description": "one time-sliced H100: three chat pods and a notebook, each with its own load",
    "node": "e2e-shared",
    "gpus": [{"model": "H100-SXM5-80GB"}],
    "processes": [
        {"pid": 31001, "gpu": 0, "memory_mib": 12000, "load": _wavy(20, 2, 60)},
        {"pid": 31002, "gpu": 0, "memory_mib": 14000, "load": _wavy(25, 2, 75, 0.3)},
        {"pid": 31003, "gpu": 0, "memory_mib": 9000, "load": _wavy(15, 2, 50, 0.6)},
        {"pid": 31004, "gpu": 0, "memory_mib": 3000, "load": _flat(5)},
    ],
    "pods": [
        _pod(CHAT, "chat-5b8d4c-a1b2c", [{"gpu": 0, "replica": 0}], [31001]),
        _pod(CHAT, "chat-5b8d4c-d3e4f", [{"gpu": 0, "replica": 1}], [31002]),
        _pod(CHAT, "chat-5b8d4c-g5h6j", [{"gpu": 0, "replica": 2}], [31003]),
        _pod(NOTEBOOK, "notebook-dana", [{"gpu": 0, "replica": 3}], [31004], qos="besteffort"),
    ],
}

DRA = {
    "description": "2 x H100 allocated by the NVIDIA DRA driver: each rerank pod holds one through its ResourceClaim",
    "node": "e2e-dra",
    "gpus": [{"model": "H100-SXM5-80GB", "count": 2, "load": _flat(RERANK_LOAD)}],
    "processes": [{"pid": 41001, "gpu": 0, "memory_mib": 24000}, {"pid": 41002, "gpu": 1, "memory_mib": 26000}],
    "claims": [
        {"namespace": "search", "name": "rerank-gpu-a", "devices": [{"gpu": 0}]},
        {"namespace": "search", "name": "rerank-gpu-b", "devices": [{"gpu": 1}]},
    ],
    "pods": [
        _pod(RERANK, "rerank-3c5a8e-b7k2d", [], [41001], claims=("rerank-gpu-a",)),
        _pod(RERANK, "rerank-3c5a8e-x9m4q", [], [41002], claims=("rerank-gpu-b",)),
    ],
}

MAINTAINED = {
    "description": "2 x H100 on driver 550: the indexer on GPU 0, GPU 1 idle with MIG off; test_upgrades.py upgrades "
    "its driver and turns MIG on on GPU 1, the GPU Operator's way (the exporter paused, then back)",
    "name": "e2e-maint",  # the same identities (UUIDs, pod UIDs) in every version of this node's scenario
    "node": "e2e-maint",
    "driver_version": "550.54.15",
    "gpus": [{"model": "H100-SXM5-80GB", "load": _wavy(50, 3, 60)}, {"model": "H100-SXM5-80GB"}],
    "processes": [{"pid": 51001, "gpu": 0, "memory_mib": 40000}],
    "pods": [_pod(INDEXER, "indexer-0", [{"gpu": 0}], [51001])],
}
UPGRADED_DRIVER = "570.86.15"
# scenario seconds of the exporter that comes back after the upgrade
MODULES_RELOADED_AT = 4.0 * TIMELINE_STRETCH
MIG_CHANGE_AT = 8.0 * TIMELINE_STRETCH  # the mig-manager's first try, refused while that exporter holds GPU 1
MIG_LAYOUT = [{"profile": "3g.40gb"}, {"profile": "3g.40gb"}]


def upgraded_without_a_reboot() -> dict[str, Any]:
    """The maintained node once its driver package was upgraded to 570 on the host: the exporter's container gets
    the 570 library while the 550 kernel modules are still loaded (LIB_RM_VERSION_MISMATCH) until they are reloaded;
    later the mig-manager tries to turn MIG on on GPU 1, which waits while the exporter holds the GPU."""
    return {
        **MAINTAINED,
        "driver_version": UPGRADED_DRIVER,
        "kernel_module_version": "550.54.15",
        "timeline": [
            {"at": MODULES_RELOADED_AT, "action": "unload_driver"},
            {"at": MODULES_RELOADED_AT, "action": "load_driver"},
            {"at": MIG_CHANGE_AT, "action": "reconfigure_mig", "gpu": 1, "mig": MIG_LAYOUT},
        ],
    }


def with_mig_on() -> dict[str, Any]:
    """The maintained node after the mig-manager's change: driver 570, GPU 1 with two 3g.40gb instances."""
    gpus = [MAINTAINED["gpus"][0], {"model": "H100-SXM5-80GB", "mig": MIG_LAYOUT}]
    return {**MAINTAINED, "driver_version": UPGRADED_DRIVER, "gpus": gpus}


def write_scenario(directory: Path, stem: str, data: dict[str, Any]) -> Path:
    path = directory / f"{stem}.yaml"
    path.write_text(yaml.safe_dump({"seed": SEED, **data}, sort_keys=False), encoding="utf-8")
    return path


NODES: dict[str, dict[str, Any]] = {str(data["node"]): data for data in (WHOLE, MIG, SHARED, DRA, MAINTAINED)}
MAINTAINED_NODE = str(MAINTAINED["node"])
# the exporters publish the prometheus dialect, but one: every default metric must work with both
DIALECTS: dict[str, Dialect] = {"e2e-dra": Dialect.DCGM}
# A node whose clock runs a minute ahead of everyone else's (its exporter runs under faketime): the direct source must
# neither drop its pods as stale nor serve their figures stamped in the future.
CLOCK_OFFSETS: dict[str, float] = {"e2e-mig": 60.0}
KILLED_NODE = "e2e-shared"  # the node whose exporter the last test stops


def write_scenarios(directory: Path) -> dict[str, Path]:
    """One scenario file per node; node name -> path."""
    directory.mkdir(parents=True, exist_ok=True)
    return {node: write_scenario(directory, node, data) for node, data in NODES.items()}


def load_scenarios(paths: dict[str, Path]) -> dict[str, Scenario]:
    """The scenarios as the exporters load them (same files, same seed: the same pod UIDs)."""
    return {node: load_scenario(str(path)) for node, path in paths.items()}


def workload_of(namespace: str, labels: dict[str, str]) -> Workload:
    return next(w for w in WORKLOADS if w.namespace == namespace and labels.get("app") == w.name)


def populate(kube: KubeApiServer, scenarios: dict[str, Scenario]) -> None:
    """The workloads' ReplicaSets and every scenario pod, Running on its node."""
    for workload in WORKLOADS:
        if workload.kind == "Deployment":
            kube.put_replica_set(
                workload.namespace, workload.replica_set, deployment=workload.name, labels={"app": workload.name}
            )
    for n, (node, scenario) in enumerate(sorted(scenarios.items()), start=1):
        for m, pod in enumerate(scenario.pods, start=1):
            workload = workload_of(pod.namespace, dict(pod.labels))
            owner = {
                "Deployment": ("ReplicaSet", workload.replica_set),
                "StatefulSet": ("StatefulSet", workload.name),
                "Pod": None,
            }[workload.kind]
            kube.put_pod(
                pod.namespace,
                pod.name,
                node=node,
                labels=dict(pod.labels),
                uid=pod.uid,
                owner=owner,
                pod_ip=f"10.{n}.0.{m}",
                host_ip=f"192.168.0.{n}",
                containers=[c.name for c in pod.containers],
                gpus_per_container=1,
            )


def pods_of(workload: Workload, scenarios: dict[str, Scenario]) -> dict[str, str]:
    """The workload's pods: name -> node."""
    return {
        pod.name: node
        for node, scenario in scenarios.items()
        for pod in scenario.pods
        if pod.namespace == workload.namespace and pod.labels.get("app") == workload.name
    }
