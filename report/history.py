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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from report.accumulate import EdgeSteps, FleetTimeline, FloatArray, WorkloadTotals, pod_steps
from report.model import Placement, WorkloadKey
from report.owners import Owner, OwnerSource, promql_string
from report.prometheus import PrometheusClient, RangeSeries
from report.window import Window
from toolkit.migprofiles import gpu_fraction, mig_model

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
        progress: Progress | None = None,
    ) -> None:
        self._client = client
        self._window = window
        self._idle = idle_utilization
        self._price_of = price_of
        self._owners = owners
        self._max_points = max_points
        self._progress = progress or _no_progress
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
        """One slice of one namespace: every device row at once (report/accumulate.py), then per workload."""
        if not held:
            return
        grid = _Grid(self._window, first, last - first + 1)
        rows = sorted(held, key=lambda s: (_pod(s.labels), _edge(s.labels)))
        pods = [_pod(s.labels) for s in rows]
        starts = [i for i, pod in enumerate(pods) if i == 0 or pod != pods[i - 1]]
        util_by_edge = {_edge(s.labels): s for s in utilization}
        mem_by_edge = {_edge(s.labels): s for s in memory}
        profiles = [s.labels.get("mig_profile", "") for s in rows]
        edges = EdgeSteps(
            pod_starts=np.array(starts, dtype=np.int64),
            sharing=grid.matrix(rows),
            utilization=grid.matrix([util_by_edge.get(_edge(s.labels)) for s in rows]),
            memory=grid.matrix([mem_by_edge.get(_edge(s.labels)) for s in rows]),
            fraction=np.array([float(gpu_fraction(p)) if p else 1.0 for p in profiles]),
        )
        steps = pod_steps(edges, self._idle)
        sm_by_pod = {_pod(s.labels): s for s in sm_active}
        sm = grid.matrix([sm_by_pod.get(pods[i]) for i in starts]) if sm_by_pod else None
        by_workload: dict[WorkloadKey, list[int]] = defaultdict(list)
        for index, row in enumerate(starts):
            cluster, _, pod = pods[row]
            kind, name = owners.get(pod, ("Pod", pod))
            key = WorkloadKey(namespace, name, kind, cluster)
            by_workload[key].append(index)
        totals_of: dict[WorkloadKey, WorkloadTotals] = {}
        for key, indices in by_workload.items():
            totals = self.collected.workloads.get(key)
            if totals is None:
                totals = self.collected.workloads[key] = WorkloadTotals(key)
            totals_of[key] = totals
            picked = np.array(indices, dtype=np.int64)
            totals.add((pods[starts[i]][2] for i in indices), steps, picked, sm[picked] if sm is not None else None)
        # per device row: GPU-hours by model (cost), placement and profile
        step_hours = self._window.step / 3600
        present = ~np.isnan(edges.sharing) & (edges.sharing > 0)
        row_hours = (
            np.where(present, edges.fraction[:, None] / np.where(present, edges.sharing, 1.0), 0.0).sum(axis=1)
            * step_hours
        )
        most_shared = np.nanmax(np.where(present, edges.sharing, 0.0), axis=1)
        for row, series in enumerate(rows):
            cluster, _, pod = pods[row]
            kind, name = owners.get(pod, ("Pod", pod))
            totals = totals_of[WorkloadKey(namespace, name, kind, cluster)]
            profile = profiles[row]
            if profile:
                placement = Placement.MIG
                totals.profiles.add(profile)
            else:
                placement = Placement.SHARED if most_shared[row] > 1 else Placement.WHOLE
            model = self.collected.models.get(series.labels.get("uuid", ""), "unknown")
            totals.add_device(model, float(row_hours[row]), self._price_of, placement)
        self.timeline.add(first, steps)
        namespace_totals = self.collected.namespaces.setdefault(namespace, [0.0, 0.0, 0.0, 0.0])
        for i, figure in enumerate((steps.held, steps.known, steps.busy, steps.idle)):
            namespace_totals[i] += float(np.nansum(figure))


class _Grid:
    """Places a series' samples on the slice's steps (NaN where it has none)."""

    def __init__(self, window: Window, first: int, length: int) -> None:
        self._window = window
        self._first = first
        self.length = length

    def matrix(self, rows: Sequence[RangeSeries | None]) -> FloatArray:
        """One row per series (all NaN for None)."""
        out = np.full((len(rows), self.length), np.nan)
        for index, series in enumerate(rows):
            if series is not None:
                out[index] = self.of(series)
        return out

    def of(self, series: RangeSeries) -> FloatArray:
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
