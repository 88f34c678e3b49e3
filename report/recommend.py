"""One recommendation per workload, with the figures behind it (docs/rightsizing.md explains the rules):

1. keep, when it held less than `min_gpu_hours`, or its devices' utilization was never known (MIG instances of GPUs
   without GPM): nothing to judge by;
2. reclaim, when its devices were idle (utilization at most `idle_utilization`) for at least `reclaim_idle_share` of
   the GPU-hours held: the saving is every GPU-hour it held;
3. MIG, for pods that hold one device of a GPU model in the MIG table: the smallest profile whose share of the GPU
   is at least the p99 of the share the pod kept busy, and whose memory is at least the pod's memory p99, each with
   `headroom` added, and which is smaller than what the pods hold now: the saving is the difference in GPU share;
4. share, for pods that hold one whole GPU and keep it little busy (utilization p95 at most `share_utilization`): k
   such workloads time-slice one GPU, k the most that fit both their utilization p95 and their memory p99 with the
   headroom (at most `max_sharing`): the saving is 1 - 1/k of the GPU-hours;
5. keep.
"""

from __future__ import annotations

import math

from report.model import Action, Placement, Recommendation, WorkloadFigures
from toolkit.migprofiles import MigProfile, gpu_fraction, mig_model
from toolkit.thresholds import Thresholds


def percent(value: float | None) -> str:
    return "unknown" if value is None else f"{value * 100:.1f}%"


def gib(value: float | None) -> str:
    return "unknown" if value is None else f"{value / 2**30:.2f} GiB"


def hours(value: float) -> str:
    return f"{value:,.1f} GPU-hours"


def hours_under(value: float, limit: float) -> str:
    """`value` GPU-hours, below `limit`, with as many decimals as it takes to read below it and, when it is not 0, not
    as 0: 0.048 under 0.05 reads "0.048", never "0.0" (nothing held) nor "0.05" (the limit itself)."""
    for decimals in range(1, 10):
        shown = f"{value:,.{decimals}f}"
        number = float(shown.replace(",", ""))
        if number < limit and (number > 0 or value <= 0):
            return f"{shown} GPU-hours"
    return f"{value:.3e} GPU-hours"


def recommend(f: WorkloadFigures, t: Thresholds) -> Recommendation:
    cost_per_hour = f.cost / f.held_gpu_hours if f.held_gpu_hours > 0 else 0.0
    if f.held_gpu_hours < t.min_gpu_hours:
        return _keep(
            f"it held {hours_under(f.held_gpu_hours, t.min_gpu_hours)}, under the {t.min_gpu_hours:g} needed to "
            "judge it"
        )
    if f.known_gpu_hours <= 0:
        return _keep(
            "the utilization of its devices is unknown (MIG instances of GPUs without GPM, or time-sliced GPUs whose "
            "processes could not be tied to pods): no recommendation without it"
        )
    idle_share = f.idle_share or 0.0
    usage = (
        f"utilization p50 {percent(f.utilization_p50)}, p95 {percent(f.utilization_p95)}; "
        f"memory p99 {gib(f.memory_p99)}, peak {gib(f.memory_peak)}"
    )
    if idle_share >= t.reclaim_idle_share:
        return Recommendation(
            Action.RECLAIM,
            f.held_gpu_hours,
            f.cost,
            (
                f"idle (utilization at most {percent(t.idle_utilization)}) for {percent(idle_share)} of the "
                f"{hours(f.known_gpu_hours)} measured, at least the {percent(t.reclaim_idle_share)} that calls for "
                f"reclaiming",
                f"{usage}; busy {hours(f.busy_gpu_hours)} of {hours(f.held_gpu_hours)} held",
                f"releasing its GPUs saves {hours(f.held_gpu_hours)}",
            ),
        )
    if f.devices_per_pod == 1 and f.placement in (Placement.WHOLE, Placement.MIG):
        fit = _mig(f, t, usage, cost_per_hour)
        if fit is not None:
            return fit
    if f.devices_per_pod == 1 and f.placement is Placement.WHOLE:
        shared = _share(f, t, usage, cost_per_hour)
        if shared is not None:
            return shared
    why = [f"{usage}; idle {percent(idle_share)} of the time measured"]
    if f.devices_per_pod > 1:
        why.append(f"its pods hold up to {f.devices_per_pod} devices each: MIG and time-slicing are judged per device")
    elif f.placement is Placement.SHARED:
        why.append("it already shares its GPU")
    else:
        why.append("no smaller MIG profile and no sharing fits its p95/p99 with the headroom")
    return Recommendation(Action.KEEP, 0.0, 0.0, tuple(why))


