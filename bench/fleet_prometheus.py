"""The `prometheus` source at fleet scale: the HPA's query over a 1,000-pod namespace while a real Prometheus holds the
series of 20,000 GPU pods (a day of history backfilled with promtool, the last minutes scraped live).

    PYTHONPATH=. python bench/fleet_prometheus.py [--pods 20000] [--namespaces 100] [--hours 24] [--queries 300]
        [--step 1800] [--no-rules] [--evaluation-interval 30] [--rule-window SECONDS] [--no-panels]
        [--panel-repeats 5] [--field-set default|all] [--snapshots 8] [--fleet-nice 10] [--profile] [--keep DIR]

The fleet: `--pods` pods with one GPU each, 8 per node (H100 nodes gpu-0000..), in `--namespaces` namespaces: `bench`
holds `--namespace-pods` pods of Deployment `infer` (app=infer), the others (team-00..) share the rest, 4 Deployments
each. Pod names are Deployment-like (`infer-<template hash>-<5 characters>`).

The series: each node serves exactly what the real exporter serves on an 8 x H100 node with a pod on each GPU
(bench/fleet_exposition.py: `python -m exporter --simulate` on that node, its `--field-set` (default: the default
set) in its default dialect, dcgm, captured at the start of the run; 383 series a node with the default set), with the
node's own name, GPU UUIDs and pods written in, plus what the shipped scrape configuration adds (deploy/overlays/plain:
job, instance = the node's exporter pod, node). The families the adapter's queries read follow a random walk that
continues the history; the others change as the exporter's did while captured. And what
kube-state-metrics serves of the pods' owners, which the workload rules read: kube_pod_owner per pod and
kube_replicaset_owner per ReplicaSet (--no-kube-state-metrics leaves them out, and every pod is then a workload of its
own to the rules). kube-state-metrics reports every pod of the cluster, not only those holding GPUs: `--cpu-pods`
more (default 20,000: half of four DaemonSets' on the nodes, half of CPU Deployments' in the teams' namespaces) are in
its series and nowhere else.

1. The Kubernetes API stand-in (simulation.kubeapi) with the same pods and the real adapter CLI on it (`--source
   prometheus`, TLS, client-certificate auth) start first: the adapter's pod cache fills while the history is written.
2. History: an OpenMetrics file per 2-hour block window with the families the adapter's queries read (per-pod
   utilization, memory, power and the three framebuffer families: 6 x --pods series) every `--step` seconds over
   `--hours` hours ending now, each turned into a block by `promtool tsdb create-blocks-from openmetrics` (two at
   once). Recording rules are not backfilled: the adapter's default queries read the raw series, and the rules
   evaluate from their loading on.
3. A real `prometheus` on those blocks (--storage.tsdb.max-block-duration=2h: see start_prometheus), later with the
   shipped rule file (rules/dist/dcgm, every --evaluation-interval seconds; --no-rules leaves it out), scraping the
   fleet every 15 s from `--shards` targets served by one process of this script (honor_labels, as shipped), its
   query log on. The fleet's processes (the targets, the API stand-in) run at `--fleet-nice` (10): they stand for
   other machines. Measuring starts once every target has been scraped for 65 s (the `[1m]` windows hold live samples
   only).
4. The baseline (--baseline-window, default 180 s): Prometheus scrapes the fleet without the rules, nothing else asks
   it anything, and its CPU is read. Then the shipped rules are loaded (the configuration rewritten, POST /-/reload)
   and, once the per-pod rules have been evaluated and two minutes more, the rule window (--rule-window, default 600 s):
   the same steady work with the rules. Every group's evaluations are read every 5 s (rule_cost.py) and judged
   against the budget; the CPU the rules add is Prometheus' CPU in the rule window less the baseline's.
5. Sequential requests over one kept-alive TLS connection, as the aggregator sends them:
       GET /apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/pods/*/gpu_utilization?labelSelector=app%3Dinfer
   with Prometheus' own time for the adapter's two queries (its query log); then the same PromQL (rendered from
   adapter/defaults.yaml as the adapter renders it) straight against /api/v1/query, alone and as the adapter sends
   them (both at once), for a small namespace, and the other default metrics' queries.
   The rule groups' times while these requests run back to back are printed too, not judged: a load test of the
   adapter's queries is not the fleet's steady state.
6. After the requests: every panel and variable query of the dashboards for the dcgm dialect (and
   the dialect-neutral ones), as Grafana sends them on opening each board over the last hour (see panel_queries.py),
   --panel-repeats times each; the slowest ten with wall and Prometheus' own time (--no-panels: skipped). The recorded
   series exist from Prometheus' start on only (the run says how much of the hour they span): a longer --rule-window
   gives the recorded-series panels more of their hour's data, and a --step of 60 the raw-series panels all of theirs.

Prints the series a node serves, the series Prometheus holds, its memory (RSS now and at its peak, Go heap), its CPU
in the rule window and while measured, per rule group what it cost in the rule window (every evaluation's time, its
max, missed iterations, the series it writes; see rule_cost.py) and while measured, the head series the rules add,
the costliest rules, and a table (p50, p99, goal, stretch); exits 1 when the adapter's p99 misses the goal (50 ms) or
an answer failed, or when a rule group is over its budget (10% of its interval, no missed iteration) or all groups
together take more than a quarter of a core, or when a dashboard query's p99 is over 2 s or it failed. `--profile`
runs the adapter under cProfile and prints where its time went. Every process it starts is stopped at the end, also on
failure or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import json
import math
import os
import pstats
import random
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from adapter.metrics_config import default_metrics_config
from adapter.sources.prometheus import namespace_matcher
from dashboards.generate import boards
from exporter.catalogue import (
    DCGM_DEFAULT_SET,
    DCGM_UP,
    POD_DEVICE_INFO,
    POD_ENERGY,
    POD_MEMORY_USED,
    POD_POWER,
    POD_SHARING,
    POD_UTILIZATION,
    Dialect,
)
from simulation.kubeapi import KubeApiServer
from tests.support.dashboard_queries import board_dialects
from tests.support.exporters import SERVING_LINE
from tests.support.processes import ChildProcesses, python_module
from tests.support.prometheus import LISTENING_LINE

sys.path.insert(0, str(Path(__file__).resolve().parent))

from adapter_cluster import AdapterCredentials
from fleet_exposition import GPUS, Family, Line, NodeIdentity, NodeTemplate, capture, save, scraped_sample, substituter
from fleet_exposition import load as load_template
from panel_queries import LIMIT_P99, Prometheus, Timing, engine_times, over_limit, read_log, slowest_table, time_board
from rule_cost import GROUP_SHARE, TOTAL_CORES, GroupCost, RuleGroupSampler, cost_table, within_budget

REPO = Path(__file__).resolve().parents[1]
RULE_FILE = REPO / "rules" / "dist" / "dcgm" / "gpu-pulse.rules.yaml"

NAMESPACE = "bench"
DEPLOYMENT = "infer"
SELECTOR = "app=infer"
HPA_PATH = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/pods/*/{metric}?labelSelector=app%3Dinfer"
GOAL_P99 = 0.050
STRETCH_P99 = 0.020

GPUS_PER_NODE = 8
DEPLOYMENTS_PER_NAMESPACE = 4
FB_TOTAL_MIB = 81559
FB_RESERVED_MIB = 597
KUBE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes draws pod-name suffixes and template hashes from

JOB = "gpu-pulse-exporter"  # the job name of the shipped scrape configuration
KSM_JOB = "kube-state-metrics"
KSM_PATH = "/kube-state-metrics"
SCRAPE_INTERVAL = 15
BLOCK_SECONDS = 2 * 3600  # promtool writes 2-hour blocks
WARM_SECONDS = 65  # scraped this long before measuring: the [1m] windows hold live samples only

# The families of one (pod, GPU) edge, in the order `edge_values` gives their values. BACKFILLED: the ones the
# adapter's default queries read, written into the history too.
DCGM_FAMILIES = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
)
POD_FAMILIES = (POD_DEVICE_INFO, POD_UTILIZATION, POD_MEMORY_USED, POD_POWER, POD_ENERGY, POD_SHARING)
FAMILIES = (*POD_FAMILIES, *DCGM_FAMILIES, DCGM_UP)
WALKED = {name: f for f, name in enumerate(FAMILIES)}
assert GPUS == GPUS_PER_NODE, "the exporter's template is a node of the fleet"
Entry = tuple[int, str]  # a history series: its family's index in FAMILIES, `name{labels} `
TEMPLATE = "template.json"  # the exporter's snapshots, in the work directory (fleet_exposition.save)
BACKFILLED = (
    POD_UTILIZATION,
    POD_MEMORY_USED,
    POD_POWER,
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
)
assert set(DCGM_FAMILIES) <= DCGM_DEFAULT_SET, "a simulated dcgm family the exporter does not serve by default"


# ---- the fleet -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Placement:
    """One GPU pod: where it runs and which Deployment owns it."""

    namespace: str
    deployment: str
    template_hash: str
    pod: str
    node: str
    gpu: int

    @property
    def replica_set(self) -> str:
        return f"{self.deployment}-{self.template_hash}"


def namespace_sizes(pods: int, namespaces: int, namespace_pods: int) -> list[tuple[str, int]]:
    """`bench` with `namespace_pods` pods, then team-00.. sharing the rest as evenly as can be."""
    others = max(1, namespaces - 1)
    rest = pods - namespace_pods
    sizes = [(NAMESPACE, namespace_pods)]
    sizes += [(f"team-{k:02d}", rest // others + (1 if k < rest % others else 0)) for k in range(others)]
    return [(name, size) for name, size in sizes if size > 0]


def _deployments(namespace: str, size: int) -> list[tuple[str, int]]:
    if namespace == NAMESPACE:
        return [(DEPLOYMENT, size)]
    kinds = ("serve", "embed", "rerank", "batch")
    count = min(DEPLOYMENTS_PER_NAMESPACE, size)
    return [(f"{kinds[d % len(kinds)]}-{d}", size // count + (1 if d < size % count else 0)) for d in range(count)]


def _kube_name(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(KUBE_ALPHABET) for _ in range(length))


def fleet(pods: int, namespaces: int, namespace_pods: int) -> list[Placement]:
    """Every pod of the fleet, the same for the same arguments (the cluster, the history and the scrapes agree)."""
    rng = random.Random(13)
    placements: list[Placement] = []
    for namespace, size in namespace_sizes(pods, namespaces, namespace_pods):
        for deployment, replicas in _deployments(namespace, size):
            template_hash = _kube_name(rng, 10)
            suffixes: set[str] = set()
            while len(suffixes) < replicas:
                suffixes.add(_kube_name(rng, 5))
            for suffix in sorted(suffixes):
                index = len(placements)
                node = f"gpu-{index // GPUS_PER_NODE:04d}"
                pod = f"{deployment}-{template_hash}-{suffix}"
                placements.append(Placement(namespace, deployment, template_hash, pod, node, index % GPUS_PER_NODE))
    return placements


# ---- the series: labels as the exporter and the shipped scrape configuration write them ----------------------------


def _gpu_uuid(node: str, index: int) -> str:
    """GPU `index`'s UUID on `node`: the same for the same node (the history and the scrapes agree)."""
    digest = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def exporter_pod(node: str) -> str:
    """The name of the node's exporter pod (a DaemonSet pod): the `instance` label the shipped scrape config sets."""
    return "gpu-pulse-exporter-" + _kube_name(random.Random(node), 5)


