"""Durations as Prometheus writes them (toolkit.durations): the report's `--window`, the recording intervals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolkit.durations import format_duration, parse_duration


@given(st.integers(min_value=1, max_value=10**8))
def test_a_duration_reads_back(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "7", "d", "7 days", "-1h", "0s", "1.5h", "7dd"])
def test_a_bad_duration_says_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="a duration such as 7d"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("2m", 120), ("5m", 300), ("1h30m", 5400), ("7d", 604_800), ("2w", 1_209_600)]
)
def test_durations_read_as_prometheus_writes_them(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds
