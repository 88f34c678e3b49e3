"""CPU per poll cycle and per hour at --interval 1 for h100x8.

1. In this process, the real pipeline's cycle (collect + render + /pods), CPU time of the process (the GPUs are read
   on their own threads), median of the cycles; the simulator's own share (it stands in for libnvidia-ml, whose calls
   are C and near free) is estimated with a CPU-time profile of every thread of a second pipeline and taken out.
2. The whole exporter as its own process (`python -m exporter --simulate h100x8 --interval 1`: poll thread, XID
   listener, event loop, simulator included), CPU seconds from /proc over a window with a Prometheus-like scrape every
   15 s. The baseline is one core: 1 CPU second per second.
Measured with every field (`--field-set all`) unless told otherwise. Budget: under 2% of one core, for the exporter's
own cost and for the whole process (exit code 1 otherwise).

    python bench/exporter_cpu.py [--seconds N]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

from exporter_pipeline import ExporterProcess, cpu_seconds, pipeline

import simulation
from exporter.catalogue import FIELD_SETS

BUDGET = 0.02  # of one core
# the simulator's code, wherever the package lives (it stands in for libnvidia-ml and the node)
SIMULATION = str(Path(simulation.__file__).resolve().parent) + os.sep
PROMETHEUS_HEADERS = {"Accept": "application/openmetrics-text;version=1.0.0", "Accept-Encoding": "gzip"}


def in_process(cycles: int, field_set: str) -> tuple[float, float]:
    """(median CPU seconds per cycle, the simulator's share of it)"""
    with pipeline("h100x8", field_set=field_set) as loop:
        for _ in range(3):
            loop.poll_once()
            time.sleep(0.15)  # GPM needs samples > 100 ms apart
        costs = []
        for _ in range(cycles):
            started = time.process_time()
            loop.poll_once()
            costs.append(time.process_time() - started)
            time.sleep(0.15)
    return statistics.median(costs), simulator_share(field_set)


def simulator_share(field_set: str, cycles: int = 10) -> float:
    """The simulator's share of the CPU time of a pipeline's cycles, over every thread: each thread started while the
    pipeline is built (the GPUs' readers, the XID listener) profiles itself on its own CPU clock."""
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def profile_this_thread(*_: object) -> None:
        sys.setprofile(None)
        profile = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append(profile)
        profile.enable()

    threading.setprofile(profile_this_thread)
    try:
        with pipeline("h100x8", field_set=field_set) as loop:
            for _ in range(3):
                loop.poll_once()
                time.sleep(0.15)
            polling = cProfile.Profile(time.thread_time)
            for _ in range(cycles):
                polling.enable()
                loop.poll_once()
                polling.disable()
                time.sleep(0.15)
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    total = simulated = 0.0
    with lock:
        everything = [polling, *profiles]
    for profile in everything:
        profile.disable()
        for (filename, _, _), entry in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
            total += entry[2]
            if os.path.realpath(filename).startswith(SIMULATION):
                simulated += entry[2]
    return simulated / total if total else 0.0


def whole_process(seconds: float, field_set: str) -> float:
    """CPU seconds per wall second of a running exporter, scraped like Prometheus every 15 s."""
    exporter = ExporterProcess("h100x8", "--field-set", field_set, interval=1.0)
    try:
        time.sleep(3)  # past start-up
        start_cpu, start = cpu_seconds(exporter.pid), time.monotonic()
        next_scrape = start
        while time.monotonic() - start < seconds:
            if time.monotonic() >= next_scrape:
                request = urllib.request.Request(exporter.url + "/metrics", headers=PROMETHEUS_HEADERS)
                with urllib.request.urlopen(request, timeout=10) as response:
                    response.read()
                next_scrape += 15
            time.sleep(0.5)
        return (cpu_seconds(exporter.pid) - start_cpu) / (time.monotonic() - start)
    finally:
        exporter.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--field-set", choices=sorted(FIELD_SETS), default="all", help="the budget holds for 'all'")
    args = parser.parse_args()
    cycle, simulated = in_process(args.cycles, args.field_set)
    own = cycle * (1 - simulated)
    print(
        f"poll cycle, h100x8, --field-set {args.field_set} (collect + render + /pods): {cycle * 1e3:.2f} ms CPU, "
        f"of which simulator {simulated:.0%}"
    )
    print(
        f"  exporter alone: {own * 1e3:.2f} ms per cycle = {own * 3600:.1f} CPU s per hour at --interval 1 "
        f"= {own:.2%} of one core"
    )
    share = whole_process(args.seconds, args.field_set)
    print(
        f"whole exporter process over {args.seconds:g} s (simulator included, scraped every 15 s): "
        f"{share * 3600:.1f} CPU s per hour = {share:.2%} of one core"
    )
    ok = own < BUDGET and share < BUDGET
    print(f"budget: under {BUDGET:.0%} of one core: {'met' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
