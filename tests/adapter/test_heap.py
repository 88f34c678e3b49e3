"""HeapSettler: when the replica collects and freezes, and when it says it has settled."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from typing import Any

import pytest

from adapter.heap import HeapSettler


class World:
    """The pod cache's and the source's state as the settler polls them, and what it did, in order."""

    def __init__(self) -> None:
        self.synced = False
        self.ready = False
        self.done: list[str] = []
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await asyncio.sleep(0)

    def settler(self, **options: Any) -> HeapSettler:
        """A settler polling this world, recording what it does here, refreezing every 600 s (unless `options` say)."""
        return HeapSettler(
            lambda: self.synced,
            lambda: self.ready,
            settle=lambda: self.done.append("settle"),
            prepare=lambda: self.done.append("prepare"),
            sleep=self.sleep,
            **{"refreeze_seconds": 600.0, **options},
        )


async def _until(condition, tries: int = 1000) -> None:  # type: ignore[no-untyped-def]
    for _ in range(tries):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


async def test_settles_after_the_pods_and_again_after_the_source_then_every_refreeze() -> None:
    world = World()
    settler = world.settler(poll_seconds=0.2)
    task = asyncio.create_task(settler.run())
    try:
        await _until(lambda: len(world.slept) > 3)
        assert world.done == [] and not settler.settled()  # nothing before the pod cache has synced
        world.synced = True
        await _until(lambda: world.done == ["prepare", "settle"])
        polls = len(world.slept)
        await _until(lambda: len(world.slept) > polls + 3)
        assert world.done == ["prepare", "settle"] and not settler.settled()  # the source is not ready yet
        world.ready = True
        await _until(settler.settled)
        assert world.done == ["prepare", "settle", "settle"]
        await _until(lambda: world.done.count("settle") == 4)
        assert world.slept[-2:] == [600.0, 600.0]  # then once every refreeze period
        world.ready = False  # a source that is not ready later does not unsettle the heap
        assert settler.settled()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_the_real_passes_freeze_what_lives() -> None:
    before = gc.get_freeze_count()
    kept = [[n] for n in range(1000)]
    # the real collect-and-freeze; the threshold left as the test session has it
    settler = HeapSettler(lambda: True, lambda: True, prepare=lambda: None, sleep=lambda _: asyncio.sleep(3600))
    task = asyncio.create_task(settler.run())
    try:
        await _until(settler.settled)
        assert gc.get_freeze_count() >= before + len(kept)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gc.unfreeze()


@pytest.mark.parametrize("interpreter", [("cpython", (3, 13)), ("pypy", (3, 11))])
async def test_on_an_interpreter_it_was_not_measured_on_the_collector_is_left_alone(
    interpreter: tuple[str, tuple[int, int]], caplog: pytest.LogCaptureFixture
) -> None:
    """The tuning was measured on CPython 3.11: elsewhere nothing is frozen or re-tuned, the log says so once, and
    the replica still settles once its source is ready."""
    world = World()
    world.synced = True
    settler = world.settler(interpreter=interpreter)
    caplog.set_level(logging.INFO, logger="adapter.heap")
    task = asyncio.create_task(settler.run())
    try:
        await _until(lambda: len(world.slept) > 3)
        assert not settler.settled()  # the source is not ready yet
        world.ready = True
        await _until(settler.settled)
        await _until(task.done)
        assert world.done == []
        said = [r.getMessage() for r in caplog.records if r.name == "adapter.heap"]
        assert len(said) == 1 and "measured on CPython 3.11" in said[0] and interpreter[0] in said[0]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
