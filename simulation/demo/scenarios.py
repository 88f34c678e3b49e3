"""The demo cluster as simulator scenarios: three GPU nodes whose pods run in namespace `demo`.

Deployment `llm-inference` (pods labelled `app=llm-inference`) has a pod on each kind of node: two on whole H100s, one
on a time-sliced H100, one on an H100 MIG instance. Their traffic cycles through the phases of TRAFFIC (a quiet phase
whose GPUs nonetheless read busy, a burst that pins them while the queue grows, a moderate one), with a faster ripple
and a little noise, each pod a bit out of step: the GPUs' load and the engines' arrivals both come from that one
schedule, so the two stay consistent, and the HPA on GPU utilization and the one on inference_saturation disagree where
docs/llm-serving.md says they do. Beside it: `embeddings` (two pods sharing a GPU with an inference pod) and a
fine-tuning job on the other MIG instance. `embeddings` is a StatefulSet (pods `embeddings-0` and `-1`), so the
adapter's StatefulSet metrics have something to combine. The serving pods run simulated engines (simulation/engines):
`llm-inference` a vLLM, `embeddings` a TGI, each on its pod's own loopback address and its engine's default port, as the
pod objects in the demo's API say (status.podIP and the gpu-pulse.dev/engine-port annotation); the exporters read them
(`--engines`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

NAMESPACE = "demo"
DEPLOYMENT = "llm-inference"
SELECTOR = f"app={DEPLOYMENT}"
STATEFUL_SET = "embeddings"
TARGET_UTILIZATION = 60


@dataclass(frozen=True, slots=True)
class DemoWorkload:
    name: str
    kind: str  # Deployment, StatefulSet or Job
    template_hash: str = ""

    @property
    def replica_set(self) -> str:
        return f"{self.name}-{self.template_hash}"


INFERENCE = DemoWorkload(DEPLOYMENT, "Deployment", "7d4b9c")
EMBEDDINGS = DemoWorkload(STATEFUL_SET, "StatefulSet")
FINETUNE = DemoWorkload("finetune", "Job")
WORKLOADS = (INFERENCE, EMBEDDINGS, FINETUNE)


@dataclass(frozen=True, slots=True)
class TrafficPhase:
    """One phase of llm-inference's traffic: how long it lasts, what its GPUs read (percent, NVML's utilization) and
    its requests' arrival rate (percent of the arrivals curve: 100 is the engine's `peak`, 1.5 times what it finishes
    at its largest batch, simulation/scenario.py Engine)."""

    name: str
    duration_s: float
    gpu_percent: float
    arrivals_percent: float


# Each phase outlasts the exporter's one-minute window that /pods averages GPU utilization over, so the summary (every
# few seconds) shows each settled.
TRAFFIC = (
    # A few long requests decoding: the queue is empty and the KV cache nearly so (arrivals 15 % of what the engine
    # can finish), yet NVML's utilization, "percent of time over the past sample period during which one or more
    # kernels was executing on the GPU" (nvml.h, nvmlUtilization_t), reads high: every decode step launches kernels
    # for the whole step whatever the batch (vLLM replays CUDA graphs per step, docs.vllm.ai "CUDA Graphs"), so a
    # batch of a few keeps the GPU busy most of the time (simulation/engines/model.py gpu_utilization).
    TrafficPhase("quiet-busy-gpu", 90.0, 85.0, 10.0),
    # Arrivals 1.35 times what the engine finishes at its largest batch: the batch fills within seconds up to what
    # the KV cache and --max-num-seqs allow (vLLM admits a request only when its blocks fit, simulation/engines/
    # model.py), the queue grows by the difference, and utilization cannot read above 100 %.
    TrafficPhase("burst", 90.0, 100.0, 90.0),
    # Back to moderate: the backlog drains (within a minute), then the GPUs read about half busy.
    TrafficPhase("moderate", 120.0, 45.0, 35.0),
)
TRAFFIC_CYCLE_S = sum(p.duration_s for p in TRAFFIC)


def traffic_phase(t: float) -> TrafficPhase:
    """The phase of TRAFFIC at `t` seconds since the demo's nodes started."""
    at = t % TRAFFIC_CYCLE_S if t > 0 else 0.0
    for phase in TRAFFIC:
        if at < phase.duration_s:
            return phase
        at -= phase.duration_s
    return TRAFFIC[-1]


def _phases(level: str) -> list[dict[str, Any]]:
    return [{"name": p.name, "duration_s": p.duration_s, "level": getattr(p, level)} for p in TRAFFIC]


def _traffic(phase: float) -> dict[str, Any]:
    """A pod's GPU load: TRAFFIC's GPU level, a ripple (its own `phase`, fraction of a period) and noise."""
    return {"phases": _phases("gpu_percent"), "waves": [{"amplitude": 4, "period_s": 57, "phase": phase}], "noise": 2}


def _arrivals(phase: float) -> dict[str, Any]:
    """A pod's engine arrivals: TRAFFIC's arrivals, with the ripple of its GPU load."""
    return {"phases": _phases("arrivals_percent"), "waves": [{"amplitude": 3, "period_s": 57, "phase": phase}]}


def _steady(percent: float, amplitude: float, period: float) -> dict[str, Any]:
    return {"baseline": percent, "waves": [{"amplitude": amplitude, "period_s": period}]}


