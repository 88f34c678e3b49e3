"""HeapSettler: when the replica collects and freezes, and when it says it has settled."""

from __future__ import annotations

import asyncio
import gc

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


async def _until(condition, tries: int = 1000) -> None:  # type: ignore[no-untyped-def]
    for _ in range(tries):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


async def test_settles_after_the_pods_and_again_after_the_source_then_every_refreeze() -> None:
    world = World()
    settler = HeapSettler(
        lambda: world.synced,
        lambda: world.ready,
        settle=lambda: world.done.append("settle"),
        prepare=lambda: world.done.append("prepare"),
        sleep=world.sleep,
        refreeze_seconds=600.0,
        poll_seconds=0.2,
    )
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
