"""Keeping the garbage collector's full passes short in a process that serves one adapter.

A replica holds two large sets of long-lived objects: the pod cache and, with the direct source, one open stream per
node; a full pass that walks them takes long enough to be seen in answer times. So `HeapSettler` collects and then
freezes the survivors (`gc.freeze`: later passes skip them) once the pod cache has synced, again once the source is
ready (the replica reports ready only after that pass: `settled`), and every `refreeze_seconds` after, so that a full
pass walks only what arrived since; and it raises the young generation's threshold, the adapter making next to no
reference cycles. What was measured, and what a freeze costs: docs/decisions/2026-11-28-adapter-hot-path.md;
bench/adapter_heap_soak.py measures memory with and without the periodic pass.

The tuning was measured on CPython 3.11 (`MEASURED_ON`) only: on another interpreter the settler leaves the collector
as it is, says so once in the log, and is `settled` once the source is ready.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

REFREEZE_SECONDS = 60.0
YOUNG_THRESHOLD = 10_000  # Python's default is 700
POLL_SECONDS = 0.2

Interpreter = tuple[str, tuple[int, int]]  # (sys.implementation.name, (major, minor))
MEASURED_ON: Interpreter = ("cpython", (3, 11))
RUNNING: Interpreter = (sys.implementation.name, (sys.version_info.major, sys.version_info.minor))


def collect_and_freeze() -> None:
    gc.collect()
    gc.freeze()


def raise_young_threshold(threshold: int = YOUNG_THRESHOLD) -> None:
    gc.set_threshold(threshold, *gc.get_threshold()[1:])


class HeapSettler:
    """Collects and freezes when the pod cache has synced, when the source is ready, and every `refreeze_seconds`
    after; `settled` once the second pass is done (a readiness check). `interpreter`: the one running, which decides
    whether the tuning applies (MEASURED_ON)."""

    def __init__(
        self,
        pods_synced: Callable[[], bool],
        source_ready: Callable[[], bool],
        *,
        settle: Callable[[], None] = collect_and_freeze,
        prepare: Callable[[], None] = raise_young_threshold,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        refreeze_seconds: float | None = None,
        poll_seconds: float = POLL_SECONDS,
        interpreter: Interpreter = RUNNING,
    ) -> None:
        """`refreeze_seconds`: REFREEZE_SECONDS as the module holds it when the settler is made, unless given."""
        self._pods_synced = pods_synced
        self._source_ready = source_ready
        self._settle = settle
        self._prepare = prepare
        self._sleep = sleep
        self._refreeze = REFREEZE_SECONDS if refreeze_seconds is None else refreeze_seconds
        self._poll = poll_seconds
        self._interpreter = interpreter
        self._settled = False

    def settled(self) -> bool:
        return self._settled

    async def run(self) -> None:
        tuned = self._interpreter == MEASURED_ON
        if not tuned:
            name, (major, minor) = self._interpreter
            log.info(
                "garbage collector left as it is: its tuning (adapter/heap.py) was measured on CPython 3.11, "
                "this is %s %d.%d",
                name,
                major,
                minor,
            )
        while not self._pods_synced():
            await self._sleep(self._poll)
        if tuned:
            self._prepare()
            self._settle()
        while not self._source_ready():
            await self._sleep(self._poll)
        if not tuned:
            self._settled = True
            return
        self._settle()
        self._settled = True
        while True:
            await self._sleep(self._refreeze)
            self._settle()
