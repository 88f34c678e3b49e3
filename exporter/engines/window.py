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
from collections import deque
from collections.abc import Mapping, Sequence

Buckets = tuple[tuple[float, float], ...]  # (upper bound, cumulative count), ascending, ending with +Inf


def quantile(q: float, buckets: Buckets) -> float | None:
    """The q-quantile of observations counted by cumulative `buckets` (Prometheus' histogram_quantile); None when
    there are none."""
    if not buckets or buckets[-1][0] != math.inf:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == math.inf:
                return lower_bound if len(buckets) > 1 else None
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def _delta(new: Buckets, old: Buckets) -> Buckets | None:
    """new - old per bucket; None when the bounds differ or a count fell (a restart)."""
    if len(new) != len(old):
        return None
    out: list[tuple[float, float]] = []
    for (bound, count), (old_bound, old_count) in zip(new, old, strict=True):
        if bound != old_bound or count < old_count:
            return None
        out.append((bound, count - old_count))
    return tuple(out)


def _zero(buckets: Buckets) -> Buckets:
    return tuple((bound, 0.0) for bound, _ in buckets)


class HistogramWindow:
    """One histogram's reads over the last `window` seconds."""

    def __init__(self, window: float, max_points: int) -> None:
        self.window = window
        self._points: deque[tuple[float, Buckets]] = deque(maxlen=max_points)

    def add(self, at: float, buckets: Buckets) -> None:
        points = self._points
        if points and (_delta(buckets, points[-1][1]) is None):  # restarted, or other buckets: start over
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
        delta = _delta(self._points[-1][1], self._points[0][1])
        if delta is None:
            return tuple(None for _ in qs)
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


def combine_buckets(series: Sequence[Mapping[float, float]]) -> Buckets | None:
    """Several series of one histogram (one per engine index or rank) added bucket by bucket: an observation is in
    exactly one of them. None when their bounds differ or a series has no `+Inf` bucket."""
    if not series:
        return None
    bounds = sorted(series[0])
    if not bounds or bounds[-1] != math.inf:
        return None
    for other in series[1:]:
        if sorted(other) != bounds:
            return None
    return tuple((bound, sum(s[bound] for s in series)) for bound in bounds)
