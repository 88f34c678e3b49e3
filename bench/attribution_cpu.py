"""CPU cost of pod attribution per poll cycle: 8 x H100, 4 time-sliced pods on each, 100 pods on the node.

    python bench/attribution_cpu.py [--cycles 300]

Measures, in the same run and on the same simulated node:
  baseline   a poll cycle without the pod side (collect + render)
  attributed a poll cycle with it (collect + attribute + /pods document + render)
  attribute  attribute() alone on one collection (cgroup reads included)
  /pods      the /pods builder alone on one snapshot
  list       one pod-resources List of the 100 pods, client side (every --kubelet-interval, 5 s by default)
and prints CPU seconds per cycle, the ratio attributed/baseline, and the share of one core at --interval 1.
CPU is this thread's CPU time (time.thread_time), so the fake kubelet's server threads are not counted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from attribution_node import PODS_ON_NODE, busy_node, node


def cpu_per_call(fn: Callable[[], object], calls: int, batch: int = 5) -> list[float]:
    """CPU seconds per call, each sample the mean over a batch of calls."""
    samples = []
    for _ in range(max(1, calls // batch)):
        start = time.thread_time()
        for _ in range(batch):
            fn()
        samples.append((time.thread_time() - start) / batch)
    return samples


def report(name: str, samples: list[float]) -> float:
    median = statistics.median(samples)
    p99 = sorted(samples)[max(0, int(len(samples) * 0.99) - 1)]
    print(f"{name:<12} median {median * 1e3:8.3f} ms CPU   p99 {p99 * 1e3:8.3f} ms   ({len(samples)} batches)")
    return median


BUDGET_SHARE_OF_CORE = 0.02  # the whole cycle, pod side included, at --interval 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=300)
    cycles = parser.parse_args().cycles
    scenario = busy_node()
    print(f"node: {scenario.description}")

    with node(scenario, attribution=False) as plain:
        plain.loop.poll_once()
        baseline = report("baseline", cpu_per_call(plain.loop.poll_once, cycles))

    with node(scenario, attribution=True) as busy:
        busy.loop.poll_once()
        attributed = report("attributed", cpu_per_call(busy.loop.poll_once, cycles))
        assert busy.attributor is not None and busy.builder is not None
        attributor, builder = busy.attributor, busy.builder
        collection = busy.collector.collect()
        published = busy.loop.published
        assert published is not None
        pods = {(u.pod.namespace, u.pod.name) for u in published.snapshot.pods}
        print(
            f"attributed pods in the snapshot: {len(pods)} (sharing GPUs), pods listed by the kubelet: {PODS_ON_NODE}"
        )

        attribute = report("attribute", cpu_per_call(lambda: attributor.attribute(collection), cycles))
        document = report("/pods", cpu_per_call(lambda: builder(published.snapshot), cycles))
        listing = report("list", cpu_per_call(attributor.client.list_pods, max(20, cycles // 10)))

    overhead = attributed - baseline
    print()
    print(f"attributed / baseline: {attributed / baseline:.2f}x  (+{overhead * 1e3:.3f} ms CPU per cycle)")
    alone = attribute + document
    print(
        f"attribute() + /pods builder: {alone * 1e3:.3f} ms per cycle = {alone * 100:.2f}% of one core at --interval 1"
    )
    print(f"the rest of the overhead (per-pod series, /pods JSON per namespace): {(overhead - alone) * 1e3:.3f} ms")
    print(
        f"kubelet List: {listing * 1e3:.3f} ms per call = {listing / 5 * 100:.3f}% of one core at --kubelet-interval 5"
    )
    print(f"whole cycle with attribution: {attributed * 100:.2f}% of one core at --interval 1")
    met = attributed < BUDGET_SHARE_OF_CORE
    print(f"budget: whole cycle < {BUDGET_SHARE_OF_CORE:.0%} of one core at --interval 1: {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
