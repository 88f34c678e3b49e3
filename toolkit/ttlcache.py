"""A small bounded cache whose entries expire: the ~10 s memory of TokenReview and SubjectAccessReview answers (the
adapter's, and the exporter's TokenReview check)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ExpiringCache(Generic[K, V]):
    """Least-recently-used eviction past `max_entries`; an entry lives `ttl` seconds of `clock` (monotonic)."""

    def __init__(self, max_entries: int, clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._entries: OrderedDict[K, tuple[float, float, V]] = OrderedDict()  # key -> (expires, ttl, value)
        self._max = max_entries
        self._clock = clock

    def get(self, key: K) -> V | None:
        found = self.entry(key)
        return None if found is None else found[1]

    def entry(self, key: K) -> tuple[float, V] | None:
        """The entry's value and the fraction of its life left (1 when new, near 0 about to expire), or None."""
        found = self._entries.get(key)
        if found is None:
            return None
        expires, ttl, value = found
        left = expires - self._clock()
        if left <= 0:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return left / ttl, value

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._entries[key] = (self._clock() + ttl, ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class CoalescingCache(Generic[K, V]):
    """An `ExpiringCache` in front of an async loader; concurrent misses for one key share one load.

    A load runs as its own task, so a caller that goes away (a client hanging up) does not cancel it for the
    others. A failed load is not cached: its error goes to everyone waiting on it. An entry asked for in the last
    `refresh_ahead` of its life is loaded again in the background while it still answers; and an entry asked for
    within `keep_fresh` seconds is loaded again in the background when it reaches that point of its life even if
    nobody asks (`refresh_due`, called periodically): keys asked about steadily (an HPA's every 15 s, against a 10 s
    life) never wait for a load, and no answer is older than its life.
    """

    def __init__(
        self,
        max_entries: int,
        clock: Callable[[], float] = time.monotonic,
        refresh_ahead: float = 0.5,
        keep_fresh: float = 0.0,
    ) -> None:
        self._cache: ExpiringCache[K, V] = ExpiringCache(max_entries, clock)
        self._loading: dict[K, asyncio.Task[V]] = {}
        self._refresh_ahead = refresh_ahead
        self._keep_fresh = keep_fresh
        self._clock = clock
        # keys asked for recently, with what loads them again: key -> (asked at, load, ttl)
        self._asked: dict[K, tuple[float, Callable[[], Awaitable[V]], Callable[[V], float]]] = {}

    def refresh_due(self) -> int:
        """Load again, in the background, the entries asked for within `keep_fresh` seconds that are in the last
        `refresh_ahead` of their life; forget the others. Returns how many loads were started."""
        horizon = self._clock() - self._keep_fresh
        started = 0
        for key, (asked_at, load, ttl) in list(self._asked.items()):
            if asked_at < horizon:
                del self._asked[key]
                continue
            found = self._cache.entry(key)
            if found is not None and found[0] < self._refresh_ahead and key not in self._loading:
                self._start(key, load, ttl)
                started += 1
        return started

    async def get(self, key: K, load: Callable[[], Awaitable[V]], ttl: Callable[[V], float]) -> V:
        if self._keep_fresh > 0:
            self._asked[key] = (self._clock(), load, ttl)
        found = self._cache.entry(key)
        if found is not None:
            life_left, value = found
            if life_left < self._refresh_ahead and key not in self._loading:
                self._start(key, load, ttl)
            return value
        task = self._loading.get(key) or self._start(key, load, ttl)
        return await asyncio.shield(task)

    def _start(self, key: K, load: Callable[[], Awaitable[V]], ttl: Callable[[V], float]) -> asyncio.Task[V]:
        task = asyncio.ensure_future(self._load(key, load, ttl))
        task.add_done_callback(_retrieve)
        self._loading[key] = task
        return task

    async def _load(self, key: K, load: Callable[[], Awaitable[V]], ttl: Callable[[V], float]) -> V:
        try:
            value = await load()
            self._cache.put(key, value, ttl(value))
            return value
        finally:
            del self._loading[key]

    def __len__(self) -> int:
        return len(self._cache)


def _retrieve(task: asyncio.Task[object]) -> None:
    if not task.cancelled():
        task.exception()  # the waiters re-raise it; nobody else should report it as "never retrieved"
