"""A small bounded cache whose entries expire: the ~10 s memory of TokenReview and SubjectAccessReview answers."""

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
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._max = max_entries
        self._clock = clock

    def get(self, key: K) -> V | None:
        found = self._entries.get(key)
        if found is None:
            return None
        expires, value = found
        if self._clock() >= expires:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._entries[key] = (self._clock() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class CoalescingCache(Generic[K, V]):
    """An `ExpiringCache` in front of an async loader; concurrent misses for one key share one load.

    A load runs as its own task, so a caller that goes away (a client hanging up) does not cancel it for the
    others. A failed load is not cached: its error goes to everyone waiting on it.
    """

    def __init__(self, max_entries: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._cache: ExpiringCache[K, V] = ExpiringCache(max_entries, clock)
        self._loading: dict[K, asyncio.Task[V]] = {}

    async def get(self, key: K, load: Callable[[], Awaitable[V]], ttl: Callable[[V], float]) -> V:
        found = self._cache.get(key)
        if found is not None:
            return found
        task = self._loading.get(key)
        if task is None:
            task = asyncio.ensure_future(self._load(key, load, ttl))
            task.add_done_callback(_retrieve)
            self._loading[key] = task
        return await asyncio.shield(task)

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
