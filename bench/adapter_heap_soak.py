"""Resident memory of a replica-like adapter over hours, with and without the heap settler's one-minute refreeze.

    PYTHONPATH=. python bench/adapter_heap_soak.py [--hours 1] [--nodes 120] [--gpu-pods 800] [--other-pods 2000]

Starts the simulated fleet (bench/fleet_cluster.py: the Kubernetes API stand-in, one streaming exporter per GPU node
that ends each stream after a few minutes as the exporter does, pods replaced at `--churn` a second) and two real
adapter processes on it, each as a replica runs: TLS, client-certificate auth, exporters found by their pods, the
CLI's heap settler (adapter/heap.py). One is the adapter as shipped, collecting and freezing every
adapter.heap.REFREEZE_SECONDS; the other freezes only at start (its REFREEZE_SECONDS set to infinity before the CLI
runs). Both are asked the same HPA-like questions (each Deployment's pods, every `--hpa-period` seconds) over
`--connections` TLS connections each, opened in the first HPA period and kept, and their RSS and open file descriptors
are read from /proc every `--sample-seconds`. A fixed count of connections keeps the client out of the figure: asyncio
gives each TLS connection a 256 KiB read buffer (SSLProtocol.max_size), so a pool that grew under load would show as
the adapter growing. (kube-aggregator's client-go transport keeps up to 25 idle connections a host and closes one idle
for 90 s: client-go transport/cache.go, apimachinery pkg/util/net/http.go; at an HPA's pace it holds a few, as here.)
Prints each one's RSS at the start and end, its peak, its slope (a least-squares line over the samples after
`--settle-minutes`) in MiB per hour and its open descriptors' range after them; the two share the machine and its
noise, so the difference of the slopes is what the refreeze does to memory. A run of an hour or more also checks the
goal: the shipped adapter's slope under `--flat` MiB per hour (docs/decisions/2026-11-28-adapter-hot-path.md).

`--trace` adds a third adapter, as shipped but under `tracemalloc` (`--trace-frames` frames a block): it writes a
snapshot of its traced blocks once the settle time has passed and every `--trace-every` minutes after, and the run
ends with the traced bytes' slope beside the RSS slope (growth of Python's own blocks, or of memory it does not trace:
C buffers, fragmentation) and the source lines whose blocks grew most between the first and the last snapshot. On two
cores a traced replica falls behind and grows by its requests in flight; `--census` adds instead a replica as shipped
with bench/heap_census.py's thread, which costs nothing between its counts (every `--census-every` minutes once
settled), and the run ends with what grew most between the first count and the last: pymalloc's blocks, malloc's
bytes, tracked objects by type, large containers by where they are held. `--census-trace` has that replica trace its
allocations too, from its first count on and one frame a block, and adds the source lines whose live bytes grew most.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import random
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from adapter_cluster import AdapterCredentials, served_url, wait_adapter_ready
from fleet import memory, start_fleet, stop
from heap_census import growth

REPO = Path(__file__).resolve().parents[1]
WITHOUT_REFREEZE = (
    "import math, sys, adapter.heap\n"
    "adapter.heap.REFREEZE_SECONDS = math.inf  # the settler freezes at start only\n"
    "from adapter.cli import main\n"
    "sys.exit(main())\n"
)
# the shipped adapter under tracemalloc; a thread writes snapshots (the bench's own, not the adapter's, code)
TRACED = """\
import pickle, sys, threading, time, tracemalloc
FRAMES, FIRST, EVERY, DIRECTORY = {frames}, {first}, {every}, {directory!r}
tracemalloc.start(FRAMES)
started = time.monotonic()

def snapshots():
    totals = []
    time.sleep(FIRST)
    while True:
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        elapsed = time.monotonic() - started
        totals.append((elapsed, tracemalloc.get_traced_memory()[0] / 2**20))
        snapshot.dump(DIRECTORY + ("/trace-first.snap" if len(totals) == 1 else "/trace-last.snap"))
        with open(DIRECTORY + "/trace-totals.pickle", "wb") as out:
            pickle.dump(totals, out)
        time.sleep(EVERY)

