"""Keeping the garbage collector's passes short in a process that serves one adapter.

A full collection walks every tracked object outside the permanent generation. A replica holds two big sets of
long-lived ones: the pod cache (52,000 pods are about 230,000 objects) and, with the direct source, one open stream
per node (2,000 nodes are about 105,000 objects: connections, transports, coroutines, buffers). With either inside, a
full pass takes 100-260 ms, and every query it lands on waits that long (docs/performance.md measured both).

So `HeapSettler` collects and then freezes the survivors (`gc.freeze`: later passes skip them) at the moments the
long-lived sets have just been built: once the pod cache has synced, and again once the source is ready (the streams
open and their first documents in). The replica reports ready only after that second pass (`settled`), so the pass
that walks the streams runs before any query is routed to it, not in the first minute of its answers. Every
`refreeze_seconds` after, it collects and freezes again: pods and streams come and go (an exporter ends each stream
after about five minutes, so all 2,000 are made anew within that), and what arrived since is all a full pass has to
walk. Once a minute, that is about a fifth of the streams: in a fleet benchmark run 16 more full passes than with
passes every ten minutes, about 65 ms each (the run's pause totals, docs/performance.md). Every ten minutes (as first
built) each pass walked all of them and more, and so did the collector's own full passes between: the likeliest cause
of a 129-ms answer 6 minutes into a replica's life in another run.

The young generation's threshold is raised (`young_threshold`): the adapter makes next to no reference cycles (an
answer's objects, a node document and its figures are freed by reference counting when the answer is sent or the
document replaced), and at Python's default (700) the collector ran several times a second, found nothing to free and
promoted live documents into older generations whose passes took 5-20 ms of some query's time.

What a freeze costs: an object frozen while alive and later part of an unreachable cycle is never collected
(reference counting still frees everything that is not a cycle). Streams and pods leave behind few such cycles: a
stream read to its end and closed leaves none (200 client streams against an aiohttp server in one process, a
collection after them found 0 unreachable objects), and in each 10-minute fleet benchmark run a replica's RSS ended at
its peak, 224-242 MiB (docs/performance.md); runs of hours were not made.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable

REFREEZE_SECONDS = 60.0
YOUNG_THRESHOLD = 10_000  # Python's default is 700
POLL_SECONDS = 0.2


def collect_and_freeze() -> None:
    gc.collect()
    gc.freeze()


def raise_young_threshold(threshold: int = YOUNG_THRESHOLD) -> None:
    gc.set_threshold(threshold, *gc.get_threshold()[1:])


class HeapSettler:
    """Collects and freezes when the pod cache has synced, when the source is ready, and every `refreeze_seconds`
    after; `settled` once the second pass is done (a readiness check)."""

    def __init__(
        self,
        pods_synced: Callable[[], bool],
        source_ready: Callable[[], bool],
        *,
        settle: Callable[[], None] = collect_and_freeze,
        prepare: Callable[[], None] = raise_young_threshold,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        refreeze_seconds: float = REFREEZE_SECONDS,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self._pods_synced = pods_synced
        self._source_ready = source_ready
        self._settle = settle
        self._prepare = prepare
        self._sleep = sleep
        self._refreeze = refreeze_seconds
        self._poll = poll_seconds
        self._settled = False

    def settled(self) -> bool:
        return self._settled

    async def run(self) -> None:
        while not self._pods_synced():
            await self._sleep(self._poll)
        self._prepare()
        self._settle()
        while not self._source_ready():
            await self._sleep(self._poll)
        self._settle()
        self._settled = True
        while True:
            await self._sleep(self._refreeze)
            self._settle()
