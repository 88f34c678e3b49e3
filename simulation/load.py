"""Where utilization comes from: load domains (a GPU, or one MIG device) and their processes, and running integrals.

A domain's utilization is the sum of its processes' utilizations (processes without their own curve split the
domain's curve by their `share`), scaled down to 100 when it would exceed it. Overrides (`set_load`) replace a
domain's total or a process's figure. Everything is a function of scenario time, so results are reproducible.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from simulation.curves import Curve

TICK_S = 1.0  # sampling period of utilization rates and per-process samples
# the ticks of per-process samples the driver keeps: the newest 10 s (open-gpu-kernel-modules ctrl2080perf.h,
# NV2080_CTRL_PERF_GET_GPUMON_PERFMON_UTIL_SAMPLES_V2_PARAMS: "This circular queue wraps around after 10 seconds")
SAMPLE_BUFFER_TICKS = 10
INTEGRAL_STEP_S = 1.0


@dataclass(slots=True)
class ProcessLoad:
    pid: int
    share: float
    curve: Curve | None  # own curve; None: a share of the domain's curve
    memory_bytes: int
    name: str


@dataclass(slots=True)
class LoadDomain:
    """A GPU without MIG, or one MIG device: something NVML reports one utilization for."""

    curve: Curve
    processes: list[ProcessLoad] = field(default_factory=list)
    total_override: float | None = None
    process_overrides: dict[int, float] = field(default_factory=dict)
    # a MIG instance runs only its own processes' work: with none it is idle, whatever its curve says (nvml.h,
    # nvmlDeviceGetUtilizationRates: the time "during which one or more kernels was executing"; a MIG instance's
    # engines are its own, NVIDIA MIG user guide). A whole GPU's curve also stands for work the scenario lists no
    # process for.
    idle_without_processes: bool = False

    def split(self, t: float) -> tuple[float, dict[int, float]]:
        """(total utilization %, {pid: utilization %}) at scenario time t; the per-pid figures sum to the total."""
        procs = self.processes
        if not procs:
            if self.idle_without_processes:
                return 0.0, {}
            return (self.total_override if self.total_override is not None else self.curve(t)), {}
        shared_weight = sum(p.share for p in procs if p.curve is None)
        domain_value = self.curve(t) if shared_weight else 0.0
        values: dict[int, float] = {}
        for p in procs:
            v = self.process_overrides.get(p.pid)
            if v is None:
                v = p.curve(t) if p.curve is not None else domain_value * p.share / shared_weight
            values[p.pid] = v
        total = sum(values.values())
        if self.total_override is not None:
            target = self.total_override
            if total > 0:
                values = {pid: v * target / total for pid, v in values.items()}
            else:  # an override on processes that are all idle: split it by share
                weight = sum(p.share for p in procs)
                values = {p.pid: target * p.share / weight for p in procs}
            return target, values
        if total > 100.0:  # time-sliced past saturation: overridden processes keep their figure, the others yield
            pinned = sum(v for pid, v in values.items() if pid in self.process_overrides)
            free = sum(values.values()) - pinned
            f_pinned = min(1.0, 100.0 / pinned) if pinned else 1.0
            f_free = max(0.0, 100.0 - pinned * f_pinned) / free if free else 0.0
            values = {pid: v * (f_pinned if pid in self.process_overrides else f_free) for pid, v in values.items()}
            total = sum(values.values())
        return total, values

    def total(self, t: float) -> float:
        if not self.processes:
            if self.idle_without_processes:
                return 0.0
            return self.total_override if self.total_override is not None else self.curve(t)
        return self.split(t)[0]

    def override_pid(self, pid: int, percent: float | None) -> None:
        if percent is None:
            self.process_overrides.pop(pid, None)
        else:
            self.process_overrides[pid] = percent

    def override_total(self, percent: float | None) -> None:
        self.total_override = percent

    def memory_used(self) -> int:
        return sum(p.memory_bytes for p in self.processes)


def whole_percents(total: float, parts: dict[int, float]) -> tuple[int, dict[int, int]]:
    """Round a total and its parts to whole percent so that the rounded parts still sum to the rounded total."""
    whole = round(total)
    if not parts:
        return whole, {}
    floors = {k: math.floor(v) for k, v in parts.items()}
    missing = whole - sum(floors.values())
    by_remainder = sorted(parts, key=lambda k: (floors[k] - parts[k], k))
    if missing > 0:
        for k in by_remainder[:missing]:
            floors[k] += 1
    elif missing < 0:
        for k in reversed(by_remainder):
            if missing == 0:
                break
            if floors[k] > 0:
                floors[k] -= 1
                missing += 1
    return whole, floors


class Integral:
    """Running integral of f over scenario time (rectangle rule on a fixed grid): monotone, reproducible, cheap.

    Values depend only on f at the grid points, not on when the integral is read. Reading an earlier time than the
    last grid point reached returns the integral there (never smaller: counters stay monotone).
    """

    __slots__ = ("_f", "_f_k", "_k", "_lock", "_sum")

    def __init__(self, f: Curve | LoadDomain | None = None) -> None:
        self._f = f
        self._k = 0
        self._sum = 0.0
        self._f_k = self._eval(0.0)
        self._lock = threading.Lock()  # the poll thread and a control (set_load) may advance it at once

    def _eval(self, t: float) -> float:
        f = self._f
        if f is None:
            return 0.0
        return f.total(t) if isinstance(f, LoadDomain) else f(t)

    def at(self, t: float) -> float:
        h = INTEGRAL_STEP_S
        k = int(t // h) if t > 0 else 0
        with self._lock:
            while self._k < k:
                self._sum += self._f_k * h
                self._k += 1
                self._f_k = self._eval(self._k * h)
            if k < self._k:
                return self._sum
            return self._sum + self._f_k * max(0.0, t - self._k * h)


class ContinuedIntegral:
    """An integral that takes over from another at time `since`: its value there, plus its own growth after."""

    __slots__ = ("_base", "_inner", "_since", "_start")

    def __init__(self, base: float, since: float, inner: Integral | MixedIntegral) -> None:
        self._base = base
        self._since = since
        self._inner = inner
        self._start = inner.at(since)

    def at(self, t: float) -> float:
        return self._base + max(0.0, self._inner.at(max(t, self._since)) - self._start)


class MixedIntegral:
    """The integral of a slice-weighted mean of several domains (a MIG-enabled GPU's load)."""

    __slots__ = ("_parts",)

    def __init__(self, parts: list[tuple[float, Integral]]) -> None:
        self._parts = parts

    def at(self, t: float) -> float:
        return sum(w * i.at(t) for w, i in self._parts)
