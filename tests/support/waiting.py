"""Waiting for a condition with a deadline: a bound on a behaviour, never a speed measurement.

A deadline for something to happen (a process serving, a scrape arriving) is given as the seconds it needs on a quiet
machine, through `patience`, which stretches it on a busy one: a deadline only bounds a wait that succeeds sooner, so
a generous one costs nothing when the code works, and a tight one fails tests for the neighbours' load.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

import pytest

PATIENCE_VARIABLE = "GPU_PULSE_TEST_PATIENCE"  # a factor for every deadline (stripped from the services' environment)
MOST_STRETCH = 4.0  # the load alone stretches a deadline at most this much


def patience(seconds: float) -> float:
    """`seconds` (enough on an idle machine) stretched by how busy the machine is: by the load average per core
    beyond one (between 1 and MOST_STRETCH), times $GPU_PULSE_TEST_PATIENCE when it is set (a slow CI runner)."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    stretch = min(max(load, 1.0), MOST_STRETCH)
    return seconds * stretch * float(os.environ.get(PATIENCE_VARIABLE) or 1)


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
