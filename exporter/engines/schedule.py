"""When the engine reader starts its next cycle: just before the poll loop's next cycle takes the figures.

The engine reader and the poll loop run on threads of their own. Left to their own grids, a figure an engine shows just
after a read waits one engine interval for the next read and up to one poll interval more for the cycle that publishes
it to `/pods` (and so to the adapter): two intervals, 2 s with the defaults, before the network and the adapter add
theirs. Phased so that each read ends just before a poll cycle begins, the wait is one engine interval plus the read's
own time (the `lead`), and the poll loop still never waits for an engine.

Plain arithmetic on the monotonic clock, so the reader's thread and the tests share it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

# the least and the most of a poll interval a read is started ahead of the poll cycle it feeds
SMALLEST_LEAD = 0.05
_ROUNDING = 1e-9  # of a poll interval
LEAD_MARGIN = 1.5  # the slowest recent cycle's duration times this, plus SMALLEST_LEAD


@dataclass(frozen=True)
class PollTicks:
    """The poll loop's grid: its next cycle starts at `next_at` (monotonic seconds), then every `interval`."""

    next_at: float
    interval: float


def lead(recent_cycles: Iterable[float], timeout: float) -> float:
    """How long before a poll cycle the read that feeds it starts: the slowest of the recent cycles' durations with a
    margin, never less than SMALLEST_LEAD, and never more than a read may take (`timeout`) plus SMALLEST_LEAD."""
    slowest = max(recent_cycles, default=0.0)
    return min(max(SMALLEST_LEAD, LEAD_MARGIN * slowest + SMALLEST_LEAD), timeout + SMALLEST_LEAD)


def next_start(previous: float, interval: float, now: float, ticks: PollTicks | None, ahead: float) -> float:
    """The start of the engine cycle after the one that started at `previous`, with `interval` between two reads.

    Without the poll loop's ticks (it is not running yet), the reader keeps its own grid: `previous + interval`, or
    `now` when that is past. With them, the start is the first `tick - ahead` on the poll grid that is neither in the
    past nor sooner than `interval` after `previous` (less half a poll interval, for rounding: with equal intervals each
    poll cycle gets a fresh read). An engine interval shorter than the poll interval thus reads once per poll cycle: a
    read more often would never be published.
    """
    if ticks is None:
        return max(previous + interval, now)
    earliest = max(now, previous + interval - ticks.interval / 2)
    first = ticks.next_at - ahead
    steps = math.ceil((earliest - first) / ticks.interval - _ROUNDING)  # a tick a rounding error early still counts
    return max(first + steps * ticks.interval, now)