def _keep(reason: str) -> Recommendation:
    return Recommendation(Action.KEEP, 0.0, 0.0, (reason,))


def _mig(f: WorkloadFigures, t: Thresholds, usage: str, cost_per_hour: float) -> Recommendation | None:
    model = mig_model(f.model)
    if model is None or f.gpu_need_p99 is None or f.memory_p99 is None:
        return None
    current = float(gpu_fraction(f.profile)) if f.placement is Placement.MIG and f.profile else 1.0
    need = f.gpu_need_p99 * (1 + t.headroom)
    memory = f.memory_p99 * (1 + t.headroom)
    fitting = [p for p in model.profiles if p.gpu_fraction >= need and p.memory_bytes >= memory and "+" not in p.name]
    best: MigProfile | None = min(fitting, key=lambda p: (p.gpu_fraction, p.memory_bytes), default=None)
    if best is None or float(best.gpu_fraction) >= current - 1e-9:
        return None
    saved = f.held_gpu_hours * (1 - float(best.gpu_fraction) / current)
    now = f"a MIG {f.profile} instance" if current < 1 else f"a whole {f.model}"
    return Recommendation(
        Action.MIG,
        saved,
        saved * cost_per_hour,
        (
            f"each pod holds {now} and kept at most {percent(f.gpu_need_p99)} of a GPU busy (p99) with memory p99 "
            f"{gib(f.memory_p99)}",
            f"{best.name} ({best.compute_slices}/{best.compute_total} of the compute, {gib(best.memory_bytes)}"
            f"{'' if best.listed else ', estimated'}) is the "
            f"smallest {model.product} profile that holds p99 + {percent(t.headroom)} headroom: "
            f"{percent(need)} of the GPU and {gib(memory)}",
            f"{usage}; it saves {hours(saved)} ({percent(1 - float(best.gpu_fraction) / current)} of what it held)",
        ),
        profile=best.name,
        profile_gpu_share=float(best.gpu_fraction),
        profile_memory_bytes=float(best.memory_bytes),
    )


def _share(f: WorkloadFigures, t: Thresholds, usage: str, cost_per_hour: float) -> Recommendation | None:
    p95 = f.utilization_p95
    if p95 is None or p95 > t.share_utilization or f.memory_p99 is None or not f.gpu_memory_bytes:
        return None
    by_compute = math.floor(1 / max(p95 * (1 + t.headroom), 1e-9))
    by_memory = math.floor(f.gpu_memory_bytes / max(f.memory_p99 * (1 + t.headroom), 1.0))
    k = min(by_compute, by_memory, t.max_sharing)
    if k < 2:
        return None
    saved = f.held_gpu_hours * (1 - 1 / k)
    return Recommendation(
        Action.SHARE,
        saved,
        saved * cost_per_hour,
        (
            f"utilization p95 {percent(p95)} is at most the {percent(t.share_utilization)} of a candidate for "
            f"time-slicing, and no MIG profile of {f.model} fits it",
            f"{k} such workloads fit one GPU with {percent(t.headroom)} headroom: {k} x {percent(p95)} of its time "
            f"and {k} x {gib(f.memory_p99)} of its {gib(f.gpu_memory_bytes)} (time-slicing does not isolate memory)",
            f"{usage}; sharing saves {hours(saved)}",
        ),
        share_with=k,
    )
