"""The real NvmlCollector on the NVML simulator, on a clock the test steps: shared by the collector's test modules."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pynvml

from exporter.nvml import NvmlCollector
from simulation import Simulator, install
from tests.support.clocks import ManualClock


@contextmanager
def collecting(scenario: Any, clock: ManualClock, **options: Any) -> Iterator[tuple[Simulator, NvmlCollector]]:
    """A started collector over `scenario` (a name, file or Scenario); closed and uninstalled on exit."""
    sim = Simulator(scenario, clock=clock)
    with install(sim):
        collector = NvmlCollector(pynvml, clock=clock, wall_clock=clock, **options)
        collector.start()
        try:
            yield sim, collector
        finally:
            collector.close()
