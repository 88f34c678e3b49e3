"""A check that runs every few seconds on the event loop until stopped: what reloads a renewed certificate or a changed
trust bundle. `start()` and `stop()` fit an aiohttp cleanup context."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable


class Periodic:
    """Calls `check` (a function or a coroutine function) every `period` seconds, the first time one period after
    `start()`. An exception in `check` is the check's own business: it is expected to log and count its failures."""

    def __init__(self, check: Callable[[], object | Awaitable[object]], period: float, name: str) -> None:
        if period <= 0:
            raise ValueError(f"{name}: the period must be positive")
        self._check = check
        self.period = period
        self._name = name
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            outcome = self._check()
            if inspect.isawaitable(outcome):
                await outcome

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
