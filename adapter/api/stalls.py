"""What keeps the adapter from answering at once: the event loop's lag behind a timer, and the garbage collector.

An answer waits for whatever the one event loop is doing when the request arrives (documents arriving, other answers)
and for any collection the garbage collector runs meanwhile; neither shows in the request-duration histogram, which
times the handler only. These two histograms show them:

- `gpu_pulse_adapter_event_loop_lag_seconds`: how late a timer of `period` seconds fires, measured every `period`:
  the wait a request arriving at a random moment sees before the loop reads it (a lower bound: its own work comes
  after);
- `gpu_pulse_adapter_gc_pause_seconds{generation}`: each collection's duration (gc.callbacks), by generation; the
  thread that triggers one holds the interpreter throughout.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Histogram

LAG_PERIOD_SECONDS = 0.1
_PAUSE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Stalls:
    def __init__(self, registry: CollectorRegistry, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self.loop_lag = Histogram(
            "gpu_pulse_adapter_event_loop_lag_seconds",
            f"How late a {LAG_PERIOD_SECONDS:g}-s timer of the event loop fires: what a request arriving then waits "
            "before the loop reads it.",
            buckets=_PAUSE_BUCKETS,
            registry=registry,
        )
        self.gc_pause = Histogram(
            "gpu_pulse_adapter_gc_pause_seconds",
            "Duration of each garbage collection, by generation; the interpreter runs nothing else meanwhile.",
            ["generation"],
            buckets=_PAUSE_BUCKETS,
            registry=registry,
        )
        self._by_generation = [self.gc_pause.labels(str(generation)) for generation in range(3)]
        self._clock = clock
        self._collecting_since: float | None = None

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._collecting_since = self._clock()
        elif self._collecting_since is not None:
            generation = min(2, max(0, int(info.get("generation", 2))))
            self._by_generation[generation].observe(self._clock() - self._collecting_since)
            self._collecting_since = None

    async def watch(self, period: float = LAG_PERIOD_SECONDS) -> None:
        """Observe collections and the loop's lag until cancelled."""
        gc.callbacks.append(self._on_gc)
        try:
            while True:
                started = self._clock()
                await asyncio.sleep(period)
                self.loop_lag.observe(max(0.0, self._clock() - started - period))
        finally:
            gc.callbacks.remove(self._on_gc)
