"""The one backoff: exponential growth to a cap, equal jitter within bounds, and the retry schedule on a clock."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolkit.backoff import Backoff, RetrySchedule

backoffs = st.builds(
    lambda initial, span, factor: Backoff(initial, initial * span, factor),
    st.floats(0.001, 100.0),
    st.floats(1.0, 1e4),
    st.floats(1.0, 1e6),
)
draws = st.floats(0.0, 1.0)


@given(backoffs, st.integers(1, 10_000), draws)
def test_a_delay_lies_between_half_the_ceiling_and_the_ceiling(backoff: Backoff, failures: int, draw: float) -> None:
    ceiling = backoff.ceiling(failures)
    delay = backoff.delay(failures, lambda: draw)
    assert backoff.initial <= ceiling <= backoff.maximum
    assert ceiling / 2 <= delay <= ceiling
    assert math.isfinite(delay)


@given(backoffs, st.integers(1, 10_000))
def test_the_ceiling_starts_at_initial_and_never_shrinks(backoff: Backoff, failures: int) -> None:
    assert backoff.ceiling(1) == backoff.initial
    assert backoff.ceiling(failures) <= backoff.ceiling(failures + 1)


@given(st.floats(0.01, 10), st.floats(1, 4), st.integers(1, 40))
def test_the_ceiling_grows_by_the_factor_until_the_maximum(initial: float, factor: float, failures: int) -> None:
    backoff = Backoff(initial, 60.0 if initial <= 60 else initial, factor)
    assert backoff.ceiling(failures) == pytest.approx(min(backoff.maximum, initial * factor ** (failures - 1)))


def test_no_failure_no_wait() -> None:
    assert Backoff().delay(0, lambda: 1.0) == 0.0
    assert Backoff().delay(-3, lambda: 1.0) == 0.0


def test_the_draw_picks_the_point_in_the_jitter_range() -> None:
    backoff = Backoff(initial=1.0, maximum=60.0)
    assert [backoff.delay(n, lambda: 0.0) for n in (1, 2, 3, 7, 8)] == [0.5, 1.0, 2.0, 30.0, 30.0]
    assert [backoff.delay(n, lambda: 1.0) for n in (1, 2, 3, 7, 8)] == [1.0, 2.0, 4.0, 60.0, 60.0]
    assert backoff.delay(2, lambda: 0.5) == 1.5


def test_a_huge_factor_is_capped_not_an_overflow() -> None:
    assert Backoff(1.0, 10.0, 1e300).ceiling(5) == 10.0


@pytest.mark.parametrize(("initial", "maximum", "factor"), [(5, 1, 2), (0, 1, 2), (-1, 1, 2), (1, 2, 0.5)])
def test_nonsense_is_refused(initial: float, maximum: float, factor: float) -> None:
    with pytest.raises(ValueError, match="backoff needs"):
        Backoff(initial, maximum, factor)


@given(backoffs, st.lists(draws, min_size=1, max_size=30), st.floats(0, 1e6))
def test_the_schedule_waits_each_delay_on_the_clock(backoff: Backoff, drawn: list[float], start: float) -> None:
    pending = iter(drawn)
    schedule = RetrySchedule(backoff, lambda: next(pending))
    assert schedule.due(start)
    now = start
    for failures, draw in enumerate(drawn, start=1):
        next_at = schedule.failed(now)
        assert schedule.failures == failures
        assert schedule.delay == backoff.delay(failures, lambda draw=draw: draw)  # type: ignore[misc]
        assert next_at == now + schedule.delay
        if schedule.delay > 0 and now + schedule.delay / 2 < next_at:
            assert not schedule.due(now + schedule.delay / 2)
        assert schedule.due(next_at)
        now = next_at


def test_reset_starts_over() -> None:
    schedule = RetrySchedule(Backoff(initial=1.0, maximum=60.0), lambda: 1.0)
    for _ in range(4):
        schedule.failed(0.0)
    assert schedule.delay == 8.0
    schedule.reset()
    assert schedule.due(0.0) and schedule.failures == 0 and schedule.delay == 0.0
    assert schedule.failed(10.0) == 11.0
