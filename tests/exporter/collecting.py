"""The real NvmlCollector on the NVML simulator, on a clock the test steps: shared by the collector's test modules."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

import pynvml

from exporter.catalogue import FIELD_SETS
from exporter.nvml import CollectorSettings, NvmlCollector
from exporter.nvml.coverage import XID_KEYS
from simulation import Simulator, install
from tests.support.clocks import ManualClock
from tests.support.waiting import holds_within, patience

SETTINGS = frozenset(field.name for field in fields(CollectorSettings))


def no_wait(seconds: float) -> None:
    """The simulated driver's waits (nvmlDeviceGetPcieThroughput's 20 ms) take no time: the clock is the test's."""


@contextmanager
def collecting(
    scenario: Any,
    clock: ManualClock,
    *,
    sleep: Callable[[float], None] = no_wait,
    driver_writes_kernel_log: bool = True,
    **options: Any,
) -> Iterator[tuple[Simulator, NvmlCollector]]:
    """A started collector over `scenario` (a name, file or Scenario); closed and uninstalled on exit. `sleep` is how
    the simulated driver waits; `options` are CollectorSettings fields (every field is read unless `enabled` says
    otherwise), or the collector's other arguments. With a `kernel_log`, the simulated driver writes its kernel log
    there (unless `driver_writes_kernel_log` is False)."""
    kernel_log = options.get("kernel_log") if driver_writes_kernel_log else None
    sim = Simulator(scenario, clock=clock, sleep=sleep, kernel_log_path=Path(kernel_log) if kernel_log else None)
    with install(sim):
        given = {name: options.pop(name) for name in list(options) if name in SETTINGS}
        given.setdefault("enabled", FIELD_SETS["all"])  # every field unless a test chooses (--field-set all)
        collector = NvmlCollector(pynvml, CollectorSettings(**given), clock=clock, wall_clock=clock, **options)
        collector.start()
        if kernel_log and collector.enabled & XID_KEYS:
            # the reader opens the log at its end on its own thread: a record written before that is not heard
            assert holds_within(lambda: collector.kernel_log_open, patience(10)), "the kernel log was never opened"
        try:
            yield sim, collector
        finally:
            collector.close()