threading.Thread(target=snapshots, daemon=True).start()
from adapter.cli import main
sys.exit(main())
"""
# the shipped adapter with a census of its heap every few minutes (bench/heap_census.py)
CENSUS = """\
import pathlib, sys
sys.path.insert(0, {bench!r})
import heap_census
heap_census.start({first}, {every}, pathlib.Path({out!r}), trace={trace})
from adapter.cli import main
sys.exit(main())
"""


@dataclass
class Adapter:
    name: str
    process: subprocess.Popen[bytes]
    url: str
    samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds since start, RSS MiB)
    descriptors: list[int] = field(default_factory=list)  # open file descriptors, sampled with the RSS
    answered: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # by HTTP status or exception
    first_failure: dict[str, str] = field(default_factory=dict)  # what the first answer of each status said


def start_adapter(name: str, program: list[str], credentials: AdapterCredentials, exporter_port: int) -> Adapter:
    flags = [*credentials.flags(), f"--exporter-port={exporter_port}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_PULSE_")}
    env["PYTHONPATH"] = str(REPO)
    path = credentials.workdir / f"{name}.log"
    before = path.stat().st_size if path.exists() else 0
    with path.open("ab") as log:
        process = subprocess.Popen([sys.executable, *program, *flags], cwd=REPO, env=env, stderr=log)
    return Adapter(name, process, served_url(process, path, before))


async def hpa(
    path: str,
    adapters: list[Adapter],
    sessions: list[aiohttp.ClientSession],
    context: ssl.SSLContext,
    period: float,
    rng: random.Random,
) -> None:
    """One HPA: its question to every adapter every `period` seconds, the first at a random moment within one, each over
    the session it was given for that adapter (one connection, shared with other HPAs: questions wait their turn)."""
    await asyncio.sleep(rng.uniform(0, period))
    next_at = time.monotonic()
    while True:
        for adapter, session in zip(adapters, sessions, strict=True):
            try:
                async with session.get(adapter.url + path, ssl=context) as response:
                    body = await response.read()
                    if response.status == 200:
                        adapter.answered += 1
                    else:
                        adapter.failures[str(response.status)] = adapter.failures.get(str(response.status), 0) + 1
                        adapter.first_failure.setdefault(str(response.status), body[:300].decode(errors="replace"))
            except (aiohttp.ClientError, TimeoutError) as error:
                adapter.failures[type(error).__name__] = adapter.failures.get(type(error).__name__, 0) + 1
        next_at += period
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def sample(adapters: list[Adapter], seconds: float, every: float) -> None:
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        for adapter in adapters:
            if adapter.process.poll() is not None:
                raise SystemExit(f"the {adapter.name} adapter exited")
            adapter.samples.append((elapsed, memory(adapter.process.pid)["VmRSS"]))
            adapter.descriptors.append(len(os.listdir(f"/proc/{adapter.process.pid}/fd")))
        await asyncio.sleep(every)


async def soak(
    args: argparse.Namespace, info: dict[str, Any], adapters: list[Adapter], context: ssl.SSLContext
) -> None:
    for adapter in adapters:
        await wait_adapter_ready(adapter.process, adapter.url, context)
    rng = random.Random(7)
    # `--connections` lanes an adapter, each a session of one connection kept open (used far more often than the
    # adapter's 60-s idle timeout, toolkit/connections.py); the HPAs take turns on them
    kept = args.hours * 3600 + 3600
    lanes = [
        [
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1, keepalive_timeout=kept))
            for _ in range(args.connections)
        ]
        for _ in adapters
    ]
    hpas = [
        asyncio.create_task(
            hpa(
                f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{d['namespace']}/pods/*/gpu_utilization"
                f"?labelSelector=app%3D{d['name']}",
                adapters,
                [sessions[i % args.connections] for sessions in lanes],
                context,
                args.hpa_period,
                rng,
            )
        )
        for i, d in enumerate(info["deployments"])
    ]
    try:
        await sample(adapters, args.hours * 3600, args.sample_seconds)
    finally:
        for task in hpas:
            task.cancel()
        await asyncio.gather(*hpas, return_exceptions=True)
        for sessions in lanes:
            for session in sessions:
                await session.close()


def traced_growth(directory: Path, settle: float, shown: int = 12) -> list[str]:
    """The traced adapter's report: traced bytes over time and the source lines whose blocks grew most."""
    totals_path, first_path, last_path = (
        directory / n for n in ("trace-totals.pickle", "trace-first.snap", "trace-last.snap")
    )
    if not totals_path.exists() or not last_path.exists():
        return ["traced       fewer than two snapshots: run longer than the settle time plus --trace-every"]
    totals: list[tuple[float, float]] = pickle.loads(totals_path.read_bytes())
    first, last = tracemalloc.Snapshot.load(str(first_path)), tracemalloc.Snapshot.load(str(last_path))
    hours = (totals[-1][0] - totals[0][0]) / 3600
    lines = [
        f"traced       Python's blocks {totals[0][1]:.1f} -> {totals[-1][1]:.1f} MiB over {hours * 60:.0f} min"
        f"   slope {slope_mib_per_hour(totals, settle):+.2f} MiB/h"
        f"   ({len(totals)} snapshots; the source lines whose blocks grew most:)"
    ]
    for stat in last.compare_to(first, "traceback")[:shown]:
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(stat.traceback[-4:]))
        lines.append(f"  {stat.size_diff / 2**20:+7.2f} MiB {stat.count_diff:+8d} blocks  {where}")
    return lines