def node_identity(node: str, pods: Sequence[tuple[int, Placement]]) -> NodeIdentity:
    """What `node` writes over the exporter's template: its GPUs' UUIDs and the pod on each (slot k: GPU k)."""
    by_gpu = {p.gpu: p for _, p in pods}
    return NodeIdentity(
        node,
        exporter_pod(node),
        tuple(_gpu_uuid(node, k) for k in range(GPUS_PER_NODE)),
        tuple((by_gpu[k].namespace, by_gpu[k].pod) for k in range(GPUS_PER_NODE)),
    )


def nodes_of(placements: Sequence[Placement]) -> list[tuple[str, list[tuple[int, Placement]]]]:
    """The fleet's nodes in order, each with its pods and their indices in `placements` (their walks' offsets)."""
    nodes: dict[str, list[tuple[int, Placement]]] = {}
    for index, placement in enumerate(placements):
        nodes.setdefault(placement.node, []).append((index, placement))
    return list(nodes.items())


# ---- the values: a bounded random walk per pod, the same function of time for the history and the scrapes ----------

WALK = 4096
ENERGY_EPOCH = 1_700_000_000


def _walk(seed: int, low: float, high: float) -> list[float]:
    rng = random.Random(seed)
    value, values = (low + high) / 2, []
    for _ in range(WALK):
        value = min(high, max(low, value + rng.gauss(0, (high - low) / 40)))
        values.append(value)
    return values


@dataclass(frozen=True)
class ValueTables:
    """Each family's value text for each step of the walk (formatted once: writing 10 million lines is string work)."""

    util_ratio: tuple[str, ...]
    util_percent: tuple[str, ...]
    memory_bytes: tuple[str, ...]
    fb_free: tuple[str, ...]
    fb_used: tuple[str, ...]
    pod_watts: tuple[str, ...]
    gpu_watts: tuple[str, ...]

    @classmethod
    def build(cls) -> ValueTables:
        util = _walk(1, 0.0, 100.0)
        memory = [int(m) for m in _walk(2, 4_000, 76_000)]
        watts = [70 + 6.3 * u for u in util]
        return cls(
            util_ratio=tuple(f"{round(u / 100, 5):g}" for u in util),
            util_percent=tuple(str(round(u)) for u in util),
            memory_bytes=tuple(str(m * 1048576) for m in memory),
            fb_free=tuple(str(FB_TOTAL_MIB - FB_RESERVED_MIB - m) for m in memory),
            fb_used=tuple(str(m) for m in memory),
            pod_watts=tuple(f"{w:.3f}" for w in watts),
            gpu_watts=tuple(f"{w:.3f}" for w in watts),
        )


