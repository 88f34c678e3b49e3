"""gpu-pulse-report at fleet scale: the report over 7 days of a 2,000-node fleet's history in a real Prometheus,
in bounded time and memory.

    PYTHONPATH=. python bench/report_fleet.py [--nodes 2000] [--days 7] [--sample-seconds 300] [--namespaces 100]
        [--keep DIR]

The fleet: `--nodes` nodes of 8 H100s (the fleet benchmark's shape, bench/fleet_cluster.py), each GPU held by one
pod, except that GPU 6 of each node is time-sliced by two pods and GPU 7 split into two MIG 3g.40gb instances held by
one pod each: 10 pods per node (20,000 at 2,000 nodes), in Deployments of 10 pods over `--namespaces` namespaces. Per
GPU slot a steady figure (idle, fits 1g.10gb, fits 3g.40gb, busy, ...), so the report has every kind of workload.

The history: per pod the three per-pod families the report reads (`gpu_pulse_pod_gpu_sharing_pods`, utilization,
memory) and kube-state-metrics' `kube_pod_owner` (and `kube_replicaset_owner`), per GPU `nvidia_gpu_up`, every
`--sample-seconds` over `--days` days ending on the hour, one OpenMetrics file per 2-hour block window turned into
blocks by promtool (two at once; bench/fleet_prometheus.py's helpers). A sample every 5 minutes is one per step of
the report's 7-day window: the report's answers hold every point they would at a 15-second scrape interval, while
Prometheus reads 1 sample per step instead of 20 (its own share of the time is the smaller for it).

Measured, in this run and one after the other:
- baseline: the report's own queries (the same history reader, every query of every namespace and slice), with the
  answers read and decoded but not folded into figures, nor any page written: what reading the history costs;
- the report: `python -m report` as a user runs it, its wall time and peak RSS (wait4), its queries and bytes read.
Goals (exit code 1 when missed): the report within 2x the baseline's time, peak RSS under 1 GiB, every answer under
the report's --max-points bound (the most points one answer held is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet_prometheus import _tool, block_windows, collect_blocks, run_promtool

from report.history import HistoryReader
from report.owners import PrometheusOwners
from report.prometheus import Connection, PrometheusClient, RangeSeries
from report.window import Window
from tests.support.processes import ChildProcesses, clean_environment, python_module
from tests.support.prometheus import LISTENING_LINE

REPO = Path(__file__).resolve().parents[1]
GPUS = 8
GIB = 2**30
MODEL = "NVIDIA H100 80GB HBM3"
TIME_GOAL = 2.0
RSS_GOAL = 1024 * 1024 * 1024
# (utilization, memory GiB) per GPU slot 0-5; slot 6 is time-sliced by two pods, slot 7 two MIG 3g.40gb instances
SLOTS = ((0.01, 2), (0.08, 6), (0.30, 25), (0.85, 60), (0.90, 70), (0.60, 40))
SHARED = ((0.20, 10), (0.02, 3))
MIG = ((0.5, 12), (0.9, 30))


@dataclass(frozen=True)
class Pod:
    namespace: str
    deployment: str
    name: str
    node: str
    gpu: int
    uuid: str
    utilization: float
    memory: float
    sharing: int = 1
    gpu_instance: str = ""
    profile: str = ""


def fleet(nodes: int, namespaces: int) -> list[Pod]:
    pods: list[Pod] = []
    for n in range(nodes):
        node = f"gpu-{n:04d}"
        slots: list[tuple[int, str, float, float, int, str, str]] = []
        slots += [(gpu, "", busy, held, 1, "", "") for gpu, (busy, held) in enumerate(SLOTS)]
        slots += [(6, "", util, mem, 2, "", "") for util, mem in SHARED]
        slots += [(7, "", util, mem, 1, str(gi + 1), "3g.40gb") for gi, (util, mem) in enumerate(MIG)]
        for gpu, _, util, mem, sharing, gi, profile in slots:
            index = len(pods)
            deployment = f"w{index // 10 % 1000:03d}-slot{gpu}"
            namespace = f"team-{index // 10 % namespaces:02d}"
            uuid = f"GPU-{n:08x}-{gpu:04x}-0000-0000-000000000000"
            name = f"{deployment}-5d8f7c-{index:06d}"
            pods.append(Pod(namespace, deployment, name, node, gpu, uuid, util, mem * GIB, sharing, gi, profile))
    return pods


def lines_of(pod: Pod) -> list[str]:
    """`name{labels} value` of each series of the pod (the timestamp follows)."""
    share = "mig" if pod.profile else ("process" if pod.sharing > 1 else "exclusive")
    labels = (
        f'job="gpu-pulse-exporter",instance="exporter-{pod.node}",node="{pod.node}",namespace="{pod.namespace}",'
        f'pod="{pod.name}",container="main",gpu="{pod.gpu}",uuid="{pod.uuid}"'
    )
    if pod.profile:
        labels += f',gpu_instance="{pod.gpu_instance}",mig_profile="{pod.profile}"'
    labels += f',share="{share}"'
    ksm = f'job="kube-state-metrics",namespace="{pod.namespace}"'
    rs = f"{pod.deployment}-5d8f7c"
    return [
        f"gpu_pulse_pod_gpu_sharing_pods{{{labels}}} {pod.sharing}",
        f"gpu_pulse_pod_gpu_utilization_ratio{{{labels}}} {pod.utilization}",
        f"gpu_pulse_pod_gpu_memory_used_bytes{{{labels}}} {pod.memory:.0f}",
        f'kube_pod_owner{{{ksm},pod="{pod.name}",owner_kind="ReplicaSet",owner_name="{rs}",'
        'owner_is_controller="true"} 1',
        f'kube_replicaset_owner{{{ksm},replicaset="{rs}",owner_kind="Deployment",owner_name="{pod.deployment}"}} 1',
    ]


def device_lines(pods: list[Pod]) -> list[str]:
    seen = {(p.node, p.gpu, p.uuid) for p in pods}
    return [
        f'nvidia_gpu_up{{job="gpu-pulse-exporter",node="{node}",gpu="{gpu}",uuid="{uuid}",model="{MODEL}"}} 1'
        for node, gpu, uuid in sorted(seen)
    ]


@dataclass
class History:
    start: int
    end: int
    lines: int = 0
    blocks: int = 0
    seconds: float = 0.0


def backfill(pods: list[Pod], days: float, sample: int, end: int, data_dir: Path, workdir: Path) -> History:
    promtool = _tool("promtool")
    start = end - int(days * 86400)
    history = History(start, end)
    started = time.perf_counter()
    series = list(dict.fromkeys([line for pod in pods for line in lines_of(pod)] + device_lines(pods)))
    data_dir.mkdir(parents=True, exist_ok=True)
    jobs: list[Future[None]] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for number, (low, high) in enumerate(block_windows(start, end)):
            times = [t for t in range(max(low, start) + (-max(low, start)) % sample, high, sample) if t >= start]
            if not times:
                continue
            source = workdir / f"history-{number:03d}.om"
            with source.open("w", encoding="utf-8", buffering=1 << 22) as out:
                for t in times:
                    tail = f" {t}\n"
                    out.write("".join(line + tail for line in series))
                out.write("# EOF\n")
            history.lines += len(times) * len(series)
            while sum(1 for j in jobs if not j.done()) >= 2:  # at most two files waiting on disk
                time.sleep(0.2)
            jobs.append(
                pool.submit(run_promtool, promtool, source, workdir / f"blocks-{number:03d}", workdir / "promtool.log")
            )
        for job in jobs:
            job.result()
    history.blocks = collect_blocks(workdir, data_dir)
    history.seconds = time.perf_counter() - started
    return history


class QueriesOnly(HistoryReader):
    """The baseline: the report's history reader, every query sent and its answer decoded, nothing folded."""

    most_points = 0

    def _fold(self, namespace: str, owners: object, first: int, last: int, *answers: list[RangeSeries]) -> None:  # type: ignore[override]
        for answer in answers:
            QueriesOnly.most_points = max(QueriesOnly.most_points, sum(s.values.size for s in answer))


