"""The alerts' test of clock-event reason bits in the dcgm dialect's bitmask: a mask has a run of adjacent bits set
exactly when its remainder by twice the run's highest bit is at least its lowest, so the rule's runs say "any of these
reasons active" as the bit-by-bit test did, for every mask and every set of reasons."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.catalogue import CLOCK_EVENT_REASONS
from rules.gpu_health import _bit_runs

REASONS = sorted(CLOCK_EVENT_REASONS)


@given(
    st.lists(st.sampled_from(REASONS), min_size=1, unique=True),
    st.integers(min_value=0, max_value=2 * max(CLOCK_EVENT_REASONS.values()) - 1),
)
def test_a_mask_has_a_reason_of_the_set_exactly_when_a_run_says_so(reasons: list[str], mask: int) -> None:
    runs = _bit_runs(tuple(reasons))
    by_runs = any(mask % (2 * high) >= low for low, high in runs)
    assert by_runs == any(mask & CLOCK_EVENT_REASONS[reason] for reason in reasons)
    bits = sorted(CLOCK_EVENT_REASONS[reason] for reason in reasons)
    assert sum(high.bit_length() - low.bit_length() + 1 for low, high in runs) == len(bits)


def test_adjacent_reasons_are_one_run_and_apart_ones_two() -> None:
    assert _bit_runs(("sw_thermal_slowdown", "hw_thermal_slowdown")) == [(32, 64)]
    assert _bit_runs(("hw_slowdown", "hw_power_brake_slowdown")) == [(8, 8), (128, 128)]