def edge_values(tables: ValueTables, offset: int, t: int) -> tuple[str, ...]:
    """The value of each family of FAMILIES for the pod whose walk starts at `offset`, at Unix time `t`."""
    k = (offset + t // SCRAPE_INTERVAL) % WALK
    joules = (t - ENERGY_EPOCH) * 400 + offset
    return (
        "1",
        tables.util_ratio[k],
        tables.memory_bytes[k],
        tables.pod_watts[k],
        str(joules),
        "1",
        tables.util_percent[k],
        tables.fb_free[k],
        tables.fb_used[k],
        str(FB_RESERVED_MIB),
        tables.gpu_watts[k],
        str(joules * 1000),
        "1",
    )


def walk_offset(index: int) -> int:
    return (index * 2654435761) % WALK


# ---- the history: OpenMetrics files, one per 2-hour block window, turned into blocks by promtool --------------------


@dataclass
class Backfill:
    """What the history holds and what writing it cost."""

    step: int
    start: int
    end: int
    series: int = 0
    files: int = 0
    lines: int = 0
    bytes: int = 0
    blocks: int = 0
    write_seconds: float = 0.0
    seconds: float = 0.0


def block_windows(start: int, end: int) -> list[tuple[int, int]]:
    """The 2-hour windows (aligned as promtool aligns its blocks) that [start, end] touches."""
    first = start - start % BLOCK_SECONDS
    return [(w, min(w + BLOCK_SECONDS, end + 1)) for w in range(first, end + 1, BLOCK_SECONDS)]


def node_samples(
    template: NodeTemplate,
    substitute: Callable[[str, Mapping[str, str]], str],
    node: str,
    pods: Sequence[tuple[int, Placement]],
    *,
    job: str | None,
    wanted: Callable[[str], bool] = lambda family: True,
) -> list[tuple[str, ...]]:
    """Per family of the template, the `name{labels}` of each of `node`'s series as the scrape stores them (`job`
    written in, or left to the target); a family not `wanted` has none."""
    identity = node_identity(node, pods)
    names = identity.replacements(template)
    return [
        tuple(scraped_sample(substitute(line.sample, names), node, identity.exporter_pod, job) for line in family.lines)
        if wanted(family.name)
        else ()
        for family in template.families
    ]


def history_series(placements: Sequence[Placement], template: NodeTemplate) -> list[tuple[int, tuple[Entry, ...]]]:
    """Per pod: its walk's offset and, per BACKFILLED family of the exporter's template, (the family's index in
    FAMILIES, `name{labels} ` as the scrape stores it, `job` included): the very series the scrapes continue."""
    substitute = substituter(template)
    picked = {name: FAMILIES.index(name) for name in BACKFILLED}
    series: list[tuple[int, tuple[Entry, ...]]] = []
    for node, pods in nodes_of(placements):
        samples = node_samples(template, substitute, node, pods, job=JOB, wanted=picked.__contains__)
        by_slot: dict[int, list[Entry]] = {k: [] for k in range(GPUS_PER_NODE)}
        for family, written in zip(template.families, samples, strict=True):
            for line, sample in zip(family.lines if written else (), written, strict=True):
                if line.slot is None:
                    raise ValueError(f"a {family.name} series of no GPU in the template: {line.sample}")
                by_slot[line.slot].append((picked[family.name], sample + " "))
        series += [(walk_offset(index), tuple(by_slot[p.gpu])) for index, p in pods]
    return series


def write_window(
    path: Path, series: Sequence[tuple[int, Sequence[Entry]]], tables: ValueTables, times: Sequence[int]
) -> int:
    """One OpenMetrics file with every backfilled series at each of `times`; its line count."""
    lines = 0
    with path.open("w", encoding="utf-8", buffering=1 << 22) as out:
        for t in times:
            tail = f" {t}\n"
            chunk: list[str] = []
            for offset, entries in series:
                values = edge_values(tables, offset, t)
                chunk += [prefix + values[f] + tail for f, prefix in entries]
            out.write("".join(chunk))
            lines += len(chunk)
        out.write("# EOF\n")
    return lines


def run_promtool(promtool: str, source: Path, blocks_dir: Path, log: Path) -> None:
    with log.open("ab") as output:
        subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(blocks_dir)],
            check=True,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    source.unlink()


def backfill(
    series: Sequence[tuple[int, Sequence[Entry]]], hours: float, step: int, end: int, data_dir: Path, workdir: Path
) -> Backfill:
    """Write the history and turn it into blocks in `data_dir`: files are written one after the other while promtool
    converts the earlier ones, two at a time (this machine has two cores)."""
    promtool = _tool("promtool")
    start = end - int(hours * 3600)
    start -= start % step
    report = Backfill(step=step, start=start, end=end, series=sum(len(entries) for _, entries in series))
    started = time.perf_counter()
    tables = ValueTables.build()
    data_dir.mkdir(parents=True, exist_ok=True)
    jobs: list[Future[None]] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for number, (low, high) in enumerate(block_windows(start, end)):
            times = range(start + math.ceil((max(low, start) - start) / step) * step, high, step)  # on the step grid
            if not times:
                continue
            source = workdir / f"history-{number:02d}.om"
            written = time.perf_counter()
            report.lines += write_window(source, series, tables, times)
            report.write_seconds += time.perf_counter() - written
            report.bytes += source.stat().st_size
            report.files += 1
            blocks_dir = workdir / f"blocks-{number:02d}"
            jobs.append(pool.submit(run_promtool, promtool, source, blocks_dir, workdir / "promtool.log"))
        for job in jobs:
            job.result()
    report.blocks = collect_blocks(workdir, data_dir)
    report.seconds = time.perf_counter() - started
    return report


def collect_blocks(workdir: Path, data_dir: Path) -> int:
    """Move the blocks promtool wrote (one output directory per file) into Prometheus' data directory; how many."""
    moved = 0
    for blocks_dir in sorted(workdir.glob("blocks-*")):
        for block in blocks_dir.iterdir():
            if (block / "meta.json").exists():
                block.rename(data_dir / block.name)
                moved += 1
        shutil.rmtree(blocks_dir)
    return moved


def prometheus_version(binary: str) -> str:
    """The first line of `binary --version` ("prometheus, version 2.42.0 (branch: ...)")."""
    done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False)
    return ((done.stdout or done.stderr).splitlines() or [f"{binary}: no version"])[0]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"{name} is not installed (scripts/test.sh installs the Debian package prometheus)")
    return path


# ---- the simulated fleet's exporters: the scrape targets (a process of its own, --role exporters) -----------------


def _walked_slots(family: Family) -> tuple[int, ...] | None:
    """The GPU slot of each series of a family the walk drives (None for the others)."""
    if family.name not in WALKED:
        return None
    slots = tuple(line.slot for line in family.lines if line.slot is not None)
    if len(slots) != len(family.lines):
        raise ValueError(f"a {family.name} series of no GPU in the exporter's template")
    return slots


@dataclass(frozen=True, slots=True)
class ServedNode:
    """One node as the targets serve it: its number (staggers its gauges), slot k's walk offset, and per family of
    the template the `name{labels} ` of each of its series."""

    number: int
    offsets: tuple[int, ...]
    prefixes: tuple[tuple[str, ...], ...]


