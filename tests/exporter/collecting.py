"""The real NvmlCollector on the NVML simulator, on a clock the test steps: shared by the collector's test modules."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pynvml

from exporter.nvml import NvmlCollector
from simulation import Simulator, install

START = 1_760_000_000.0


class FakeClock:
    """Wall-clock seconds that move only when the test says so."""

    def __init__(self, start: float = START) -> None:
        self.start = start
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def at(self, scenario_seconds: float) -> None:
        """Jump to this many seconds after the start (the simulator's scenario time, for one created at the start)."""
        self.now = self.start + scenario_seconds


@contextmanager
def collecting(scenario: Any, clock: FakeClock, **options: Any) -> Iterator[tuple[Simulator, NvmlCollector]]:
    """A started collector over `scenario` (a name, file or Scenario); closed and uninstalled on exit."""
    sim = Simulator(scenario, clock=clock)
    with install(sim):
        collector = NvmlCollector(pynvml, clock=clock, wall_clock=clock, **options)
        collector.start()
        try:
            yield sim, collector
        finally:
            collector.close()
