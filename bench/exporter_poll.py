"""How long a poll cycle takes when it reads PCIe throughput (a100x8, no GPM), against the same cycle without it.

nvml.h: nvmlDeviceGetPcieThroughput "is querying a byte counter over a 20ms interval": each call blocks 20 ms, and a GPU
needs two (transmit, receive). The NVML simulator blocks likewise, in real time here. The real collector polls the 8
GPUs back to back (--interval 1, PCIe due every 5th cycle); the same collector with the PCIe measurements left out is
the baseline, measured in the same run, alternating blocks of cycles.
Goal: reading PCIe adds nothing a poll waits for: the cycles' p95 and max within 1.25x of the baseline's (exit code 1
otherwise), where reading it in the poll costs every 5th cycle at least the 40 ms of the two calls.

    python bench/exporter_poll.py [--cycles N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pynvml  # noqa: E402

from exporter.catalogue import MEASUREMENTS  # noqa: E402
from exporter.nvml import CollectorSettings, NvmlCollector  # noqa: E402
from simulation import Simulator, install  # noqa: E402

PCIE = frozenset({"pcie_tx", "pcie_rx"})
GOAL = 1.25


def cycles(enabled: frozenset[str], count: int) -> list[float]:
    """Wall seconds of `count` consecutive collect() calls (after three to warm up)."""
    simulator = Simulator("a100x8")  # real time: nvmlDeviceGetPcieThroughput sleeps its 20 ms
    with install(simulator):
        collector = NvmlCollector(pynvml, CollectorSettings(enabled=enabled, pcie_period_seconds=5.0))
        collector.start()
        try:
            for _ in range(3):
                collector.collect()
            taken = []
            for _ in range(count):
                started = time.perf_counter()
                collector.collect()
                taken.append(time.perf_counter() - started)
                time.sleep(0.05)
            return taken
        finally:
            collector.close()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=100)
    args = parser.parse_args()
    every = frozenset(m.key for m in MEASUREMENTS if getattr(m, "default", True))
    runs: dict[str, list[float]] = {"with PCIe": [], "without": []}
    blocks = 4
    for _ in range(blocks):  # alternate, so that machine noise falls on both alike
        runs["with PCIe"] += cycles(every, args.cycles // blocks)
        runs["without"] += cycles(every - PCIE, args.cycles // blocks)
    print(f"{'a100x8 poll cycle':18} {'p50':>8} {'p95':>8} {'max':>8} {'mean':>8}")
    for name, taken in runs.items():
        row = [statistics.median(taken), quantile(taken, 0.95), max(taken), statistics.fmean(taken)]
        print(f"{name:18} " + " ".join(f"{v * 1000:6.1f}ms" for v in row))
    with_pcie, without = runs["with PCIe"], runs["without"]
    p95 = quantile(with_pcie, 0.95) / quantile(without, 0.95)
    worst = max(with_pcie) / max(without)
    met = p95 <= GOAL and worst <= GOAL
    print(f"ratio with/without PCIe: p95 {p95:.2f}x, max {worst:.2f}x")
    print(f"goal: PCIe adds nothing a poll waits for (p95 and max within {GOAL}x): {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
