"""Activity with hysteresis (adapter/keda/activity.py): the rules, and for any sequence of observations the state
changes only when the observations earned it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.keda.activity import UNKNOWN_STATE, ActivityState, Hysteresis, Observation

BUSY, QUIET, NO_PODS, UNKNOWN = Observation.BUSY, Observation.QUIET, Observation.NO_PODS, Observation.UNKNOWN


def run(hysteresis: Hysteresis, steps: list[tuple[float, Observation]]) -> list[bool | None]:
    state, now, seen = UNKNOWN_STATE, 0.0, []
    for seconds, observation in steps:
        now += seconds
        state = hysteresis.step(state, observation, now)
        seen.append(state.active)
    return seen


def test_first_observations() -> None:
    rules = Hysteresis(activate_after=10, deactivate_after=30)
    assert rules.step(UNKNOWN_STATE, BUSY, 0).active is True  # busy, however long: active
    assert rules.step(UNKNOWN_STATE, QUIET, 0).active is True  # quiet, for how long is not known: active for now
    assert rules.step(UNKNOWN_STATE, NO_PODS, 0).active is False  # nothing runs
    assert rules.step(UNKNOWN_STATE, UNKNOWN, 0).active is None


def test_quiet_for_deactivate_after_makes_inactive_and_busy_for_activate_after_active() -> None:
    rules = Hysteresis(activate_after=5, deactivate_after=30)
    steps = [(0, BUSY), (10, QUIET), (29, QUIET), (1, QUIET), (1, BUSY), (4, BUSY), (1, BUSY)]
    assert run(rules, steps) == [True, True, True, False, False, False, True]


def test_a_busy_moment_restarts_the_quiet_countdown_and_unknown_restarts_both() -> None:
    rules = Hysteresis(activate_after=0, deactivate_after=30)
    steps = [(0, QUIET), (20, QUIET), (1, BUSY), (1, QUIET), (29, QUIET), (1, QUIET)]
    assert run(rules, steps) == [True, True, True, True, True, False]
    steps = [(0, QUIET), (20, UNKNOWN), (15, QUIET), (29, QUIET), (1, QUIET)]
    assert run(rules, steps) == [True, True, True, True, False]


def test_no_pods_counts_as_quiet() -> None:
    rules = Hysteresis(activate_after=0, deactivate_after=30)
    assert run(rules, [(0, BUSY), (1, NO_PODS), (29, NO_PODS), (1, QUIET)]) == [True, True, True, False]


def test_nothing_waiting_at_a_gateway_is_inactive_at_first_sight() -> None:
    """A demand trigger's first reading of an empty queue is inactive (a workload at zero stays there), unlike quiet
    pods, which are active until they have been quiet long enough."""
    rules = Hysteresis(activate_after=0, deactivate_after=30)
    waiting = Observation.NOTHING_WAITING
    assert run(rules, [(0, waiting), (1, BUSY), (1, waiting), (29, waiting), (1, waiting)]) == [
        False,
        True,
        True,
        True,
        False,
    ]


def test_negative_delays_are_refused() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        Hysteresis(activate_after=-1)


_steps = st.lists(st.tuples(st.floats(0, 20, allow_nan=False), st.sampled_from(list(Observation))), max_size=60)


@given(st.floats(0, 30, allow_nan=False), st.floats(0, 60, allow_nan=False), _steps)
def test_changes_are_earned(
    activate_after: float, deactivate_after: float, steps: list[tuple[float, Observation]]
) -> None:
    """A change to inactive follows an unbroken quiet run of deactivate_after seconds; a change to active an unbroken
    busy run of activate_after seconds; an unknown observation changes nothing."""
    rules = Hysteresis(activate_after, deactivate_after)
    state: ActivityState = UNKNOWN_STATE
    now = 0.0
    run_start: float | None = None  # start of the current unbroken run of the current kind
    run_kind: str | None = None
    for seconds, observation in steps:
        now += seconds
        kind = {BUSY: "busy", QUIET: "quiet", NO_PODS: "quiet", Observation.NOTHING_WAITING: "quiet", UNKNOWN: None}[
            observation
        ]
        if kind != run_kind or kind is None:
            run_start, run_kind = (now if kind else None), kind
        after = rules.step(state, observation, now)
        if observation is UNKNOWN:
            assert after.active == state.active
        elif state.active is True and after.active is False:
            assert run_kind == "quiet" and run_start is not None and now - run_start >= deactivate_after
        elif state.active is False and after.active is True:
            assert run_kind == "busy" and run_start is not None and now - run_start >= activate_after
        if state.active is not None:
            assert after.active is not None, "a known state never becomes unknown"
        if run_kind == "quiet" and run_start is not None and now - run_start >= deactivate_after:
            assert after.active is False, "quiet long enough: inactive"
        state = after