class FleetTargets:
    """`/metrics?shard=k`: every `shards`-th node's series as its exporter serves them (the template of
    fleet_exposition.py with the node's names), grouped by family as the text format asks."""

    def __init__(self, placements: Sequence[Placement], template: NodeTemplate, shards: int) -> None:
        missing = set(FAMILIES) - {family.name for family in template.families}
        if missing:
            raise ValueError(f"the exporter's template lacks {sorted(missing)}, which the bench's walk drives")
        self._template = template
        self._slots = tuple(_walked_slots(family) for family in template.families)
        self._tables = ValueTables.build()
        self._origin = int(time.time())
        self._shards: list[list[ServedNode]] = [[] for _ in range(shards)]
        substitute = substituter(template)
        for number, (node, pods) in enumerate(nodes_of(placements)):
            offsets = {p.gpu: walk_offset(index) for index, p in pods}
            samples = node_samples(template, substitute, node, pods, job=None)
            prefixes = tuple(tuple(sample + " " for sample in family) for family in samples)
            served = ServedNode(number, tuple(offsets[k] for k in range(GPUS_PER_NODE)), prefixes)
            self._shards[number % shards].append(served)

    @property
    def series(self) -> int:
        return sum(len(p) for shard in self._shards for node in shard for p in node.prefixes)

    def render(self, shard: int, now: int) -> str:
        nodes = self._shards[shard]
        step = now // SCRAPE_INTERVAL
        walked = [[edge_values(self._tables, offset, now) for offset in node.offsets] for node in nodes]
        parts: list[str] = []
        for f, family in enumerate(self._template.families):
            parts.append(family.header)
            walk = WALKED.get(family.name)
            for node, values in zip(nodes, walked, strict=True):
                prefixes = node.prefixes[f]
                slots = self._slots[f]
                if walk is not None and slots is not None:
                    parts += [p + values[k][walk] + "\n" for p, k in zip(prefixes, slots, strict=True)]
                else:
                    k = step + node.number
                    parts += [
                        p + self._value(line, k, now) + "\n" for p, line in zip(prefixes, family.lines, strict=True)
                    ]
        return "".join(parts)

    def _value(self, line: Line, k: int, now: int) -> str:
        if line.clock:
            return str(now)
        if line.rate:
            return f"{float(line.values[0]) + line.rate * (now - self._origin):.3f}"
        return line.values[k % len(line.values)]

    async def handle(self, request: web.Request) -> web.Response:
        shard = int(request.query.get("shard", "0"))
        body = self.render(shard, int(time.time()))
        return web.Response(text=body, content_type="text/plain", charset="utf-8")


def cpu_pod_owners(count: int, namespaces: Sequence[str]) -> tuple[list[str], list[tuple[str, str, str]]]:
    """`count` pods that hold no GPU, as kube-state-metrics reports them: half of four DaemonSets in kube-system, half
    of CPU Deployments (50 per namespace at most) spread over `namespaces`. Their `kube_pod_owner` lines, and the
    (namespace, ReplicaSet, Deployment) of the Deployments' ReplicaSets."""
    lines: list[str] = []
    replica_sets: set[tuple[str, str, str]] = set()
    daemons = count // 2
    for k in range(daemons):
        pod, owner = f"node-agent-{k % 4}-{k // 4:05d}", f"node-agent-{k % 4}"
        lines.append(
            f'kube_pod_owner{{namespace="kube-system",pod="{pod}",uid="{uuid.uuid5(uuid.NAMESPACE_URL, pod)}",'
            f'owner_kind="DaemonSet",owner_name="{owner}",owner_is_controller="true"}} 1\n'
        )
    for k in range(count - daemons):
        namespace = namespaces[k % len(namespaces)]
        deployment = f"cpu-{(k // len(namespaces)) % 50:02d}"
        replica_set = f"{deployment}-7d9f5c6b8"
        pod = f"{replica_set}-{k:05d}"
        replica_sets.add((namespace, replica_set, deployment))
        lines.append(
            f'kube_pod_owner{{namespace="{namespace}",pod="{pod}",'
            f'uid="{uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{pod}")}",owner_kind="ReplicaSet",'
            f'owner_name="{replica_set}",owner_is_controller="true"}} 1\n'
        )
    return lines, sorted(replica_sets)


def owner_series(placements: Sequence[Placement], cpu_pods: int = 0) -> str:
    """What kube-state-metrics serves of the fleet's owners, which the workload rules read: `kube_pod_owner` per pod
    (owned by its ReplicaSet) and `kube_replicaset_owner` per ReplicaSet (owned by its Deployment), with the labels of
    kube-state-metrics v2 (docs/metrics/workload/pod-metrics.md and replicaset-metrics.md there). Without them every
    pod would fall to the rules' last resort, a workload of its own, as in a cluster without kube-state-metrics.
    `cpu_pods` more hold no GPU (cpu_pod_owners)."""
    lines = ["# TYPE kube_pod_owner gauge\n"]
    for p in placements:
        uid = uuid.uuid5(uuid.NAMESPACE_URL, f"{p.namespace}/{p.pod}")
        lines.append(
            f'kube_pod_owner{{namespace="{p.namespace}",pod="{p.pod}",uid="{uid}",owner_kind="ReplicaSet",'
            f'owner_name="{p.replica_set}",owner_is_controller="true"}} 1\n'
        )
    cpu_lines, cpu_replica_sets = cpu_pod_owners(cpu_pods, sorted({p.namespace for p in placements}))
    lines += cpu_lines
    lines.append("# TYPE kube_replicaset_owner gauge\n")
    gpu_replica_sets = {(p.namespace, p.replica_set, p.deployment) for p in placements}
    for namespace, replica_set, deployment in sorted(gpu_replica_sets | set(cpu_replica_sets)):
        lines.append(
            f'kube_replicaset_owner{{namespace="{namespace}",replicaset="{replica_set}",owner_kind="Deployment",'
            f'owner_name="{deployment}",owner_is_controller="true"}} 1\n'
        )
    return "".join(lines)


