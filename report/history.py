"""Reading the window's history from Prometheus, one namespace and one time slice at a time, into workload totals.

Per namespace: the label-values and series APIs (index look-ups, no samples read) name the namespaces and their
(pod, device) series; then, per time slice, three range queries at the window's step read each device a pod held
(`max_over_time` of `gpu_pulse_pod_gpu_sharing_pods`: present, and shared by how many), its utilization
(`avg_over_time`) and the pod's memory on it (`max_over_time`), plus SM activity where the waste rules record it.
A slice holds at most `max_points` points per query (series x steps), so no answer grows with the fleet or the window.
The per-pod series are the same in both exporter dialects; GPU models come from the devices' `up` series of either.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from report.accumulate import FleetTimeline, PodSteps, WorkloadTotals
from report.migprofiles import gpu_fraction, mig_model
from report.model import Placement, WorkloadKey
from report.owners import Owner, OwnerSource, promql_string
from report.prometheus import PrometheusClient, RangeSeries
from report.window import Window

HELD = "gpu_pulse_pod_gpu_sharing_pods"
UTILIZATION = "gpu_pulse_pod_gpu_utilization_ratio"
MEMORY = "gpu_pulse_pod_gpu_memory_used_bytes"
SM_ACTIVE = "namespace_pod:gpu_pulse_pod_sm_active_ratio:avg"
GPU_MEMORY = "node_gpu:nvidia_gpu_memory_total_bytes:max"
UP_SERIES = (("nvidia_gpu_up", "uuid", "model"), ("gpu_pulse_gpu_up", "UUID", "modelName"))  # prometheus, dcgm
EDGE = "cluster, namespace, pod, uuid, gpu_instance"
POD = "cluster, namespace, pod"
UUID_BATCH = 200

Progress = Callable[[str, int, int], None]  # (what, done, total)


def _no_progress(what: str, done: int, total: int) -> None:
    return None


@dataclass
class Collected:
    workloads: dict[WorkloadKey, WorkloadTotals] = field(default_factory=dict)
    namespaces: dict[str, list[float]] = field(default_factory=dict)  # held, known, busy, idle GPU-steps
    models: dict[str, str] = field(default_factory=dict)  # uuid -> model
    gpu_memory: dict[str, float] = field(default_factory=dict)  # model -> framebuffer bytes
    owner_sources: Counter[str] = field(default_factory=Counter)


class HistoryReader:
    def __init__(
        self,
        client: PrometheusClient,
        window: Window,
        *,
        idle_utilization: float,
        price_of: Callable[[str], float],
        owners: Sequence[tuple[str, OwnerSource]],
        max_points: int,
        progress: Progress = _no_progress,
    ) -> None:
        self._client = client
        self._window = window
        self._idle = idle_utilization
        self._price_of = price_of
        self._owners = owners
        self._max_points = max_points
        self._progress = progress
        self.timeline = FleetTimeline(window.steps)
        self.collected = Collected()

    async def read(self) -> Collected:
        w = self._window
        namespaces = sorted(await self._client.label_values("namespace", HELD, w.start, w.end))
        for done, namespace in enumerate(namespaces):
            self._progress(f"namespace {namespace}", done, len(namespaces))
            await self._namespace(namespace)
        self._progress("done", len(namespaces), len(namespaces))
        return self.collected

    async def _namespace(self, namespace: str) -> None:
        w = self._window
        selector = f"namespace={promql_string(namespace)}"
        edges = await self._client.series(f"{HELD}{{{selector}}}", w.start, w.end)
        if not edges:
            return
        await self._learn_models({e["uuid"] for e in edges if e.get("uuid")})
        pods = {e.get("pod", "") for e in edges}
        owners = await self._find_owners(namespace, pods)
        steps = max(1, self._max_points // len(edges))
        for first, last in w.slices(steps):
            answers = await asyncio.gather(
                self._range(
                    f"max by ({EDGE}, mig_profile) (max_over_time({HELD}{{{selector}}}[{w.step}s]))", first, last
                ),
                self._range(f"avg by ({EDGE}) (avg_over_time({UTILIZATION}{{{selector}}}[{w.step}s]))", first, last),
                self._range(f"sum by ({EDGE}) (max_over_time({MEMORY}{{{selector}}}[{w.step}s]))", first, last),
                self._range(f"avg by ({POD}) (avg_over_time({SM_ACTIVE}{{{selector}}}[{w.step}s]))", first, last),
            )
            self._fold(namespace, owners, first, last, *answers)

    async def _range(self, expr: str, first: int, last: int) -> list[RangeSeries]:
        w = self._window
        return await self._client.range_query(expr, w.time_of(first), w.time_of(last), w.step)

    async def _find_owners(self, namespace: str, pods: set[str]) -> dict[str, Owner]:
        found: dict[str, Owner] = {}
        for name, source in self._owners:
            missing = pods - found.keys()
            if not missing:
                break
            known = await source.owners(namespace, missing)
            self.collected.owner_sources[name] += len(known)
            found.update(known)
        for pod in pods - found.keys():
            found[pod] = ("Pod", pod)
            self.collected.owner_sources["pod"] += 1
        return found

    async def _learn_models(self, uuids: set[str]) -> None:
        new = sorted(uuids - self.collected.models.keys())
        w = self._window
        for at in range(0, len(new), UUID_BATCH):
            batch = "|".join(_regex_escape(u) for u in new[at : at + UUID_BATCH])
            for metric, uuid_label, model_label in UP_SERIES:
                found = await self._client.series(f"{metric}{{{uuid_label}=~{promql_string(batch)}}}", w.start, w.end)
                for labels in found:
                    if labels.get(uuid_label) and labels.get(model_label):
                        self.collected.models.setdefault(labels[uuid_label], labels[model_label])
            matcher = f'gpu_instance="", uuid=~{promql_string(batch)}'
            expr = f"max by (uuid, model) (last_over_time({GPU_MEMORY}{{{matcher}}}[1h]))"
            for sample in await self._client.instant_query(expr, w.end):
                model = sample.labels.get("model") or self.collected.models.get(sample.labels.get("uuid", ""), "")
                if model:
                    self.collected.gpu_memory[model] = max(self.collected.gpu_memory.get(model, 0.0), sample.value)
        for model in set(self.collected.models.values()) - self.collected.gpu_memory.keys():
            known = mig_model(model)
            if known is not None:
                self.collected.gpu_memory[model] = float(known.whole_gpu_bytes)

    def _fold(
        self,
        namespace: str,
        owners: Mapping[str, Owner],
        first: int,
        last: int,
        held: list[RangeSeries],
        utilization: list[RangeSeries],
        memory: list[RangeSeries],
        sm_active: list[RangeSeries],
    ) -> None:
        length = last - first + 1
        grid = _Grid(self._window, first, length)
        util_by_edge = {_edge(s.labels): grid.of(s) for s in utilization}
        mem_by_edge = {_edge(s.labels): grid.of(s) for s in memory}
        sm_by_pod = {_pod(s.labels): grid.of(s) for s in sm_active}
        by_pod: dict[tuple[str, str, str], list[RangeSeries]] = defaultdict(list)
        for series in held:
            by_pod[_pod(series.labels)].append(series)
        step_hours = self._window.step / 3600
        totals = self.collected.namespaces.setdefault(namespace, [0.0, 0.0, 0.0, 0.0])
        for pod_key, edges in by_pod.items():
            steps = self._pod_steps(pod_key, edges, grid, util_by_edge, mem_by_edge, sm_by_pod.get(pod_key), first)
            cluster, _, pod = pod_key
            kind, name = owners.get(pod, ("Pod", pod))
            key = WorkloadKey(namespace, name, kind, cluster)
            workload = self.collected.workloads.get(key)
            if workload is None:
                workload = self.collected.workloads[key] = WorkloadTotals(key)
            workload.add(pod, steps, step_hours, self._price_of)
            self.timeline.add(steps)
            totals[0] += float(np.nansum(steps.held))
            totals[1] += float(np.nansum(steps.known))
            totals[2] += float(np.nansum(steps.busy))
            totals[3] += float(np.nansum(steps.idle))

    def _pod_steps(
        self,
        pod_key: tuple[str, str, str],
        edges: Iterable[RangeSeries],
        grid: _Grid,
        util_by_edge: Mapping[tuple[str, ...], np.ndarray],
        mem_by_edge: Mapping[tuple[str, ...], np.ndarray],
        sm_active: np.ndarray | None,
        first: int,
    ) -> PodSteps:
        n = grid.length
        held, known, busy, idle = (np.zeros(n) for _ in range(4))
        util_sum, util_count, memory, device_count = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
        mem_seen = np.zeros(n, dtype=bool)
        placements: set[Placement] = set()
        profiles: set[str] = set()
        models: dict[str, float] = {}  # GPU-step shares by model
        for series in edges:
            key = _edge(series.labels)
            profile = series.labels.get("mig_profile", "")
            sharing = grid.of(series)
            present = ~np.isnan(sharing) & (sharing > 0)
            if not present.any():
                continue
            fraction = float(gpu_fraction(profile)) if profile else 1.0
            share = np.where(present, fraction / np.where(present, sharing, 1.0), 0.0)
            held += share
            device_count += present
            util = util_by_edge.get(key)
            if util is not None:
                measured = present & ~np.isnan(util)
                known += np.where(measured, share, 0.0)
                busy += np.where(measured, np.nan_to_num(util) * fraction, 0.0)
                idle += np.where(measured & (np.nan_to_num(util) <= self._idle), share, 0.0)
                util_sum += np.where(measured, np.nan_to_num(util), 0.0)
                util_count += measured
            mem = mem_by_edge.get(key)
            if mem is not None:
                seen = present & ~np.isnan(mem)
                memory += np.where(seen, np.nan_to_num(mem), 0.0)
                mem_seen |= seen
            if profile:
                placements.add(Placement.MIG)
                profiles.add(profile)
            if np.nanmax(sharing) > 1:
                placements.add(Placement.SHARED)
            elif not profile:
                placements.add(Placement.WHOLE)
            model = self.collected.models.get(series.labels.get("uuid", ""), "unknown")
            models[model] = models.get(model, 0.0) + float(share.sum())
        any_held = device_count > 0
        nan = np.full(n, np.nan)
        utilization = np.where(util_count > 0, util_sum / np.maximum(util_count, 1), nan)
        return PodSteps(
            first=first,
            held=np.where(any_held, held, nan),
            known=np.where(any_held, known, nan),
            busy=np.where(any_held, busy, nan),
            idle=np.where(any_held, np.maximum(known - busy, 0.0), nan),
            idle_held=np.where(any_held, idle, nan),
            utilization=utilization,
            gpu_need=np.where((device_count == 1) & (util_count == 1), busy, nan),
            memory=np.where(mem_seen, memory, nan),
            sm_active=sm_active,
            devices=int(device_count.max(initial=0)),
            placements=frozenset(placements),
            profiles=frozenset(profiles),
            models=models,
        )


class _Grid:
    """Places a series' samples on the slice's steps (NaN where it has none)."""

    def __init__(self, window: Window, first: int, length: int) -> None:
        self._window = window
        self._first = first
        self.length = length

    def of(self, series: RangeSeries) -> np.ndarray:
        out = np.full(self.length, np.nan)
        w = self._window
        index = np.rint((series.times - w.start) / w.step).astype(np.int64) - 1 - self._first
        inside = (index >= 0) & (index < self.length)
        out[index[inside]] = series.values[inside]
        return out


def _edge(labels: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(labels.get(k, "") for k in ("cluster", "namespace", "pod", "uuid", "gpu_instance"))


def _pod(labels: Mapping[str, str]) -> tuple[str, str, str]:
    return (labels.get("cluster", ""), labels.get("namespace", ""), labels.get("pod", ""))


def _regex_escape(text: str) -> str:
    return "".join(f"\\{c}" if c in r".^$*+?()[]{}|\/" else c for c in text)
