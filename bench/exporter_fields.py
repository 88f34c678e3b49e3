"""The exporter's CPU and memory with every field enabled (h100x8, --interval 1), against its default set, and which
fields cost what.

1. The whole exporter as its own process (`python -m exporter --simulate h100x8`), CPU seconds from /proc over a
   window with a Prometheus-like scrape every 15 s, and RSS after start-up and after a burst of scrapes: first with its
   default measurements, then with a --collectors file naming every field gpu-pulse serves (every field of
   dcgm-exporter's files, the per-link NVLink fields of all 18 links, and every label field).
2. In this process, the real collector's CPU time per cycle (median; the simulator included) for the default set and
   for the default set plus one group of fields at a time.
Goals (docs/performance.md, "Exporter"): whole process under 2% of one core and RSS under 80 MiB, with every field
(exit code 1 otherwise).

    python bench/exporter_fields.py [--seconds N] [--scrapes N] [--cycles N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from exporter_pipeline import ROOT, ExporterProcess, cpu_seconds, rss_mib
from exporter_rss import scrape

sys.path.insert(0, str(ROOT))

import pynvml

from exporter.catalogue import DEFAULT_MEASUREMENTS, LABEL_FIELDS, MEASUREMENTS
from exporter.nvml import CollectorSettings, NvmlCollector
from simulation import Simulator, install

CPU_BUDGET = 0.02  # of one core
RSS_BUDGET_MIB = 80.0
HEADERS = {"Accept": "application/openmetrics-text;version=1.0.0", "Accept-Encoding": "gzip"}

GROUPS: dict[str, frozenset[str]] = {
    "per-link NVLink (18 links)": frozenset(m.key for m in MEASUREMENTS if not m.default),
    "violations": frozenset(m.key for m in MEASUREMENTS if m.key.endswith("_violation")),
    "NVLink errors": frozenset(m.key for m in MEASUREMENTS if m.key.startswith("nvlink_") and "errors" in m.key),
    "thresholds, vGPU": frozenset({"slowdown_temp", "shutdown_temp", "max_operating_temp", "vgpu_license_status"}),
    "GPM occupancy, pipes": frozenset({"sm_occupancy", "fp64_active", "fp32_active", "fp16_active"}),
}


def every_field_csv() -> str:
    """A counters file naming every field gpu-pulse serves, in dcgm-exporter's format."""
    lines = [f"{m.dcgm.name}, {m.dcgm.type}, {m.dcgm.help}" for m in MEASUREMENTS if m.dcgm is not None]
    lines += [f"{f.dcgm_name}, label, {f.source}" for f in LABEL_FIELDS]
    return "\n".join(lines) + "\n"


def whole_process(args: list[str], seconds: float, scrapes: int) -> tuple[float, float, float, int]:
    """(CPU share of one core, RSS after start-up, RSS after the scrapes, /metrics bytes)."""
    exporter = ExporterProcess("h100x8", *args, interval=1.0)
    try:
        time.sleep(3)
        rss_start = rss_mib(exporter.pid)
        start_cpu, start = cpu_seconds(exporter.pid), time.monotonic()
        next_scrape = start
        size = 0
        while time.monotonic() - start < seconds:
            if time.monotonic() >= next_scrape:
                request = urllib.request.Request(exporter.url + "/metrics", headers=HEADERS)
                with urllib.request.urlopen(request, timeout=10) as response:
                    response.read()
                with urllib.request.urlopen(exporter.url + "/metrics", timeout=10) as response:
                    size = len(response.read())
                next_scrape += 15
            time.sleep(0.5)
        share = (cpu_seconds(exporter.pid) - start_cpu) / (time.monotonic() - start)
        asyncio.run(scrape(exporter.url, scrapes))
        return share, rss_start, rss_mib(exporter.pid), size
    finally:
        exporter.stop()


def collect_cost(enabled: frozenset[str], cycles: int) -> float:
    """Median CPU seconds of one collect() of h100x8 (simulator included)."""
    with install(Simulator("h100x8", sleep=lambda _: None)):
        collector = NvmlCollector(pynvml, CollectorSettings(enabled=enabled))
        collector.start()
        try:
            costs = []
            for i in range(cycles + 3):
                started = time.process_time()
                collector.collect()
                if i >= 3:
                    costs.append(time.process_time() - started)
                time.sleep(0.12)  # GPM samples must be > 100 ms apart
            return statistics.median(costs)
        finally:
            collector.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--scrapes", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=30)
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "every-field.csv"
        path.write_text(every_field_csv())
        print(f"{'h100x8 whole process':22} {'CPU':>8} {'RSS start':>10} {f'after {args.scrapes}':>12} {'bytes':>8}")
        for name, extra in (("default set", []), ("every field", ["--collectors", str(path)])):
            share, rss_start, rss_end, size = whole_process(extra, args.seconds, args.scrapes)
            print(f"{name:22} {share:7.2%} {rss_start:8.1f}MiB {rss_end:10.1f}MiB {size:8d}")
            if name == "every field":
                ok = share < CPU_BUDGET and rss_end < RSS_BUDGET_MIB
    before = DEFAULT_MEASUREMENTS - frozenset().union(*GROUPS.values())  # the measurements there were before them
    base = collect_cost(before, args.cycles)
    print(f"\ncollect() CPU per cycle, in process (simulator included): without these groups {base * 1000:.2f} ms")
    for group, keys in GROUPS.items():
        cost = collect_cost(before | keys, args.cycles)
        print(f"  + {group:28} {cost * 1000:6.2f} ms ({(cost - base) * 1000:+.2f} ms)")
    every = frozenset(m.key for m in MEASUREMENTS)
    cost = collect_cost(every, args.cycles)
    print(f"  every field                    {cost * 1000:6.2f} ms ({(cost - base) * 1000:+.2f} ms)")
    print(f"budget with every field: under {CPU_BUDGET:.0%} of one core, under {RSS_BUDGET_MIB:.0f} MiB: "
          f"{'met' if ok else 'NOT met'}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