async def serve_targets(
    placements: Sequence[Placement], template: NodeTemplate, shards: int, cpu_pods: int, ready: Path
) -> None:
    targets = FleetTargets(placements, template, shards)
    owners = owner_series(placements, cpu_pods)

    async def kube_state_metrics(_: web.Request) -> web.Response:
        return web.Response(text=owners, content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/metrics", targets.handle)
    app.router.add_get(KSM_PATH, kube_state_metrics)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()  # the port it bound, read back
    _announce(ready, {"url": f"http://127.0.0.1:{runner.addresses[0][1]}"})
    await _until_terminated()
    await runner.cleanup()


# ---- the Kubernetes API stand-in with the fleet's pods (a process of its own, --role cluster) -----------------------


def populate(kube: KubeApiServer, placements: Sequence[Placement]) -> None:
    replica_sets = {(p.namespace, p.replica_set): p for p in placements}
    for (namespace, name), p in replica_sets.items():
        kube.put_replica_set(namespace, name, deployment=p.deployment, labels={"app": p.deployment})
    for index, p in enumerate(placements):
        kube.put_pod(
            p.namespace,
            p.pod,
            node=p.node,
            labels={"app": p.deployment, "pod-template-hash": p.template_hash},
            pod_ip=f"10.{index // 65536}.{(index // 256) % 256}.{index % 256}",
            owner=("ReplicaSet", p.replica_set),
            gpus_per_container=1,
        )


async def serve_cluster(placements: Sequence[Placement], ready: Path) -> None:
    kube = KubeApiServer()
    await kube.start()
    populate(kube, placements)
    _announce(ready, {"url": kube.url})
    await _until_terminated()
    await kube.stop()


def _announce(ready: Path, info: dict[str, str]) -> None:
    tmp = ready.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    tmp.replace(ready)


async def _until_terminated() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


# ---- starting the processes ---------------------------------------------------------------------------------------


@dataclass
class Running:
    """The processes of one run and how to reach them."""

    processes: ChildProcesses
    workdir: Path
    prometheus: str = ""  # known once it listens (start_prometheus)
    prometheus_pid: int = 0
    adapter: str = ""
    client_ssl: ssl.SSLContext | None = None
    profile: Path | None = None


def start_role(running: Running, role: str, args: argparse.Namespace) -> None:
    """Start this script as `role` (cluster or exporters), at `--fleet-nice`; `role_url` waits for it. The simulated
    fleet stands for 2,500 other machines and the Kubernetes API's, whose CPU Prometheus and the adapter never share
    in a cluster; on this machine it would otherwise take turns with them for its cores (as in bench/fleet.py)."""
    argv = ["nice", f"-n{args.fleet_nice}", sys.executable, str(Path(__file__)), f"--role={role}"]
    argv += [f"--ready={running.workdir / f'{role}.json'}"]
    argv += [f"--pods={args.pods}", f"--namespaces={args.namespaces}", f"--namespace-pods={args.namespace_pods}"]
    argv += [f"--shards={args.shards}", f"--cpu-pods={args.cpu_pods}", f"--template={running.workdir / TEMPLATE}"]
    running.processes.start(role, argv)


def role_url(running: Running, role: str) -> str:
    ready = running.workdir / f"{role}.json"
    _wait(ready.exists, f"the {role} process", 300, running, role)
    url: str = json.loads(ready.read_text())["url"]
    return url


def prometheus_config(targets_url: str, args: argparse.Namespace, query_log: Path, rules: bool) -> dict[str, Any]:
    """The shipped scrape job (honor_labels, 15 s), one static target per shard, the shipped rules (`rules`), a query
    log."""
    address = targets_url.removeprefix("http://")
    shards = [
        {"targets": [address], "labels": {"__param_shard": str(k), "instance": f"fleet-shard-{k:02d}"}}
        for k in range(args.shards)
    ]
    return {
        "global": {
            "scrape_interval": f"{SCRAPE_INTERVAL}s",
            "evaluation_interval": f"{args.evaluation_interval}s",
            "query_log_file": str(query_log),
        },
        "rule_files": [str(RULE_FILE)] if rules else [],
        "scrape_configs": [
            {"job_name": JOB, "honor_labels": True, "scrape_interval": f"{SCRAPE_INTERVAL}s", "static_configs": shards}
        ]
        + (
            [  # as kube-prometheus scrapes it: honor_labels, so its namespace and pod labels are the pod's
                {
                    "job_name": KSM_JOB,
                    "honor_labels": True,
                    "scrape_interval": "30s",
                    "metrics_path": KSM_PATH,
                    "static_configs": [{"targets": [address], "labels": {"instance": "kube-state-metrics-0"}}],
                }
            ]
            if args.kube_state_metrics
            else []
        ),
    }


def start_prometheus(running: Running, data_dir: Path, targets_url: str, args: argparse.Namespace) -> None:
    """Prometheus on the backfilled blocks. Its default would compact the day's 2-hour blocks into larger ones a
    minute after start, a minute of CPU here that a Prometheus which grew its history itself spreads over the day:
    --storage.tsdb.max-block-duration=2h leaves them as they are (the instant queries measured read none of them)."""
    write_config(running, targets_url, args, rules=False)
    config = running.workdir / "prometheus.yml"
    argv = [
        args.prometheus or _tool("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir}",
        "--web.listen-address=127.0.0.1:0",  # the port it bound is in its log, at its default level (info)
        "--storage.tsdb.max-block-duration=2h",
        "--web.enable-lifecycle",  # POST /-/reload: the rules are loaded after the baseline (load_rules)
    ]
    running.prometheus_pid = running.processes.start("prometheus", argv).pid
    running.prometheus = "http://" + running.processes.wait_for_line("prometheus", LISTENING_LINE, 120).group(1)
    _wait(lambda: _get_ok(f"{running.prometheus}/-/ready"), "prometheus ready", 120, running, "prometheus")


def write_config(running: Running, targets_url: str, args: argparse.Namespace, *, rules: bool) -> None:
    config = running.workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(targets_url, args, running.workdir / "query.log", rules)))


