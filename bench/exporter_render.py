"""Render cost per poll against prometheus_client.generate_latest over the same series.

Snapshots come from the real pipeline (simulated GPUs -> pynvml -> NvmlCollector -> PollLoop). For each, the baseline
is prometheus_client's text exposition of exactly the same families and samples (read back from our output with
prometheus_client's parser, then handed to a registry): formatting only, no snapshot walking, so the baseline is
flattered. Ours renders from the snapshot, text and OpenMetrics both. "ours" is the steady state (label strings cached
per device since the previous poll); "ours cold" is a fresh renderer per call (as after a rediscovery). Rounds
alternate ours and the baseline; the median per call is reported. Budget: steady state >= 5x faster than the baseline
in every case (exit code 1 otherwise).

    python bench/exporter_render.py [--rounds N] [--calls N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from exporter_pipeline import SCENARIOS, pipeline
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.catalogue import Dialect
from exporter.exposition import ExpositionRenderer
from exporter.snapshot import Snapshot

BUDGET = 5.0


class Families:
    """A prometheus_client collector yielding fixed metric families."""

    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> Iterable[Any]:
        return self.families


def per_call(function: Callable[[int], object], calls: int) -> float:
    started = time.perf_counter()
    for i in range(calls):
        function(i)
    return (time.perf_counter() - started) / calls


def measure(scenario: str, dialect: Dialect, rounds: int, calls: int) -> tuple[float, float, float, int, int]:
    with pipeline(scenario, dialect) as loop:
        snapshots: list[Snapshot] = []
        for cycle in range(13):
            published = loop.poll_once()
            assert published is not None
            if cycle >= 3:  # past the first cycles, which lack the figures that need two samples (GPM, processes)
                snapshots.append(published.snapshot)
            time.sleep(0.15)  # GPM figures need samples > 100 ms apart: poll as the loop would
    renderer = ExpositionRenderer(dialect, version="bench")
    registries = []
    for snapshot in snapshots:
        registry = CollectorRegistry(auto_describe=False)
        text = renderer.render(snapshot).text.decode()
        registry.register(Families(list(text_string_to_metric_families(text))))  # type: ignore[arg-type]
        registries.append(registry)
    rendered = renderer.render(snapshots[-1])
    n = len(snapshots)
    ours, cold, theirs = [], [], []
    for _ in range(rounds):
        ours.append(per_call(lambda i: renderer.render(snapshots[i % n]), calls))
        cold.append(per_call(lambda i: ExpositionRenderer(dialect, version="bench").render(snapshots[i % n]), calls))
        theirs.append(per_call(lambda i: generate_latest(registries[i % n]), calls))
    return (
        statistics.median(ours),
        statistics.median(cold),
        statistics.median(theirs),
        rendered.samples,
        len(rendered.text),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=40)
    args = parser.parse_args()
    print(
        f"{'scenario':8} {'dialect':10} {'series':>6} {'bytes':>7} {'ours':>9} {'ours cold':>10} "
        f"{'generate_latest':>16} {'ratio':>6} {'cold ratio':>10}"
    )
    ok = True
    for scenario in SCENARIOS:
        for dialect in Dialect:
            ours, cold, theirs, samples, size = measure(scenario, dialect, args.rounds, args.calls)
            ratio = theirs / ours
            ok &= ratio >= BUDGET
            print(
                f"{scenario:8} {dialect!s:10} {samples:6d} {size:7d} {ours * 1e3:7.3f}ms {cold * 1e3:8.3f}ms "
                f"{theirs * 1e3:14.3f}ms {ratio:5.1f}x {theirs / cold:9.1f}x"
            )
    print(f"budget: ours >= {BUDGET:g}x faster than generate_latest in every case: {'met' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
