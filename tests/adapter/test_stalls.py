"""The stall self-metrics: a loop blocked for a while shows as lag at least that long, and a collection as a pause of
its generation; nothing is left hooked into the collector once watching stops."""

from __future__ import annotations

import asyncio
import gc
import time

from prometheus_client import CollectorRegistry

from adapter.api.stalls import Stalls


def _observed(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> tuple[float, float]:
    count = registry.get_sample_value(f"{name}_count", labels or {}) or 0.0
    total = registry.get_sample_value(f"{name}_sum", labels or {}) or 0.0
    return count, total


async def test_a_blocked_loop_shows_as_lag_and_a_collection_as_a_pause() -> None:
    registry = CollectorRegistry()
    stalls = Stalls(registry)
    watching = asyncio.create_task(stalls.watch(period=0.01))
    await asyncio.sleep(0.05)
    time.sleep(0.3)  # the loop is blocked: the timer due meanwhile fires that much late
    gc.collect()
    await asyncio.sleep(0.05)
    watching.cancel()
    await asyncio.gather(watching, return_exceptions=True)
    assert stalls._on_gc not in gc.callbacks
    count, _ = _observed(registry, "gpu_pulse_adapter_event_loop_lag_seconds")
    late = registry.get_sample_value("gpu_pulse_adapter_event_loop_lag_seconds_bucket", {"le": "0.25"})
    assert count >= 3 and late is not None and late < count  # one observation at least is over 0.25 s
    pauses, seconds = _observed(registry, "gpu_pulse_adapter_gc_pause_seconds", {"generation": "2"})
    assert pauses >= 1 and seconds > 0
