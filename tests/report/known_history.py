"""A history whose answer is known: eight pods on H100s (whole GPUs, a time-sliced GPU, a MIG instance) and one on an
L4, each steady for the whole window, written as OpenMetrics and turned into blocks by promtool, as an operator
backfills. Every figure the report must find follows from the table below by hand (see test_known_history.py)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

GIB = 2**30
H100 = "NVIDIA H100 80GB HBM3"
L4 = "NVIDIA L4"
L4_MEMORY = 24 * GIB
WINDOW_HOURS = 12
SAMPLE_SECONDS = 60


@dataclass(frozen=True)
class KnownPod:
    namespace: str
    pod: str
    owner: tuple[str, str]  # (kind, name) as kube_pod_owner reports it
    workload: tuple[str, str]  # (kind, name) the report must find
    node: str
    gpu: int
    utilization: float
    memory_gib: float
    sharing: int = 1
    mig: tuple[int, str] | None = None  # (GPU instance, profile)
    model: str = H100
    sm_active: float | None = None  # as the waste rules record it (Hopper's GPM)

    @property
    def uuid(self) -> str:
        return f"GPU-{self.node[-2:]}{self.gpu:02d}0000-0000-0000-0000-000000000000"


PODS = (
    KnownPod("ml", "notebook-0", ("StatefulSet", "notebook"), ("StatefulSet", "notebook"), "gpu-h1", 0, 0.01, 2),
    KnownPod(
        "ml", "small-infer-5d8f7c-abcde", ("ReplicaSet", "small-infer-5d8f7c"), ("Deployment", "small-infer"),
        "gpu-h1", 1, 0.08, 6,
    ),
    KnownPod(
        "ml", "mid-infer-6c9d8b-fghij", ("ReplicaSet", "mid-infer-6c9d8b"), ("Deployment", "mid-infer"),
        "gpu-h1", 2, 0.30, 25,
    ),
    KnownPod("ml", "train-0", ("Job", "train"), ("Job", "train"), "gpu-h1", 3, 0.90, 70, sm_active=0.625),
    KnownPod(
        "team", "chat-7f8e9d-klmno", ("ReplicaSet", "chat-7f8e9d"), ("Deployment", "chat"),
        "gpu-h1", 4, 0.20, 10, sharing=2,
    ),
    KnownPod("team", "embed-0", ("StatefulSet", "embed"), ("StatefulSet", "embed"), "gpu-h1", 4, 0.02, 3, sharing=2),
    KnownPod(
        "team", "finetune-0", ("StatefulSet", "finetune"), ("StatefulSet", "finetune"), "gpu-h1", 5, 0.5, 12,
        mig=(1, "3g.40gb"),
    ),
    KnownPod("team", "rerank-0", ("<none>", "<none>"), ("Pod", "rerank-0"), "gpu-l4", 0, 0.15, 4, model=L4),
)  # fmt: skip


def _labels(**labels: str) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items() if v != "")


def series_lines(pod: KnownPod) -> list[tuple[str, float]]:
    """(name{labels}, value) of the pod's per-pod series as the exporter publishes them, and kube-state-metrics'."""
    gi, profile = (str(pod.mig[0]), pod.mig[1]) if pod.mig else ("", "")
    share = "mig" if pod.mig else ("process" if pod.sharing > 1 else "exclusive")
    edge = _labels(
        job="gpu-pulse-exporter", node=pod.node, namespace=pod.namespace, pod=pod.pod, container="main",
        gpu=str(pod.gpu), uuid=pod.uuid, gpu_instance=gi, mig_profile=profile, share=share,
    )  # fmt: skip
    lines = [
        (f"gpu_pulse_pod_gpu_sharing_pods{{{edge}}}", float(pod.sharing)),
        (f"gpu_pulse_pod_device_info{{{edge}}}", 1.0),
        (f"gpu_pulse_pod_gpu_utilization_ratio{{{edge}}}", pod.utilization),
        (f"gpu_pulse_pod_gpu_memory_used_bytes{{{edge}}}", pod.memory_gib * GIB),
    ]
    if pod.sm_active is not None:
        recorded = _labels(namespace=pod.namespace, pod=pod.pod)
        lines.append((f"namespace_pod:gpu_pulse_pod_sm_active_ratio:avg{{{recorded}}}", pod.sm_active))
    kind, name = pod.owner
    ksm = _labels(job="kube-state-metrics", namespace=pod.namespace, pod=pod.pod, uid=f"uid-{pod.pod}")
    controller = "<none>" if kind == "<none>" else "true"
    lines.append(
        (f'kube_pod_owner{{{ksm},owner_kind="{kind}",owner_name="{name}",owner_is_controller="{controller}"}}', 1)
    )
    if kind == "ReplicaSet":
        rs = _labels(job="kube-state-metrics", namespace=pod.namespace, replicaset=name)
        owner = f'owner_kind="Deployment",owner_name="{pod.workload[1]}",owner_is_controller="true"'
        lines.append((f"kube_replicaset_owner{{{rs},{owner}}}", 1))
    return lines


def device_lines() -> list[tuple[str, float]]:
    """The GPUs' up series: the H100 node's exporter in the prometheus dialect, the L4 node's in the dcgm dialect,
    and the L4's recorded framebuffer size (the shipped device rules record it)."""
    lines: list[tuple[str, float]] = []
    seen: set[str] = set()
    for pod in PODS:
        if pod.uuid in seen:
            continue
        seen.add(pod.uuid)
        if pod.model == L4:
            labels = _labels(job="gpu-pulse-exporter", gpu=str(pod.gpu), UUID=pod.uuid, modelName=L4, Hostname=pod.node)
            lines.append((f"gpu_pulse_gpu_up{{{labels}}}", 1))
            normalized = _labels(node=pod.node, gpu=str(pod.gpu), uuid=pod.uuid, model=L4)
            lines.append((f"node_gpu:nvidia_gpu_memory_total_bytes:max{{{normalized}}}", float(L4_MEMORY)))
        else:
            labels = _labels(job="gpu-pulse-exporter", gpu=str(pod.gpu), uuid=pod.uuid, model=pod.model, node=pod.node)
            lines.append((f"nvidia_gpu_up{{{labels}}}", 1))
    return lines


def write_openmetrics(path: Path, end: int) -> None:
    """Every series every SAMPLE_SECONDS from an hour before the window to its end."""
    start = end - (WINDOW_HOURS + 1) * 3600
    series = [line for pod in PODS for line in series_lines(pod)] + device_lines()
    with path.open("w", encoding="utf-8") as out:
        for name, value in series:
            out.writelines(f"{name} {value!r} {t}\n" for t in range(start, end + 1, SAMPLE_SECONDS))
        out.write("# EOF\n")


def backfill(promtool: str, workdir: Path, data_dir: Path, end: int) -> None:
    source = workdir / "history.om"
    write_openmetrics(source, end)
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data_dir)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
