"""What an engine's cumulative series mean over a window: latency percentiles from histogram bucket deltas, and
totals and rates from counters, through counter resets and engine restarts.

A histogram's buckets count every observation since the engine started; a percentile over them describes the whole
life of the process, not the last minute. So each read's buckets are kept for `window` seconds and the percentile is
taken over the difference between the newest and the oldest read, as Prometheus' `histogram_quantile(q,
rate(x_bucket[w]))` does (linear interpolation inside the bucket; the upper bound of the highest finite bucket when the
quantile falls in `+Inf`). A count that falls means the engine restarted and counts from zero again: what it counted
since then happened after the previous read, so the window starts over from a zero reading at the previous read's
time. Counters are accumulated the same way into totals of the exporter's own, which never fall.
"""

from __future__ import annotations

import math
import operator
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from toolkit.textparse import Labels, parse_value


class Buckets(NamedTuple):
    """One histogram at one read: its upper bounds (ascending, ending with +Inf) and the cumulative count of each."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]


def quantile(q: float, buckets: Buckets) -> float | None:
    """The q-quantile of observations counted by cumulative `buckets` (Prometheus' histogram_quantile); None when
    there are none."""
    bounds, counts = buckets
    if not bounds or bounds[-1] != math.inf:
        return None
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == math.inf:
                return lower_bound if len(bounds) > 1 else None
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def _continues(new: Buckets, old: Buckets) -> bool:
    """Whether `new` can follow `old`: the same bounds, and no count fell (one that fell means a restart)."""
    return new.bounds == old.bounds and all(map(operator.ge, new.counts, old.counts))


def _zero(buckets: Buckets) -> Buckets:
    return Buckets(buckets.bounds, (0.0,) * len(buckets.bounds))


class HistogramWindow:
    """One histogram's reads over the last `window` seconds."""

    def __init__(self, window: float, max_points: int) -> None:
        self.window = window
        self._points: deque[tuple[float, Buckets]] = deque(maxlen=max_points)

    def add(self, at: float, buckets: Buckets) -> None:
        points = self._points
        if points and not _continues(buckets, points[-1][1]):  # restarted, or other buckets: start over
            previous = points[-1][0]
            points.clear()
            points.append((previous, _zero(buckets)))
        points.append((at, buckets))
        while len(points) > 1 and points[0][0] < at - self.window:
            points.popleft()

    def quantiles(self, qs: Sequence[float]) -> tuple[float | None, ...]:
        """The quantiles of what was observed between the oldest and newest read; Nones with fewer than two reads
        or no observation between them."""
        if len(self._points) < 2:
            return tuple(None for _ in qs)
        newest, oldest = self._points[-1][1], self._points[0][1]
        if not _continues(newest, oldest):
            return tuple(None for _ in qs)
        delta = Buckets(newest.bounds, tuple(map(operator.sub, newest.counts, oldest.counts)))
        return tuple(quantile(q, delta) for q in qs)

    def span(self) -> float:
        return self._points[-1][0] - self._points[0][0] if len(self._points) > 1 else 0.0


class CounterTotal:
    """An engine counter accumulated into a total that never falls (a reset adds the new count from zero), with its
    rate over the last `window` seconds."""

    def __init__(self, window: float, max_points: int) -> None:
        self.window = window
        self.total = 0.0
        self._last: float | None = None
        self._points: deque[tuple[float, float]] = deque(maxlen=max_points)

    def add(self, at: float, value: float) -> None:
        last = self._last
        if last is not None:
            self.total += value - last if value >= last else value  # fell: the engine restarted and counts from 0
        self._last = value
        self._points.append((at, self.total))
        while len(self._points) > 1 and self._points[0][0] < at - self.window:
            self._points.popleft()

    def rate(self) -> float | None:
        """Per second between the oldest and the newest read; None with fewer than two."""
        if len(self._points) < 2:
            return None
        (t0, v0), (t1, v1) = self._points[0], self._points[-1]
        return (v1 - v0) / (t1 - t0) if t1 > t0 else None

    def span(self) -> float:
        return self._points[-1][0] - self._points[0][0] if len(self._points) > 1 else 0.0


def _bucket(labels: Labels) -> tuple[Labels, float]:
    """A bucket sample's series (its labels but `le`) and its bound (NaN when `le` is missing or not a number)."""
    le = next((value for name, value in labels if name == "le"), None)
    try:
        bound = parse_value(le) if le is not None else math.nan
    except ValueError:
        bound = math.nan
    return tuple(p for p in labels if p[0] != "le"), bound


@dataclass(frozen=True, slots=True)
class BucketLayout:
    """How the bucket samples of one read, in the order the engine served them, add up into one histogram: several
    series of it (one per engine index or rank) are added bucket by bucket, an observation being in exactly one of
    them. An engine serves the same label sets in the same order read after read, so a layout is made once and
    applied to each read's values."""

    bounds: tuple[float, ...]
    sources: tuple[tuple[int, ...], ...]  # for each bound, the indices of the samples counted into it

    def combine(self, values: Sequence[float]) -> Buckets:
        return Buckets(self.bounds, tuple([sum([values[i] for i in indices]) for indices in self.sources]))


def bucket_layout(labels: Sequence[Labels]) -> BucketLayout | str:
    """The layout of bucket samples with these label sets (their `le` and the rest); a reason instead when a bound is
    not a number, a series has no `+Inf` bucket or the series do not share their bounds. A label set served twice
    counts once: the later sample."""
    series: dict[Labels, dict[float, int]] = {}
    for index, pairs in enumerate(labels):
        key, bound = _bucket(pairs)
        if math.isnan(bound):
            return "has a bucket whose le is not a number"
        series.setdefault(key, {})[bound] = index
    if not series:
        return "has no buckets"
    first, *others = series.values()
    bounds = tuple(sorted(first))
    if bounds[-1] != math.inf:
        return "has no +Inf bucket"
    if any(tuple(sorted(other)) != bounds for other in others):
        return "has series that do not share their buckets"
    return BucketLayout(bounds, tuple(tuple(one[bound] for one in series.values()) for bound in bounds))
