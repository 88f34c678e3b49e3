"""Per-step figures of a slice's devices folded into per-pod figures, then into per-workload totals and sketches, and
into the fleet's timeline: whole arrays at a time (rows: devices or pods; columns: the slice's steps).

A pod's step figures come from its devices (the rows of its edges):
- held: the GPU share of each device held in the step: 1 for a whole GPU, the profile's share for a MIG instance
  (toolkit/migprofiles.py), divided by the pods sharing the device (time-slicing, MPS);
- known: the held share of the devices whose utilization is known in the step;
- busy: each device's utilization times its GPU share (a pod's utilization on a shared GPU already is its part of
  the whole device, so it is not divided again);
- idle: known minus busy, at least 0 (as the recording rule `namespace_pod:gpu_pulse_pod_idle_gpus:sum`);
- idle_held: the held share of the devices whose utilization was at most the idle threshold.
GPU-hours are these times the step in hours. Only totals and sketches are kept, so memory grows with workloads, not
with pods x steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from report.model import Distribution, Placement, Timeline, WorkloadFigures, WorkloadKey
from report.sketch import LogSketch, bytes_sketch, ratio_sketch

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class EdgeSteps:
    """A slice's devices as pods held them: one row per (pod, device), the rows of a pod together, NaN where the
    device was not held (sharing), not measured (utilization) or not read (memory)."""

    pod_starts: IntArray  # the first row of each pod
    sharing: FloatArray  # pods sharing the device
    utilization: FloatArray
    memory: FloatArray
    fraction: FloatArray  # per row: the device's share of a GPU


@dataclass(frozen=True, slots=True)
class PodSteps:
    """Per pod (rows) and step (columns) of a slice; NaN where the pod held nothing."""

    held: FloatArray
    known: FloatArray
    busy: FloatArray
    idle: FloatArray
    idle_held: FloatArray
    utilization: FloatArray  # the pod's mean device utilization
    gpu_need: FloatArray  # busy, where the pod held one device
    memory: FloatArray
    devices: IntArray


def pod_steps(edges: EdgeSteps, idle_utilization: float) -> PodSteps:
    held_mask = ~np.isnan(edges.sharing) & (edges.sharing > 0)
    share = np.where(held_mask, edges.fraction[:, None] / np.where(held_mask, edges.sharing, 1.0), 0.0)
    measured = held_mask & ~np.isnan(edges.utilization)
    util = np.nan_to_num(edges.utilization)
    memory_seen = held_mask & ~np.isnan(edges.memory)

    one_each = edges.pod_starts.size == edges.sharing.shape[0]  # every pod holds one device: rows are pods

    def per_pod(values: npt.NDArray[np.float64] | npt.NDArray[np.bool_]) -> FloatArray:
        numbers = values.astype(np.float64, copy=False)
        return numbers if one_each else np.add.reduceat(numbers, edges.pod_starts, axis=0)

    devices = per_pod(held_mask)
    held = per_pod(share)
    known = per_pod(np.where(measured, share, 0.0))
    busy = per_pod(np.where(measured, util * edges.fraction[:, None], 0.0))
    idle_held = per_pod(np.where(measured & (util <= idle_utilization), share, 0.0))
    util_sum, util_count = per_pod(np.where(measured, util, 0.0)), per_pod(measured)
    memory = per_pod(np.where(memory_seen, np.nan_to_num(edges.memory), 0.0))
    memory_count = per_pod(memory_seen)
    nothing = devices == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        utilization = np.where(util_count > 0, util_sum / util_count, np.nan)
    return PodSteps(
        held=np.where(nothing, np.nan, held),
        known=np.where(nothing, np.nan, known),
        busy=np.where(nothing, np.nan, busy),
        idle=np.where(nothing, np.nan, np.maximum(known - busy, 0.0)),
        idle_held=np.where(nothing, np.nan, idle_held),
        utilization=utilization,
        gpu_need=np.where((devices == 1) & (util_count == 1), busy, np.nan),
        memory=np.where(memory_count > 0, memory, np.nan),
        devices=devices.astype(np.int64),
    )


@dataclass
class WorkloadTotals:
    key: WorkloadKey
    pods: set[str] = field(default_factory=set)
    held: float = 0.0  # GPU-steps
    known: float = 0.0
    busy: float = 0.0
    idle: float = 0.0
    idle_held: float = 0.0
    cost: float = 0.0  # price x GPU-hours
    held_device_steps: int = 0  # (device, step) pairs held
    devices: int = 0
    placements: set[Placement] = field(default_factory=set)
    profiles: set[str] = field(default_factory=set)
    models: dict[str, float] = field(default_factory=dict)  # GPU-hours held per model
    utilization: LogSketch = field(default_factory=ratio_sketch)
    gpu_need: LogSketch = field(default_factory=ratio_sketch)
    memory: LogSketch = field(default_factory=bytes_sketch)
    sm_active: LogSketch | None = None

    def add(self, names: Iterable[str], steps: PodSteps, rows: IntArray, sm_active: FloatArray | None) -> None:
        """Fold the pods at `rows` of a slice's figures into the totals."""
        self.pods.update(names)
        self.held += float(np.nansum(steps.held[rows]))
        self.known += float(np.nansum(steps.known[rows]))
        self.busy += float(np.nansum(steps.busy[rows]))
        self.idle += float(np.nansum(steps.idle[rows]))
        self.idle_held += float(np.nansum(steps.idle_held[rows]))
        devices = steps.devices[rows]
        self.held_device_steps += int(devices.sum())
        self.devices = max(self.devices, int(devices.max(initial=0)))
        self.utilization.add(steps.utilization[rows].ravel())
        self.gpu_need.add(steps.gpu_need[rows].ravel())
        self.memory.add(steps.memory[rows].ravel())
        if sm_active is not None and not np.all(np.isnan(sm_active)):
            if self.sm_active is None:
                self.sm_active = ratio_sketch()
            self.sm_active.add(sm_active.ravel())

    def add_device(self, model: str, gpu_hours: float, price_of: Callable[[str], float], placement: Placement) -> None:
        """One device's part of a slice: the GPU-hours it gave, on which model, held how."""
        self.models[model] = self.models.get(model, 0.0) + gpu_hours
        self.cost += gpu_hours * price_of(model)
        self.placements.add(placement)

    def figures(self, step_hours: float, gpu_memory: dict[str, float]) -> WorkloadFigures:
        placement = next(iter(self.placements)) if len(self.placements) == 1 else Placement.MIXED
        models = tuple(sorted(((m, h) for m, h in self.models.items()), key=lambda mh: -mh[1]))
        memories = [gpu_memory[m] for m, _ in models if m in gpu_memory]
        sm = self.sm_active
        return WorkloadFigures(
            key=self.key,
            pods=len(self.pods),
            models=models,
            devices_per_pod=self.devices,
            placement=placement,
            profile=next(iter(self.profiles)) if len(self.profiles) == 1 and placement is Placement.MIG else None,
            gpu_share=self.held / self.held_device_steps if self.held_device_steps else 0.0,
            held_gpu_hours=self.held * step_hours,
            known_gpu_hours=self.known * step_hours,
            busy_gpu_hours=self.busy * step_hours,
            idle_gpu_hours=self.idle * step_hours,
            idle_held_gpu_hours=self.idle_held * step_hours,
            cost=self.cost,
            utilization_p50=self.utilization.quantile(0.50),
            utilization_p95=self.utilization.quantile(0.95),
            utilization_p99=self.utilization.quantile(0.99),
            gpu_need_p99=self.gpu_need.quantile(0.99),
            sm_active_p50=sm.quantile(0.50) if sm is not None else None,
            sm_active_p95=sm.quantile(0.95) if sm is not None else None,
            memory_peak=self.memory.peak if self.memory.count else None,
            memory_p99=self.memory.quantile(0.99),
            gpu_memory_bytes=max(memories) if memories else None,
        )

    def distributions(self) -> tuple[Distribution, Distribution]:
        return _distribution(self.utilization), _distribution(self.memory)


def _distribution(sketch: LogSketch) -> Distribution:
    edges, counts = sketch.histogram()
    return Distribution(tuple(float(e) for e in edges), tuple(int(c) for c in counts))


class FleetTimeline:
    """Fleet totals per step of the window."""

    def __init__(self, steps: int) -> None:
        self.held = np.zeros(steps)
        self.known = np.zeros(steps)
        self.busy = np.zeros(steps)

    def add(self, first: int, steps: PodSteps) -> None:
        end = first + steps.held.shape[1]
        self.held[first:end] += np.nansum(steps.held, axis=0)
        self.known[first:end] += np.nansum(steps.known, axis=0)
        self.busy[first:end] += np.nansum(steps.busy, axis=0)

    def timeline(self, times: list[int]) -> Timeline:
        def rounded(values: FloatArray) -> tuple[float, ...]:
            return tuple(round(float(v), 6) for v in values)

        return Timeline(tuple(times), rounded(self.held), rounded(self.known), rounded(self.busy))
