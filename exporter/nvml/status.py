"""Self-health of the collector's parts, one CollectorStatus each per cycle: nvml, fields, processes, xid, gpm."""

from __future__ import annotations

import threading

from exporter.snapshot import CollectorStatus

SUB_COLLECTORS = ("nvml", "fields", "processes", "xid", "gpm")


class CycleStatus:
    """Accumulates one cycle's time and failures per part; error totals are monotonic since start. The GPUs are read
    on their own threads at once, so every update takes a lock."""

    __slots__ = ("_duration", "_errors_total", "_failed", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._errors_total: dict[str, float] = dict.fromkeys(SUB_COLLECTORS, 0.0)
        self._duration: dict[str, float] = dict.fromkeys(SUB_COLLECTORS, 0.0)
        self._failed: set[str] = set()

    def begin(self) -> None:
        for name in SUB_COLLECTORS:
            self._duration[name] = 0.0
        self._failed.clear()

    def spent(self, name: str, seconds: float) -> None:
        with self._lock:
            self._duration[name] += seconds

    def failed(self, name: str, count: int = 1) -> None:
        with self._lock:
            self._failed.add(name)
            self._errors_total[name] += count

    def errors(self, name: str, count: int = 1) -> None:
        """Count errors of a part that still did its job this cycle (one GPU lost while the others answer)."""
        with self._lock:
            self._errors_total[name] += count

    def statuses(self) -> tuple[CollectorStatus, ...]:
        return tuple(
            CollectorStatus(name, name not in self._failed, self._duration[name], self._errors_total[name])
            for name in SUB_COLLECTORS
        )