def load_rules(running: Running, targets_url: str, args: argparse.Namespace) -> None:
    """Load the shipped rules into the running Prometheus (its configuration rewritten, then POST /-/reload)."""
    write_config(running, targets_url, args, rules=True)
    request = urllib.request.Request(f"{running.prometheus}/-/reload", method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        if response.status != 200:
            raise SystemExit(f"prometheus did not reload its configuration: HTTP {response.status}")


def steady_cpu(running: Running, seconds: float) -> float:
    """Prometheus' CPU (cores) over `seconds` in which nothing of this script asks it anything."""
    before, started = prometheus_cpu(running), time.monotonic()
    time.sleep(seconds)
    return (prometheus_cpu(running) - before) / (time.monotonic() - started)


def start_adapter(running: Running, kube_url: str, profile: bool) -> None:
    """The adapter CLI with --source prometheus (TLS, client-certificate auth), started once Prometheus listens
    (it needs its address), while Prometheus warms up: its pod cache fills meanwhile. On port 0: its "serving"
    line says where it listens."""
    work = running.workdir
    credentials = AdapterCredentials.write(work, kube_url)
    flags = [*credentials.flags(), "--source=prometheus", f"--prometheus-url={running.prometheus}"]
    if profile:
        running.profile = work / "adapter.prof"
        argv = [sys.executable, "-m", "cProfile", "-o", str(running.profile), "-m", "adapter.cli", *flags]
    else:
        argv = python_module("adapter.cli", *flags)
    running.processes.start("adapter", argv)
    running.adapter = running.processes.wait_for_line("adapter", SERVING_LINE, 300).group(1)
    running.client_ssl = credentials.client_ssl()


def _get_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _wait(ready: Callable[[], bool], what: str, timeout: float, running: Running, process: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        code = running.processes.started[process].poll()
        if code is not None:
            raise SystemExit(f"{what}: {process} exited with {code}\n{running.processes.log_tail(process)}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout:.0f} s\n{running.processes.log_tail(process)}")
        time.sleep(0.5)


# ---- Prometheus' state ----------------------------------------------------------------------------------------------


def api(running: Running, path: str, **params: str) -> Any:
    url = f"{running.prometheus}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())["data"]


def scalar(running: Running, query: str, at: float | None = None) -> float:
    params = {"query": query} | ({"time": f"{at:.3f}"} if at is not None else {})
    result = api(running, "/api/v1/query", **params)["result"]
    return float(result[0]["value"][1]) if result else 0.0


def wait_rules(running: Running, pods: int) -> None:
    """Wait until the per-pod recording rules have been evaluated, then two minutes more (every group of one and two
    minutes ran: rules/recording.py's INTERVAL and ACCOUNTING_INTERVAL)."""
    rule = "count(namespace_pod:gpu_pulse_pod_gpu_utilization_ratio:avg)"
    _wait(lambda: scalar(running, rule) >= pods, "recording rules evaluated", 300, running, "prometheus")
    time.sleep(120)


def wait_warm(running: Running, pods: int) -> float:
    """Wait until every target has been scraped for WARM_SECONDS with every pod's series; the seconds waited."""
    started = time.monotonic()
    count = f"count({POD_UTILIZATION})"
    _wait(lambda: scalar(running, count) >= pods, "every pod scraped", 300, running, "prometheus")
    first_full = time.monotonic()
    scrapes = f'min(count_over_time(up{{job="{JOB}"}}[{WARM_SECONDS}s]))'
    warm = f"targets scraped for {WARM_SECONDS} s"
    _wait(lambda: time.monotonic() - first_full >= WARM_SECONDS, warm, 300, running, "prometheus")
    _wait(lambda: scalar(running, scrapes) >= WARM_SECONDS // SCRAPE_INTERVAL, warm, 300, running, "prometheus")
    return time.monotonic() - started


def self_metrics(running: Running, prefix: str) -> dict[str, float]:
    """Prometheus' own figures whose sample (name and labels) starts with `prefix`."""
    with urllib.request.urlopen(f"{running.prometheus}/metrics", timeout=30) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            sample, _, value = line.rpartition(" ")
            found[sample] = float(value)
    return found


def describe_tsdb(running: Running, report: Backfill) -> list[str]:
    """Series Prometheus holds: its TSDB status (head) and counts of the fleet's families, now and in the history."""
    head = api(running, "/api/v1/status/tsdb")["headStats"]
    pod_series = scalar(running, 'count({__name__=~"gpu_pulse_pod_.+"})')
    dcgm_series = scalar(running, 'count({__name__=~"DCGM_FI_.+"})')
    middle = report.start + (report.end - report.start) // 2 // report.step * report.step  # a sample's time
    history = scalar(running, f"count({POD_UTILIZATION})", at=middle)
    blocks = self_metrics(running, "prometheus_tsdb_blocks_loaded").get("prometheus_tsdb_blocks_loaded", math.nan)
    return [
        f"prometheus head (TSDB status): {head['numSeries']:,} series, {head['numLabelPairs']:,} label pairs;"
        f" {scalar(running, f'count({POD_UTILIZATION})'):,.0f} {POD_UTILIZATION} series,"
        f" {pod_series:,.0f} gpu_pulse_pod_* series, {dcgm_series:,.0f} DCGM_FI_* series",
        f"prometheus blocks: {blocks:.0f} loaded; {history:,.0f} {POD_UTILIZATION} series at"
        f" {time.strftime('%H:%M', time.gmtime(middle))} UTC, {(report.end - middle) / 3600:.0f} h ago",
    ]


def rule_series(running: Running) -> str:
    """The head series the rules add: the head's series beyond those the scrapes bring (and the scrapes' own `up`
    and `scrape_*` series, five per target)."""
    head = api(running, "/api/v1/status/tsdb")["headStats"]["numSeries"]
    scraped = scalar(running, "sum(scrape_samples_scraped)") + 5 * scalar(running, "count(up)")
    return f"head series: {head:,.0f}, of which scraped {scraped:,.0f}, added by the rules {head - scraped:,.0f}"


def prometheus_memory(running: Running) -> str:
    """Prometheus' resident memory now and at its peak (/proc), and its Go heap in use (its own metric)."""
    status = Path(f"/proc/{running.prometheus_pid}/status").read_text()
    kib = {line.split(":")[0]: int(line.split()[1]) for line in status.splitlines() if line.startswith("Vm")}
    heap = self_metrics(running, "go_memstats_heap_inuse_bytes").get("go_memstats_heap_inuse_bytes", math.nan)
    return (
        f"prometheus memory: RSS {kib['VmRSS'] / 2**20:.2f} GiB, peak {kib['VmHWM'] / 2**20:.2f} GiB;"
        f" Go heap in use {heap / 2**30:.2f} GiB"
    )


def prometheus_cpu(running: Running) -> float:
    return self_metrics(running, "process_cpu_seconds_total").get("process_cpu_seconds_total", math.nan)


# ---- measuring ------------------------------------------------------------------------------------------------------


@dataclass
class Row:
    what: str
    latencies: list[float]
    failures: int = 0
    goal: float | None = None
    stretch: float | None = None
    note: str = ""


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def time_adapter(running: Running, what: str, metric: str, count: int) -> Row:
    """`count` sequential HPA requests over one kept-alive TLS connection (as the aggregator sends them)."""
    assert running.client_ssl is not None
    url = running.adapter + HPA_PATH.format(metric=metric)
    row = Row(what, [])
    served: set[int] = set()
    failed: Counter[str] = Counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1, ssl=running.client_ssl)) as session:
        for _ in range(count):
            started = time.perf_counter()
            async with session.get(url) as response:
                body = await response.read()
                status = response.status
            row.latencies.append(time.perf_counter() - started)
            if status == 200:
                served.add(len(json.loads(body)["items"]))
            else:
                failed[f"HTTP {status}"] += 1
    row.failures = sum(failed.values())
    row.note = f"{'/'.join(str(s) for s in sorted(served))} pods served" + "".join(
        f", {n} x {k}" for k, n in failed.items()
    )
    return row


async def time_promql(running: Running, what: str, queries: Sequence[str], count: int) -> Row:
    """`count` rounds of `queries` sent at once (as the adapter sends a metric's two) to /api/v1/query, in the GET
    form the adapter uses, over kept-alive connections."""
    url = running.prometheus + "/api/v1/query"
    row = Row(what, [])
    sizes: list[int] = []
    body_bytes: list[int] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=len(queries))) as session:

        async def one(query: str) -> tuple[int, int]:
            async with session.get(url, params={"query": query}) as response:
                body = await response.read()
                result = json.loads(body)["data"]["result"] if response.status == 200 else []
                return len(result), len(body) if response.status == 200 else -1

        for _ in range(count):
            started = time.perf_counter()
            answers = await asyncio.gather(*(one(q) for q in queries))
            row.latencies.append(time.perf_counter() - started)
            row.failures += sum(1 for _, size in answers if size < 0)
            sizes = [series for series, _ in answers]
            body_bytes = [size for _, size in answers]
    row.note = f"{' + '.join(str(s) for s in sizes)} series, {' + '.join(f'{b // 1024}' for b in body_bytes)} KiB"
    return row


def adapter_queries(namespace: str) -> dict[str, tuple[str, str]]:
    """Per default metric, the (value query, sample-time query) the adapter sends for one namespace, rendered as the
    adapter renders them (adapter.sources.prometheus)."""
    matcher = namespace_matcher([namespace])
    return {m.name: m.prometheus_queries(matcher) for m in default_metrics_config().metrics if m.prometheus is not None}


def engine_rows(log: Path, offset: int, queries: Sequence[tuple[str, str]]) -> list[Row]:
    """Prometheus' own time (execTotalTime in its query log, after `offset`) for each of `queries`, with the samples
    each touched."""
    timings: dict[str, list[float]] = {query: [] for _, query in queries}
    samples: dict[str, int] = {}
    for entry in read_log(log, offset):
        query = entry.get("params", {}).get("query")
        if query in timings and "ruleGroup" not in entry:
            timings[query].append(float(entry["stats"]["timings"]["execTotalTime"]))
            samples[query] = int(entry["stats"].get("samples", {}).get("totalQueryableSamples", -1))
    return [
        Row(
            f"  prometheus' own time, {what} (query log)",
            timings[query],
            note=f"{samples.get(query, 0):,} samples read",
        )
        for what, query in queries
        if timings[query]
    ]