# The serving engines (simulation/engines) of the demo's serving pods, each on the engine's port of its pod's own
# loopback address (write_scenarios), as a pod has its own IP; their request arrivals follow the same TRAFFIC phases as
# the pods' GPU load (the GPUs keep the scenario's curves, so each phase shows what it is meant to).
ENGINE_PORTS = {"vllm": 8000, "tgi": 3000}  # vLLM's `--port` default; TGI's launcher `--port` default


def _engine(kind: str, model: str, arrivals: dict[str, Any]) -> dict[str, Any]:
    return {"kind": kind, "model": model, "arrivals": arrivals, "port": ENGINE_PORTS[kind], "drives_gpu": False}


def _pod(
    workload: DemoWorkload, suffix: str, gpus: list[dict[str, Any]], pids: list[int], ripple: float = 0.0
) -> dict[str, Any]:
    labels = {"app": workload.name}
    name = f"{workload.name}-{suffix}"
    if workload.kind == "Deployment":
        labels["pod-template-hash"] = workload.template_hash
        name = f"{workload.replica_set}-{suffix}"
    if workload.kind == "StatefulSet":
        labels["statefulset.kubernetes.io/pod-name"] = name
    container = "worker" if workload.kind == "Job" else "server"
    pod: dict[str, Any] = {
        "namespace": NAMESPACE,
        "name": name,
        "labels": labels,
        "containers": [{"name": container, "gpus": gpus, "pids": pids}],
    }
    if workload.kind == "Deployment":
        pod["engine"] = _engine("vllm", "meta-llama/Llama-3.1-8B-Instruct", _arrivals(ripple))
    elif workload.kind == "StatefulSet":
        pod["engine"] = _engine("tgi", "BAAI/bge-large-en-v1.5", _steady(30, 10, 90))
    return pod


NODES: tuple[dict[str, Any], ...] = (
    {
        "node": "demo-h100",
        "description": "4 x H100: two llm-inference pods, two idle GPUs",
        "gpus": [
            {"model": "H100-SXM5-80GB", "load": _traffic(0.0)},
            {"model": "H100-SXM5-80GB", "load": _traffic(0.04)},
            {"model": "H100-SXM5-80GB", "count": 2},
        ],
        "processes": [
            {"pid": 41001, "gpu": 0, "name": "vllm", "memory_mib": 61000},
            {"pid": 41002, "gpu": 1, "name": "vllm", "memory_mib": 60500},
        ],
        "pods": [
            _pod(INFERENCE, "k8x2p", [{"gpu": 0}], [41001]),
            _pod(INFERENCE, "m4q7z", [{"gpu": 1}], [41002], ripple=0.04),
        ],
    },
    {
        "node": "demo-shared",
        "description": "1 x H100 time-sliced: an llm-inference pod and two embeddings pods",
        "gpus": [{"model": "H100-SXM5-80GB"}],
        "processes": [
            {"pid": 42001, "gpu": 0, "name": "vllm", "memory_mib": 40000, "load": _traffic(0.08)},
            {"pid": 42002, "gpu": 0, "memory_mib": 9000, "load": _steady(12, 5, 90)},
            {"pid": 42003, "gpu": 0, "memory_mib": 9000, "load": _steady(9, 4, 70)},
        ],
        "pods": [
            _pod(INFERENCE, "t3v9w", [{"gpu": 0, "replica": 0}], [42001], ripple=0.08),
            _pod(EMBEDDINGS, "0", [{"gpu": 0, "replica": 1}], [42002]),
            _pod(EMBEDDINGS, "1", [{"gpu": 0, "replica": 2}], [42003]),
        ],
    },
    {
        "node": "demo-mig",
        "description": "1 x H100 in MIG mode: llm-inference on one 3g.40gb instance, a fine-tuning job on the other",
        "gpus": [
            {
                "model": "H100-SXM5-80GB",
                "mig": [
                    {"profile": "3g.40gb", "load": _traffic(0.12)},
                    {"profile": "3g.40gb", "load": _steady(85, 6, 120)},
                ],
            }
        ],
        "processes": [
            {"pid": 43001, "gpu": 0, "mig": 0, "name": "vllm", "memory_mib": 36000},
            {"pid": 43002, "gpu": 0, "mig": 1, "memory_mib": 30000},
        ],
        "pods": [
            _pod(INFERENCE, "r6n4h", [{"gpu": 0, "mig": 0}], [43001], ripple=0.12),
            _pod(FINETUNE, "0", [{"gpu": 0, "mig": 1, "strategy": "single"}], [43002]),
        ],
    },
)


def write_scenarios(
    directory: Path, seed: int, network: int | None = None, nodes: tuple[dict[str, Any], ...] = NODES
) -> dict[str, Path]:
    """The demo's scenario files in `directory`: node name -> path. Each pod with an engine gets an address of its own
    in 127.<network>.<node>.0/24 (`network`: default one at random, so that two demos on one host do not meet)."""
    octet = network if network is not None else random.SystemRandom().randrange(16, 250)
    paths = {}
    for node_index, data in enumerate(nodes, start=1):
        pods = [
            {**pod, "ip": f"127.{octet}.{node_index}.{n}"} if "engine" in pod else pod
            for n, pod in enumerate(data["pods"], start=1)
        ]
        path = directory / f"{data['node']}.yaml"
        path.write_text(yaml.safe_dump({"seed": seed, **data, "pods": pods}, sort_keys=False), encoding="utf-8")
        paths[str(data["node"])] = path
    return paths
