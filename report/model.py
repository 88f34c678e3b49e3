"""The report's plain data: what was measured per workload, what is recommended and why, and the fleet's timeline."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Action(StrEnum):
    RECLAIM = "reclaim"
    MIG = "mig"
    SHARE = "share"
    KEEP = "keep"


class Placement(StrEnum):
    """How the workload's pods hold their GPUs."""

    WHOLE = "whole"  # whole GPUs, one pod each
    MIG = "mig"  # MIG instances
    SHARED = "shared"  # time-sliced or MPS shares
    MIXED = "mixed"


@dataclass(frozen=True, slots=True)
class WorkloadKey:
    namespace: str
    name: str
    kind: str  # Deployment, StatefulSet, Job, ..., Pod (its own workload)
    cluster: str = ""

    def __str__(self) -> str:
        where = f"{self.cluster}/" if self.cluster else ""
        return f"{where}{self.namespace}/{self.kind}/{self.name}"


@dataclass(frozen=True, slots=True)
class Distribution:
    """Bins of a sketch (upper edges) and their counts of steps, for a plot."""

    edges: tuple[float, ...]
    counts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class WorkloadFigures:
    key: WorkloadKey
    pods: int
    models: tuple[tuple[str, float], ...]  # (GPU model, GPU-hours held on it), most first
    devices_per_pod: int  # the most devices one pod held at once
    placement: Placement
    profile: str | None  # the MIG profile the pods hold, when they all hold one
    gpu_share: float  # GPUs one pod's device holds, mean over the time held (1 whole, 1/7 for 1g, 1/n shared)
    held_gpu_hours: float
    known_gpu_hours: float  # held while the devices' utilization was known
    busy_gpu_hours: float  # utilization-weighted
    idle_gpu_hours: float  # known - busy
    idle_held_gpu_hours: float  # held in steps where the device's utilization was at most the idle threshold
    cost: float
    utilization_p50: float | None  # device utilization (a MIG instance's own), pods' mean over their devices
    utilization_p95: float | None
    utilization_p99: float | None
    gpu_need_p99: float | None  # share of a whole GPU a single-device pod kept busy (utilization x instance share)
    sm_active_p50: float | None  # GPM SM activity, where recorded (namespace_pod:gpu_pulse_pod_sm_active_ratio:avg)
    sm_active_p95: float | None
    memory_peak: float | None  # bytes, the most a pod used
    memory_p99: float | None
    gpu_memory_bytes: float | None  # framebuffer of the GPU model held (the largest, when several)

    @property
    def idle_share(self) -> float | None:
        """Share of the known GPU-hours held while idle (the reclaim rule's figure)."""
        return self.idle_held_gpu_hours / self.known_gpu_hours if self.known_gpu_hours > 0 else None

    @property
    def model(self) -> str:
        return self.models[0][0] if self.models else "unknown"


@dataclass(frozen=True, slots=True)
class Recommendation:
    action: Action
    saving_gpu_hours: float
    saving_cost: float
    why: tuple[str, ...]  # sentences with the figures behind the action
    profile: str | None = None  # MIG: the recommended profile
    profile_gpu_share: float | None = None
    profile_memory_bytes: float | None = None
    share_with: int | None = None  # SHARE: how many such workloads one GPU takes


@dataclass(frozen=True, slots=True)
class WorkloadResult:
    figures: WorkloadFigures
    recommendation: Recommendation
    utilization: Distribution
    memory: Distribution


@dataclass(frozen=True, slots=True)
class Timeline:
    """The fleet per step: GPUs held, and busy GPU-equivalents (over the held GPUs whose utilization is known)."""

    times: tuple[int, ...]
    held: tuple[float, ...]
    known: tuple[float, ...]
    busy: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Report:
    prometheus_url: str
    generated_at: float
    start: int
    end: int
    step: int
    currency: str
    priced: bool
    thresholds: dict[str, float]
    owners: str  # where workloads came from
    timeline: Timeline
    workloads: tuple[WorkloadResult, ...]  # largest saving first
    namespaces: tuple[tuple[str, float, float, float, float], ...]  # (namespace, held, known, busy, idle GPU-hours)
    queries: int
    bytes_read: int
    notes: tuple[str, ...]
    # set when the window held no pod series to judge: what was looked for, where and when (the CLI exits 3)
    nothing_to_judge: str | None = None