def costly_rules(log: Path, shown: int = 5) -> list[str]:
    """The recording and alerting rules Prometheus spent longest on (mean execTotalTime in its query log)."""
    times: dict[str, list[float]] = {}
    for entry in read_log(log, 0):
        if "ruleGroup" in entry:
            times.setdefault(entry["params"]["query"], []).append(float(entry["stats"]["timings"]["execTotalTime"]))
    ranked = sorted(times.items(), key=lambda item: -statistics.fmean(item[1]))[:shown]
    return [f"  {statistics.fmean(t) * 1e3:7.0f} ms  {query[:100]}" for query, t in ranked]


def log_offset(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def measure(running: Running, args: argparse.Namespace) -> list[Row]:
    """The HPA's query through the adapter (the goal), Prometheus' part of it, then the other default metrics'."""
    queries = adapter_queries(NAMESPACE)
    value_query, time_query = queries["gpu_utilization"]
    log = running.workdir / "query.log"
    fewer = max(30, args.queries // 5)
    asyncio.run(time_adapter(running, "warm-up", "gpu_utilization", 30))
    offset = log_offset(log)
    hpa = asyncio.run(time_adapter(running, "adapter: HPA gpu_utilization, bench", "gpu_utilization", args.queries))
    hpa.goal, hpa.stretch = GOAL_P99, STRETCH_P99
    rows = [hpa, *engine_rows(log, offset, [("value query", value_query), ("sample-time query", time_query)])]
    for what, group, count in (
        ("both at once, as the adapter sends them", [value_query, time_query], args.queries),
        ("value query alone", [value_query], fewer),
        ("sample-time query alone", [time_query], fewer),
    ):
        rows.append(asyncio.run(time_promql(running, f"promql: {what}", group, count)))
    small, pods = namespace_sizes(args.pods, args.namespaces, args.namespace_pods)[-1]
    small_queries = adapter_queries(small)["gpu_utilization"]
    rows.append(
        asyncio.run(time_promql(running, f"promql: both, namespace {small} ({pods} pods)", small_queries, fewer))
    )
    for name, pair in queries.items():
        if name != "gpu_utilization":
            rows.append(asyncio.run(time_promql(running, f"promql: {name}, both at once", pair, fewer)))
    memory = "adapter: HPA gpu_memory_utilization, bench"
    rows.append(asyncio.run(time_adapter(running, memory, "gpu_memory_utilization", fewer)))
    return rows


# ---- the report -----------------------------------------------------------------------------------------------------


def table(rows: Sequence[Row]) -> str:
    header = f"{'what':<52} {'n':>4} {'p50 ms':>8} {'p99 ms':>8} {'goal':>5} {'stretch':>7} {'met':>4}  note"
    lines = [header, "-" * 120]
    for row in rows:
        p99 = percentile(row.latencies, 0.99)
        met = "" if row.goal is None else ("yes" if p99 < row.goal and not row.failures else "NO")
        if row.stretch is not None and p99 < row.stretch and not row.failures:
            met += "+"
        goal = "" if row.goal is None else f"{row.goal * 1e3:.0f}"
        stretch = "" if row.stretch is None else f"{row.stretch * 1e3:.0f}"
        p50 = percentile(row.latencies, 0.5)
        lines.append(
            f"{row.what:<52} {len(row.latencies):>4} {p50 * 1e3:>8.1f} {p99 * 1e3:>8.1f} {goal:>5} {stretch:>7}"
            f" {met:>4}  {row.note}"
        )
    return "\n".join(lines)


def describe_history(report: Backfill) -> str:
    return (
        f"history: {report.series:,} series every {report.step} s over {(report.end - report.start) / 3600:.0f} h:"
        f" {report.lines:,} samples, {report.bytes / 2**30:.2f} GiB of OpenMetrics in {report.files} files,"
        f" {report.blocks} blocks; written in {report.write_seconds:.0f} s, blocks done after {report.seconds:.0f} s"
    )


def profile_summary(path: Path, lines: int = 30) -> str:
    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out)
    stats.sort_stats("cumulative").print_stats(lines)
    return out.getvalue()


def load_average() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


# ---- the run --------------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace, workdir: Path) -> int:
    placements = fleet(args.pods, args.namespaces, args.namespace_pods)
    nodes = len({p.node for p in placements})
    print(
        f"fleet: {len(placements):,} GPU pods in {args.namespaces} namespaces on {nodes:,} nodes; load {load_average()}"
    )
    print(f"prometheus: {prometheus_version(args.prometheus or _tool('prometheus'))}")
    texts, seconds = capture(args.snapshots, "--field-set", args.field_set, "--dialect", "dcgm")
    save(texts, seconds, workdir / TEMPLATE)
    template = NodeTemplate.parse(texts, seconds)
    print(
        f"a node's exporter (--field-set {args.field_set}, dcgm, 8 x H100, 8 pods): {template.series} series in"
        f" {len(template.families)} families, {len(texts[0].encode()):,} bytes; the fleet: {template.series * nodes:,}"
    )
    running = Running(ChildProcesses(workdir), workdir)
    try:
        start_role(running, "exporters", args)
        start_role(running, "cluster", args)
        history = history_series(placements, template)
        report = backfill(history, args.hours, args.step, int(time.time()), workdir / "tsdb", workdir)
        print(describe_history(report), flush=True)
        targets = role_url(running, "exporters")
        start_prometheus(running, workdir / "tsdb", targets, args)
        start_adapter(running, role_url(running, "cluster"), args.profile)
        warmed = wait_warm(running, len(placements))
        _wait(
            lambda: _get_ok(running.adapter + "/readyz", running.client_ssl), "adapter ready", 300, running, "adapter"
        )
        print(f"warm after {warmed:.0f} s: every target scraped for {WARM_SECONDS} s", flush=True)
        for line in describe_tsdb(running, report):
            print(line)
        baseline = steady_cpu(running, args.baseline_window)
        print(f"steady work for {args.baseline_window:.0f} s without the rules: prometheus used {baseline:.2f} cores")
        if args.rules:
            load_rules(running, targets, args)
            wait_rules(running, len(placements))
        costs, window, with_rules = watch_rules(running, args.rule_window)
        memory_after_rules = prometheus_memory(running)
        print(memory_after_rules, flush=True)
        rules_cpu = with_rules - baseline if args.rules else None
        cpu_before, started = prometheus_cpu(running), time.monotonic()
        storm = RuleGroupSampler.of(running.prometheus)
        storm.start()
        rows = measure(running, args)
        storm_costs, storm_window = storm.stop(), time.monotonic() - started
        busy = (prometheus_cpu(running) - cpu_before) / storm_window
        print(f"while measuring: prometheus used {busy:.2f} cores; load {load_average()}", flush=True)
        panels = time_panels(running, args.panel_repeats) if args.panels else []
        recorded = rule_series(running)
        memory_at_end = prometheus_memory(running)
    finally:
        running.processes.stop_all()
    panels_met = report_panels(panels) if args.panels else True
    rules_met = True
    if args.rules:
        print(cost_table(costs, window, "steady work (scrapes and rules, no client): the budget", rules_cpu))
        print(cost_table(storm_costs, storm_window, "the requests above, back to back (not judged)"))
        print(recorded)
        print("costliest rules (mean time, query log):", *costly_rules(workdir / "query.log"), sep="\n")
        print(
            f"the CPU the rules add: {rules_cpu:.3f} cores ({with_rules:.3f} with them, {baseline:.3f} without, same"
            f" run); the groups' wall-time shares summed: {sum(cost.share for cost in costs):.3f}"
        )
        rules_met = within_budget(costs, rules_cpu)
        print(
            f"rule budget: each group < {GROUP_SHARE:.0%} of its interval, no missed iteration, all < {TOTAL_CORES}"
            f" core: {'met' if rules_met else 'NOT met'}"
        )
    print(f"after the rule window: {memory_after_rules}\nat the end (queries and panels too): {memory_at_end}")
    value_query, time_query = adapter_queries(NAMESPACE)["gpu_utilization"]
    print(f"the adapter's queries for gpu_utilization in {NAMESPACE}:\n  {value_query}\n  {time_query}")
    print(table(rows))
    if running.profile is not None and running.profile.exists():
        print(profile_summary(running.profile))
    hpa = rows[0]
    p99, met = percentile(hpa.latencies, 0.99), percentile(hpa.latencies, 0.99) < GOAL_P99 and not hpa.failures
    print(f"goal: adapter p99 < {GOAL_P99 * 1e3:.0f} ms: {'met' if met else 'NOT met'} ({p99 * 1e3:.1f} ms)")
    return 0 if met and rules_met and panels_met else 1


def watch_rules(running: Running, seconds: float) -> tuple[list[GroupCost], float, float]:
    """Every rule group's evaluations over `seconds` of the work a fleet's Prometheus does all day, scraping the
    exporters and evaluating the rules, with no client of this script asking anything: what the budget is judged on.
    The back-to-back requests measured after it are a load test of the adapter's queries (1,000-series answers as
    fast as Prometheus gives them), not the fleet's steady state; the groups' times under them are printed apart.
    Returns the groups' costs, the window's seconds and Prometheus' CPU over it (cores)."""
    cpu_before, started = prometheus_cpu(running), time.monotonic()
    sampler = RuleGroupSampler.of(running.prometheus)
    sampler.start()
    time.sleep(seconds)
    costs, window = sampler.stop(), time.monotonic() - started
    busy = (prometheus_cpu(running) - cpu_before) / window
    print(f"steady work for {window:.0f} s: prometheus used {busy:.2f} cores; load {load_average()}", flush=True)
    return costs, window, busy


def time_panels(running: Running, repeats: int) -> list[Timing]:
    """Every panel and variable query of the boards for the dcgm dialect (the dialect-neutral ones too), as
    Grafana sends them on opening each board (panel_queries.py), `repeats` times each."""
    log = running.workdir / "query.log"
    offset, started = log_offset(log), time.monotonic()
    prometheus = Prometheus(running.prometheus)
    timings = [
        timing
        for stem in boards()
        if Dialect.DCGM in board_dialects(stem)
        for timing in time_board(prometheus, stem, repeats)
    ]
    engine_times(read_log(log, offset), timings)
    first = scalar(running, "min(min_over_time(timestamp(node:nvidia_gpu_up:count)[1h:15s]))")
    print(
        f"dashboards: {len(timings)} queries x {repeats} in {time.monotonic() - started:.0f} s; load {load_average()};"
        f" the recorded series span the last {(time.time() - first) / 60:.0f} min of the boards' hour",
        flush=True,
    )
    return timings


def report_panels(timings: Sequence[Timing]) -> bool:
    print("the slowest ten dashboard queries (wall: the request; own: execTotalTime in the query log):")
    print(slowest_table(timings))
    slow = over_limit(timings)
    for timing in slow:
        print(f"  over {LIMIT_P99:.0f} s or failed: {timing.query.board} / {timing.query.title}: {timing.failure}")
    print(f"goal: every dashboard query p99 < {LIMIT_P99:.0f} s: {'met' if not slow else 'NOT met'}")
    return not slow


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=20_000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--namespace-pods", type=int, default=1_000)
    parser.add_argument(
        "--cpu-pods",
        type=int,
        default=20_000,
        help="pods without GPUs that kube-state-metrics reports beside the GPU pods (the workload rules read them)",
    )
    parser.add_argument("--hours", type=float, default=24.0, help="history to backfill, ending now")
    parser.add_argument("--step", type=int, default=1800, help="seconds between samples of the history")
    parser.add_argument("--queries", type=int, default=300, help="requests for the goal's rows (a fifth for others)")
    parser.add_argument("--shards", type=int, default=20, help="scrape targets the fleet's series are spread over")
    parser.add_argument("--rules", action=argparse.BooleanOptionalAction, default=True, help="load the shipped rules")
    parser.add_argument("--evaluation-interval", type=int, default=30, help="seconds between rule evaluations")
    parser.add_argument(
        "--kube-state-metrics",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="scrape kube-state-metrics' owner series of the fleet's pods too (--no-kube-state-metrics: every pod is "
        "a workload of its own to the rules, as before 2026-11-28)",
    )
    parser.add_argument(
        "--rule-window",
        type=float,
        default=600.0,
        help="seconds of steady work (scrapes and rules, no client) over which the rule groups are judged, before the "
        "requests are measured (issue 22's run: 600)",
    )
    parser.add_argument(
        "--panels",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time every dashboard query after the adapter's (--no-panels: skip)",
    )
    parser.add_argument("--panel-repeats", type=int, default=5, help="times each dashboard query is sent")
    parser.add_argument(
        "--baseline-window",
        type=float,
        default=180.0,
        help="seconds of steady work without the rules first, whose CPU is taken from the rule window's",
    )
    parser.add_argument(
        "--fleet-nice",
        type=int,
        default=10,
        help="the simulated fleet's niceness: its exporters and API stand-in are other machines (0: it competes with "
        "Prometheus and the adapter)",
    )
    parser.add_argument("--profile", action="store_true", help="run the adapter under cProfile and print the top")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (blocks, logs, query log)")
    parser.add_argument(
        "--field-set",
        choices=("default", "all"),
        default="default",
        help="the exporter's field set each node serves (its --field-set)",
    )
    parser.add_argument("--snapshots", type=int, default=8, help="exporter answers a node's gauges cycle through")
    parser.add_argument(
        "--prometheus",
        help="the Prometheus binary to measure (default: `prometheus` on PATH, Debian's package); the history's blocks "
        "are still written by the promtool on PATH, which later releases read. `bench/prometheus3.sh` builds 3.16.0 "
        'from its Go module and prints its path: --prometheus "$(bench/prometheus3.sh)", how the rules\' budget is '
        "judged (docs/performance.md)",
    )
    parser.add_argument("--role", choices=("cluster", "exporters"), help=argparse.SUPPRESS)
    parser.add_argument("--template", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--ready", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pods % GPUS_PER_NODE or args.pods <= 0:
        parser.error(
            f"--pods must be a positive multiple of {GPUS_PER_NODE}: every node holds {GPUS_PER_NODE} GPU pods"
        )
    if args.snapshots < 2:
        parser.error("--snapshots must be at least 2: the counters' rates are read between the first and the last")
    args.namespace_pods = min(args.namespace_pods, args.pods)
    if args.role is not None:
        placements = fleet(args.pods, args.namespaces, args.namespace_pods)
        if args.role == "cluster":
            asyncio.run(serve_cluster(placements, args.ready))
        else:
            asyncio.run(serve_targets(placements, load_template(args.template), args.shards, args.cpu_pods, args.ready))
        return
    signal.signal(signal.SIGTERM, _terminated)  # so that the processes started are stopped (finally) on SIGTERM too
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        sys.exit(run(args, args.keep))
    with tempfile.TemporaryDirectory(prefix="gpu-pulse-fleet-") as tmp:
        sys.exit(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
