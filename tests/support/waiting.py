"""Waiting for a condition with a deadline: a bound on a behaviour, never a speed measurement."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest


def holds_within(condition: Callable[[], bool], within: float = 10.0, period: float = 0.02) -> bool:
    """Poll `condition` until it holds or `within` seconds pass; whether it holds in the end."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(period)
    return condition()


def wait_for(condition: Callable[[], bool], what: str, timeout: float, period: float = 0.25) -> None:
    """Wait until `condition()` holds (OSError and ValueError count as "not yet"); AssertionError naming `what` after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (OSError, ValueError):
            pass
        time.sleep(period)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


async def eventually(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """On the event loop: wait until `condition()` holds; fail the test naming `what` if it never does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            pytest.fail(f"never happened: {what}")
        await asyncio.sleep(0.02)
