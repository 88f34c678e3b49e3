"""Percentiles from histogram bucket deltas over the window, and counter totals, through engine restarts."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.engines.window import BucketLayout, Buckets, CounterTotal, HistogramWindow, bucket_layout, quantile

BOUNDS = (0.1, 0.5, 1.0, 2.5, math.inf)


def cumulative(counts: list[int]) -> Buckets:
    return Buckets(BOUNDS, tuple(float(c) for c in itertools.accumulate(counts)))


def test_quantile_interpolates_inside_the_bucket_as_histogram_quantile_does() -> None:
    # 10 observations in (0, 0.1], 10 in (0.1, 0.5]: the median is the top of the first bucket, p75 halfway up the next
    buckets = cumulative([10, 10, 0, 0, 0])
    assert quantile(0.5, buckets) == 0.1
    assert quantile(0.75, buckets) == pytest.approx(0.3)
    assert quantile(0.5, cumulative([0, 0, 0, 0, 0])) is None


def test_a_quantile_in_the_inf_bucket_is_the_highest_finite_bound() -> None:
    assert quantile(0.99, cumulative([1, 0, 0, 0, 9])) == 2.5


def test_percentiles_cover_only_the_window_not_the_engines_life() -> None:
    window = HistogramWindow(window=10.0, max_points=20)
    window.add(0.0, cumulative([1000, 0, 0, 0, 0]))  # a long, fast past
    window.add(5.0, cumulative([1000, 0, 0, 0, 0]))
    window.add(12.0, cumulative([1000, 0, 0, 10, 0]))  # the last window: only slow requests
    p50, p99 = window.quantiles((0.5, 0.99))
    assert p50 is not None and 1.0 < p50 <= 2.5
    assert p99 is not None and p99 <= 2.5


def test_an_engine_restart_starts_the_window_over_from_zero() -> None:
    window = HistogramWindow(window=60.0, max_points=100)
    window.add(0.0, cumulative([100, 100, 0, 0, 0]))
    window.add(1.0, cumulative([0, 0, 3, 0, 0]))  # counts fell: restarted, 3 slow observations since
    (p50,) = window.quantiles((0.5,))
    assert p50 is not None and 0.5 < p50 <= 1.0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=40))
def test_a_counter_total_never_falls_and_counts_every_increase(values: list[float]) -> None:
    counter = CounterTotal(window=60.0, max_points=100)
    totals = []
    expected = 0.0
    for i, value in enumerate(values):
        counter.add(float(i), value)
        if i:
            previous = values[i - 1]
            expected += value - previous if value >= previous else value
        totals.append(counter.total)
    assert all(b >= a for a, b in itertools.pairwise(totals))
    assert math.isclose(counter.total, expected, rel_tol=1e-9, abs_tol=1e-6)


def test_a_counter_rate_is_over_the_window() -> None:
    counter = CounterTotal(window=10.0, max_points=100)
    for t in range(0, 21):
        counter.add(float(t), 5.0 * t)
    assert counter.rate() == 5.0
    assert counter.span() == 10.0


def bucket_labels(series: str, le: str) -> tuple[tuple[str, str], ...]:
    return (("engine", series), ("le", le))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 3),
    st.lists(st.lists(st.integers(0, 50), min_size=len(BOUNDS), max_size=len(BOUNDS)), min_size=3, max_size=3),
    st.randoms(use_true_random=False),
)
def test_a_layout_adds_the_series_bucket_by_bucket_in_any_order_served(
    n: int, counts: list[list[int]], random: object
) -> None:
    """Several series of one histogram served in any order add up per bound, as Prometheus' sum by (le) would."""
    series = [list(itertools.accumulate(c)) for c in counts[:n]]
    samples = [
        (bucket_labels(str(s), "+Inf" if b == math.inf else repr(b)), float(v))
        for s, cumulative_counts in enumerate(series)
        for b, v in zip(BOUNDS, cumulative_counts, strict=True)
    ]
    random.shuffle(samples)  # type: ignore[attr-defined]
    layout = bucket_layout([labels for labels, _ in samples])
    assert isinstance(layout, BucketLayout)
    expected = tuple(float(sum(s[i] for s in series)) for i in range(len(BOUNDS)))
    assert layout.combine([value for _, value in samples]) == Buckets(BOUNDS, expected)


@pytest.mark.parametrize(
    ("labels", "reason"),
    [
        ([bucket_labels("0", "0.1"), bucket_labels("0", "x"), bucket_labels("0", "+Inf")], "not a number"),
        ([bucket_labels("0", "0.1"), bucket_labels("0", "0.5")], "+Inf"),
        ([bucket_labels("0", "0.1"), bucket_labels("0", "+Inf"), bucket_labels("1", "+Inf")], "share"),
        ([(("engine", "0"),)], "not a number"),  # no le at all
        ([], "no buckets"),
    ],
)
def test_a_layout_refuses_buckets_that_are_not_one_histogram(
    labels: list[tuple[tuple[str, str], ...]], reason: str
) -> None:
    got = bucket_layout(labels)
    assert isinstance(got, str) and reason in got
