"""The standard `process_*` self-metrics of a service (CPU time, memory, file descriptors, start time), as plain data.

Both services publish the same six series under the names every Prometheus client library uses, so the usual
dashboards and alerts (`process_resident_memory_bytes`, `rate(process_cpu_seconds_total[5m])`, open file descriptors
against their limit) work on them. The figures are read by prometheus-client's own `ProcessCollector` (from
/proc/self on Linux; nothing elsewhere): the adapter registers that collector in its registry, the exporter, whose
exposition is its own renderer (exporter/exposition/health.py), reads it once per snapshot through `read_process`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import ProcessCollector
from prometheus_client.core import Metric

# sample name -> (family type, HELP), as prometheus-client writes them
PROCESS_SERIES: dict[str, tuple[str, str]] = {
    "process_cpu_seconds_total": ("counter", "Total user and system CPU time spent in seconds."),
    "process_virtual_memory_bytes": ("gauge", "Virtual memory size in bytes."),
    "process_resident_memory_bytes": ("gauge", "Resident memory size in bytes."),
    "process_start_time_seconds": ("gauge", "Start time of the process since unix epoch in seconds."),
    "process_open_fds": ("gauge", "Number of open file descriptors."),
    "process_max_fds": ("gauge", "Maximum number of open file descriptors."),
}


@dataclass(frozen=True, slots=True)
class ProcessFigures:
    """The figures one read gave, by sample name (those the platform gives; none where /proc is missing)."""

    values: tuple[tuple[str, float], ...]

    def get(self, name: str) -> float | None:
        return next((value for sample, value in self.values if sample == name), None)


def figures_of(families: Iterable[Metric]) -> ProcessFigures:
    """The known `process_*` samples out of a collector's families, in PROCESS_SERIES order."""
    found = {sample.name: float(sample.value) for family in families for sample in family.samples}
    return ProcessFigures(tuple((name, found[name]) for name in PROCESS_SERIES if name in found))


def process_reader(collector: ProcessCollector | None = None) -> Callable[[], ProcessFigures]:
    """A function reading this process's figures now (prometheus-client's ProcessCollector, not registered)."""
    source = collector if collector is not None else ProcessCollector(registry=None)
    return lambda: figures_of(source.collect())