async def baseline(url: str, window: Window, max_points: int) -> tuple[float, int, int]:
    started = time.perf_counter()
    async with PrometheusClient(Connection(url, timeout=600)) as client:
        owners = [("kube-state-metrics' history", PrometheusOwners(client, window.start, window.end))]
        reader = QueriesOnly(
            client, window, idle_utilization=0.05, price_of=lambda _: 0.0, owners=owners, max_points=max_points
        )
        await reader.read()
        return time.perf_counter() - started, client.requests, client.bytes_read


def run_report(url: str, end: int, days: float, output: Path, max_points: int) -> tuple[float, int, dict[str, object]]:
    argv = python_module(
        "report", f"--prometheus-url={url}", f"--window={round(days * 24)}h", f"--end={end}", f"--output={output}",
        f"--max-points={max_points}", "--prometheus-timeout=600", "--no-progress",
    )  # fmt: skip
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd=REPO, env=clean_environment(), stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    stderr = process.stderr.read().decode() if process.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the report failed: {stderr}")
    document = json.loads((output / "report.json").read_text(encoding="utf-8"))
    return wall, usage.ru_maxrss * 1024, document


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--sample-seconds", type=int, default=300)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--max-points", type=int, default=500_000)
    parser.add_argument("--keep", type=Path, help="work in DIR and leave it (blocks, logs, the report)")
    args = parser.parse_args(argv)
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="report-fleet-"))
    workdir.mkdir(parents=True, exist_ok=True)
    processes = ChildProcesses(workdir)
    try:
        pods = fleet(args.nodes, args.namespaces)
        end = int(time.time()) // 3600 * 3600 - 3600
        data_dir = workdir / "tsdb"
        history = backfill(pods, args.days, args.sample_seconds, end, data_dir, workdir)
        print(
            f"history: {len(pods):,} pods on {args.nodes:,} nodes, {args.days:g} days every {args.sample_seconds} s: "
            f"{history.lines:,} samples, {history.blocks} blocks, written and converted in {history.seconds:.0f} s",
            flush=True,
        )
        config = workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1m"}}), encoding="utf-8")
        processes.start(
            "prometheus",
            [
                _tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={data_dir}",
                "--web.listen-address=127.0.0.1:0", "--storage.tsdb.max-block-duration=2h",
                "--storage.tsdb.retention.time=60d", "--log.level=info",  # says which port it bound
            ],
        )  # fmt: skip
        url = "http://" + processes.wait_for_line("prometheus", LISTENING_LINE, 600).group(1)
        deadline = time.monotonic() + 600
        while not _ready(url):
            processes.check_running("prometheus")
            if time.monotonic() > deadline:
                raise SystemExit("prometheus not ready within 600 s")
            time.sleep(1)
        window = Window.ending(end, round(args.days * 86400))
        base_wall, base_queries, base_bytes = asyncio.run(baseline(url, window, args.max_points))
        print(
            f"baseline (the report's queries, answers decoded, nothing folded): {base_wall:.1f} s, {base_queries:,} "
            f"queries, {base_bytes / 2**20:,.1f} MiB; the largest answer held {QueriesOnly.most_points:,} points",
            flush=True,
        )
        wall, rss, document = run_report(url, end, args.days, workdir / "report", args.max_points)
        workloads = document["workloads"]
        assert isinstance(workloads, list)
        size = sum(p.stat().st_size for p in (workdir / "report").iterdir())
        print(
            f"report: {wall:.1f} s ({wall / base_wall:.2f}x the baseline), peak RSS {rss / 2**20:,.0f} MiB, "
            f"{document['queries']:,} queries, {int(str(document['bytes_read'])) / 2**20:,.1f} MiB read, "
            f"{len(workloads):,} workloads, index.html + report.json {size / 2**20:,.1f} MiB",
            flush=True,
        )
        self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(f"(this script's own peak RSS, baseline included: {self_rss / 2**20:,.0f} MiB)")
        missed = []
        if wall > TIME_GOAL * base_wall:
            missed.append(f"time {wall / base_wall:.2f}x > {TIME_GOAL}x")
        if rss > RSS_GOAL:
            missed.append(f"RSS {rss / 2**20:.0f} MiB > {RSS_GOAL / 2**20:.0f} MiB")
        if QueriesOnly.most_points > args.max_points:
            missed.append(f"an answer of {QueriesOnly.most_points:,} points > {args.max_points:,}")
        print("goals: " + ("met" if not missed else "MISSED: " + "; ".join(missed)))
        return 1 if missed else 0
    finally:
        processes.stop_all()
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