def slope_mib_per_hour(samples: list[tuple[float, float]], after: float) -> float:
    """The least-squares slope of RSS over time, for the samples taken `after` seconds or later."""
    kept = [(t / 3600, rss) for t, rss in samples if t >= after]
    if len(kept) < 3:
        return float("nan")
    return statistics.linear_regression([t for t, _ in kept], [rss for _, rss in kept]).slope


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=1.0, help="how long to sample memory (hours)")
    parser.add_argument("--nodes", type=int, default=120)
    parser.add_argument("--gpu-pods", type=int, default=800)
    parser.add_argument("--other-pods", type=int, default=2000)
    parser.add_argument("--churn", type=float, default=1.0, help="pods replaced a second")
    parser.add_argument("--port", type=int, default=9400, help="the exporters' port on each node's address")
    parser.add_argument("--fleet-nice", type=int, default=10, help="the simulated fleet's niceness (bench/fleet.py)")
    parser.add_argument("--hpa-period", type=float, default=15.0, help="seconds between an HPA's questions")
    parser.add_argument(
        "--connections", type=positive_int, default=4, help="TLS connections the HPAs share to each adapter"
    )
    parser.add_argument("--sample-seconds", type=float, default=10.0, help="seconds between RSS samples")
    parser.add_argument(
        "--settle-minutes", type=float, default=10.0, help="minutes left out of the slope (at most half the run)"
    )
    parser.add_argument("--flat", type=float, default=1.0, help="the goal: slope under this many MiB per hour")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (the adapters' logs)")
    parser.add_argument("--trace", action="store_true", help="a third adapter under tracemalloc (see above)")
    parser.add_argument("--trace-frames", type=int, default=6, help="frames kept a traced block")
    parser.add_argument("--trace-every", type=float, default=10.0, help="minutes between snapshots after the first")
    parser.add_argument("--census", action="store_true", help="a third adapter counting its heap (see above)")
    parser.add_argument("--census-every", type=float, default=10.0, help="minutes between counts after the first")
    parser.add_argument(
        "--census-trace",
        action="store_true",
        help="the census replica also traces allocations (tracemalloc, one frame) from its first count on",
    )
    args = parser.parse_args()
    settle = min(args.settle_minutes * 60, args.hours * 3600 / 2)
    with tempfile.TemporaryDirectory(prefix="gpu-pulse-soak-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        fleet, info = start_fleet(args, workdir)
        adapters: list[Adapter] = []
        try:
            credentials = AdapterCredentials.write(workdir, str(info["kube"]))
            adapters = [
                start_adapter("refreeze", ["-m", "adapter.cli"], credentials, args.port),
                start_adapter("no-refreeze", ["-c", WITHOUT_REFREEZE], credentials, args.port),
            ]
            if args.trace:
                program = TRACED.format(
                    frames=args.trace_frames, first=settle, every=args.trace_every * 60, directory=str(workdir)
                )
                adapters.append(start_adapter("traced", ["-c", program], credentials, args.port))
            if args.census:
                program = CENSUS.format(
                    bench=str(REPO / "bench"),
                    first=settle,
                    every=args.census_every * 60,
                    out=str(workdir / "census"),
                    trace=args.census_trace,
                )
                adapters.append(start_adapter("census", ["-c", program], credentials, args.port))
            asyncio.run(soak(args, info, adapters, credentials.client_ssl()))
        finally:
            stop([adapter.process for adapter in adapters] + [fleet])
        traced = traced_growth(workdir, settle) if args.trace else []
        counted = growth(workdir / "census") if args.census else []
    print(
        f"soak: {args.hours:g} h, {info['nodes']} GPU nodes, {info['gpu_pods']} GPU pods,"
        f" {info['other_pods']} other pods, {len(info['deployments'])} HPAs every {args.hpa_period:g} s;"
        f" slope after the first {settle / 60:g} min"
    )
    slopes = {}
    for adapter in adapters:
        rss = [value for _, value in adapter.samples]
        settled = [n for (t, _), n in zip(adapter.samples, adapter.descriptors, strict=True) if t >= settle] or [0]
        slopes[adapter.name] = slope = slope_mib_per_hour(adapter.samples, settle)
        print(
            f"{adapter.name:<12} RSS {rss[0]:7.1f} -> {rss[-1]:7.1f} MiB   peak {max(rss):7.1f} MiB"
            f"   slope {slope:+8.2f} MiB/h   fds {min(settled)}-{max(settled)}"
            f"   ({adapter.answered} answers, failed: {adapter.failures or 'none'})"
        )
        for status, said in adapter.first_failure.items():
            print(f"{'':<12} the first {status}: {said}")
    print(f"difference   refreeze - no-refreeze = {slopes['refreeze'] - slopes['no-refreeze']:+.2f} MiB/h")
    print("\n".join(traced + counted))
    if args.hours < 1:
        print(f"goal         slope < {args.flat:g} MiB/h: not judged (a run under an hour)")
        return
    flat = slopes["refreeze"] < args.flat
    print(f"goal         slope < {args.flat:g} MiB/h: {'met' if flat else 'NOT met'} ({slopes['refreeze']:+.2f})")
    if not flat:
        sys.exit(1)


if __name__ == "__main__":
    main()
