"""Per-step figures of pods folded into per-workload totals and sketches, and into the fleet's timeline.

A pod's step figures come from its edges (one per device it holds) in one time slice:
- held: the GPU share of each device held in the step: 1 for a whole GPU, the profile's share for a MIG instance
  (report/migprofiles.py), divided by the pods sharing the device (time-slicing, MPS);
- known: the held share of the devices whose utilization is known in the step;
- busy: each device's utilization times its GPU share (a pod's utilization on a shared GPU already is its part of
  the whole device, so it is not divided again);
- idle: known minus busy, at least 0 (as the recording rule `namespace_pod:gpu_pulse_pod_idle_gpus:sum`);
- idle_held: the held share of the devices whose utilization was at most the idle threshold.
GPU-hours are these times the step in hours. Only totals and sketches are kept, so memory grows with workloads, not
with pods x steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from report.model import Distribution, Placement, Timeline, WorkloadFigures, WorkloadKey
from report.sketch import LogSketch, bytes_sketch, ratio_sketch

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class PodSteps:
    """One pod's figures over the steps `first`.. of a slice; NaN where the pod held nothing."""

    first: int
    held: FloatArray
    known: FloatArray
    busy: FloatArray
    idle: FloatArray  # known - busy, at least 0
    idle_held: FloatArray
    utilization: FloatArray  # the pod's mean device utilization
    gpu_need: FloatArray  # busy, where the pod held one device (NaN elsewhere)
    memory: FloatArray
    sm_active: FloatArray | None
    devices: int
    placements: frozenset[Placement]
    profiles: frozenset[str]
    models: dict[str, float]  # GPU-step shares per model, to weigh cost and name the model


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
    held_steps: int = 0  # pod-steps with something held
    devices: int = 0
    placements: set[Placement] = field(default_factory=set)
    profiles: set[str] = field(default_factory=set)
    models: dict[str, float] = field(default_factory=dict)  # GPU-hours held per model
    utilization: LogSketch = field(default_factory=ratio_sketch)
    gpu_need: LogSketch = field(default_factory=ratio_sketch)
    memory: LogSketch = field(default_factory=bytes_sketch)
    sm_active: LogSketch | None = None

    def add(self, pod: str, steps: PodSteps, step_hours: float, price_of: Callable[[str], float]) -> None:
        self.pods.add(pod)
        held = float(np.nansum(steps.held))
        self.held += held
        self.known += float(np.nansum(steps.known))
        self.busy += float(np.nansum(steps.busy))
        self.idle += float(np.nansum(steps.idle))
        self.idle_held += float(np.nansum(steps.idle_held))
        self.held_steps += int(np.count_nonzero(steps.held > 0))
        total = sum(steps.models.values()) or 1.0
        for model, share in steps.models.items():
            self.models[model] = self.models.get(model, 0.0) + held * step_hours * share / total
            self.cost += held * step_hours * share / total * price_of(model)
        self.devices = max(self.devices, steps.devices)
        self.placements |= steps.placements
        self.profiles |= steps.profiles
        self.utilization.add(steps.utilization)
        self.gpu_need.add(steps.gpu_need)
        self.memory.add(steps.memory)
        if steps.sm_active is not None and not np.all(np.isnan(steps.sm_active)):
            if self.sm_active is None:
                self.sm_active = ratio_sketch()
            self.sm_active.add(steps.sm_active)

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
            gpu_share=self.held / self.held_steps / max(1, self.devices) if self.held_steps else 0.0,
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

    def add(self, steps: PodSteps) -> None:
        end = steps.first + steps.held.size
        self.held[steps.first : end] += np.nan_to_num(steps.held)
        self.known[steps.first : end] += np.nan_to_num(steps.known)
        self.busy[steps.first : end] += np.nan_to_num(steps.busy)

    def timeline(self, times: list[int]) -> Timeline:
        def rounded(values: FloatArray) -> tuple[float, ...]:
            return tuple(round(float(v), 6) for v in values)

        return Timeline(tuple(times), rounded(self.held), rounded(self.known), rounded(self.busy))
