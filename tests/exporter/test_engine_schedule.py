"""The engine reader's phase (exporter.engines.schedule): each read ends just before the poll cycle that publishes it,
so a figure waits one engine interval and a read, not an engine interval and a poll interval more."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from exporter.catalogue import Dialect
from exporter.engines.schedule import SMALLEST_LEAD, PollTicks, lead, next_start
from exporter.exposition import ExpositionRenderer
from exporter.loop import PollLoop
from tests.support.snapshots import simulated_node
from tests.support.waiting import holds_within, patience

seconds = st.floats(min_value=0.0, max_value=10_000.0, allow_nan=False)
intervals = st.floats(min_value=0.1, max_value=60.0, allow_nan=False)
leads = st.floats(min_value=SMALLEST_LEAD, max_value=2.05, allow_nan=False)


def test_without_the_poll_loop_the_reader_keeps_its_own_grid() -> None:
    assert next_start(10.0, 1.0, 10.3, None, 0.2) == 11.0
    assert next_start(10.0, 1.0, 12.5, None, 0.2) == 12.5  # overran: at once


def test_with_equal_intervals_each_read_ends_just_before_the_next_poll_cycle() -> None:
    # the poll loop's cycles at 100, 101, 102 ...; a read takes 0.1 s, started 0.2 s ahead
    ticks = PollTicks(next_at=101.0, interval=1.0)
    assert next_start(99.4, 1.0, 99.5, ticks, 0.2) == 100.8
    assert next_start(100.8, 1.0, 100.9, ticks, 0.2) == 101.8  # the next tick's read, not this one's again
    # a reader started off phase moves onto it at once, never reading less often than its interval asks
    assert next_start(100.1, 1.0, 100.2, PollTicks(101.0, 1.0), 0.2) == 100.8


def test_a_longer_engine_interval_reads_before_every_nth_poll_cycle() -> None:
    assert next_start(100.8, 5.0, 100.9, PollTicks(101.0, 1.0), 0.2) == 105.8


def test_a_shorter_engine_interval_reads_once_per_poll_cycle() -> None:
    # read more often, a figure would never be published
    assert next_start(100.8, 0.25, 100.9, PollTicks(101.0, 1.0), 0.2) == 101.8


@given(previous=seconds, interval=intervals, after=seconds, poll=intervals, phase=seconds, ahead=leads)
def test_the_start_is_on_the_poll_grid_never_past_and_never_sooner_than_the_interval_allows(
    previous: float, interval: float, after: float, poll: float, phase: float, ahead: float
) -> None:
    now = previous + after
    ticks = PollTicks(next_at=now + (phase % poll), interval=poll)
    start = next_start(previous, interval, now, ticks, ahead)
    assert start >= now
    assert start >= previous + interval - poll / 2 - 1e-6
    offset = (start + ahead - ticks.next_at) / poll  # a whole number of poll intervals from a tick (or now)
    assert math.isclose(offset, round(offset), abs_tol=1e-6) or start == now
    # and the first such: one poll interval sooner would break one of the two
    sooner = start - poll
    assert sooner < now + 1e-6 or sooner < previous + interval - poll / 2 + 1e-6


@given(st.lists(st.floats(min_value=0.0, max_value=30.0, allow_nan=False), max_size=8), st.floats(0.1, 2.0))
def test_the_lead_covers_the_slowest_recent_read_and_is_bounded_by_the_read_timeout(
    durations: list[float], timeout: float
) -> None:
    ahead = lead(durations, timeout)
    assert SMALLEST_LEAD <= ahead <= timeout + SMALLEST_LEAD
    assert ahead >= min(max(durations, default=0.0), timeout)


def test_the_poll_loop_says_when_its_next_cycle_starts_while_it_runs() -> None:
    with simulated_node("h100x8") as node:
        loop = PollLoop(node.collector, ExpositionRenderer(Dialect.DCGM), interval=0.2, node="sim-node")
        assert loop.ticks() is None  # not running: the reader keeps its own grid
        published = threading.Event()
        loop.on_publish(published.set)
        loop.start()
        try:
            assert published.wait(30)
            assert wait_until(lambda: loop.ticks() is not None)
            ticks = loop.ticks()
            assert ticks is not None and ticks.interval == 0.2
            # the next cycle is due within one interval (it may be running late on a loaded machine, never early)
            assert ticks.next_at <= time.monotonic() + 0.2 + 1e-6
            first = ticks.next_at
            assert wait_until(lambda: (t := loop.ticks()) is not None and t.next_at > first)
            later = loop.ticks()
            assert later is not None
            steps = (later.next_at - first) / 0.2  # on the grid: a whole number of intervals on
            assert math.isclose(steps, round(steps), abs_tol=1e-6) and round(steps) >= 1
        finally:
            loop.stop()
        assert loop.ticks() is None


def wait_until(condition: Callable[[], bool]) -> bool:
    return holds_within(condition, within=patience(30))
