"""bench/panel_queries.py: the step, built-ins and variable values Grafana would send, and how the timings are read."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.support.dashboard_queries import substitute

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from panel_queries import (
    PINNED,
    Query,
    Timing,
    aligned,
    built_ins,
    engine_times,
    grafana_step,
    min_step,
    opening_values,
    over_limit,
    slowest_table,
)


def test_the_step_of_a_wide_panel_is_the_scrape_interval_up_to_four_hours() -> None:
    assert [grafana_step(hours * 3600) for hours in (1, 3, 4)] == [15, 15, 15]


def test_a_longer_range_rounds_to_a_nice_interval() -> None:
    assert grafana_step(6 * 3600) == 20  # 21.6 s
    assert grafana_step(12 * 3600) == 30  # 43.2 s: nearer 30 s than 60 s
    assert grafana_step(24 * 3600) == 60  # 86.4 s
    assert grafana_step(7 * 86400) == 600  # 604.8 s
    assert grafana_step(2000 * 86400) == 2 * 86400  # beyond a day: whole days


def test_a_narrow_panel_gets_a_coarser_step() -> None:
    assert grafana_step(3600, data_points=100) == 30  # 36 s
    assert grafana_step(3600, data_points=100, scrape_s=60) == 60


def test_a_panel_min_interval_is_its_least_step() -> None:
    assert [min_step(v) for v in (None, "", "30s", "1m", "2h")] == [15, 15, 30, 60, 7200]
    assert grafana_step(3600, scrape_s=min_step("1m")) == 60
    assert grafana_step(24 * 3600, scrape_s=min_step("30s")) == 60  # the rounded interval is coarser already


def test_only_the_node_boards_are_timed_for_one_value() -> None:
    """Every other board is timed on `All`, as it opens (the namespace board included)."""
    assert set(PINNED) == {"gpu-pulse-node-dcgm", "gpu-pulse-node-prometheus"}


def test_rate_interval_is_four_scrapes_or_one_step_and_a_scrape() -> None:
    assert built_ins(3600, 15) == {
        "__interval": "15s",
        "__rate_interval": "60s",
        "__range": "3600s",
        "__range_s": "3600",
    }
    assert built_ins(86400, 60)["__rate_interval"] == "75s"


def test_the_range_is_aligned_to_the_step() -> None:
    start, end = aligned(1_700_000_007.9, 3600, 15)
    assert (start % 15, end % 15, end - start, end) == (0, 0, 3600, 1_699_999_995)


def test_variables_take_the_value_the_board_opens_on() -> None:
    variables = [
        {"name": "cluster", "allValue": ".*"},
        {"name": "job", "current": {"value": "gpu-pulse-exporter"}, "allValue": ".*"},
        {"name": "node", "allValue": ".*"},
        {"name": "gpu", "current": {"value": "$__all"}, "allValue": ".*"},
    ]
    answers = {"node": ["gpu-0001", "gpu-0000"], "gpu": ["0", "1"]}
    values = opening_values(variables, answers, frozenset({"node"}))
    assert values == {"cluster": ".*", "job": "gpu-pulse-exporter", "node": "gpu-0000", "gpu": ".*"}
    expr = 'rate(x{job=~"$job", node=~"$node", gpu=~"${gpu}"}[$__rate_interval]) * $__range_s, "$1"'
    assert substitute(expr, set(values), built_ins(3600, 15), values) == (
        'rate(x{job=~"gpu-pulse-exporter", node=~"gpu-0000", gpu=~".*"}[60s]) * 3600, "$1"'
    )


def test_a_pinned_variable_without_answers_is_all() -> None:
    assert opening_values([{"name": "node", "allValue": ".*"}], {}, frozenset({"node"})) == {"node": ".*"}


def test_a_variable_not_pinned_is_all_whatever_its_answers() -> None:
    assert opening_values([{"name": "node", "allValue": ".*"}], {"node": ["gpu-0000"]}) == {"node": ".*"}


@given(st.text(alphabet=st.characters(blacklist_characters="$")))
def test_text_without_a_variable_is_left_as_it_is(text: str) -> None:
    assert substitute(text, {"node"}, built_ins(3600, 15), {"node": "a"}) == text


def _timing(title: str, expr: str, kind: str, wall: list[float]) -> Timing:
    return Timing(Query("gpu-pulse-x", title, expr, kind), wall=wall)


def test_prometheus_own_time_is_matched_on_expression_and_kind_and_rules_are_left_out() -> None:
    ranged, instant = _timing("a", "up", "range", [0.1]), _timing("b", "up", "instant", [0.1])

    def entry(step: int | None, seconds: float, rule: bool = False) -> dict[str, object]:
        params: dict[str, object] = {"query": "up"} | ({"step": step} if step else {})
        return {"params": params, "stats": {"timings": {"execTotalTime": seconds}}} | (
            {"ruleGroup": {"name": "g"}} if rule else {}
        )

    engine_times(
        iter([entry(15, 0.5), entry(None, 0.2), entry(None, 9.0, rule=True), entry(15, 0.7)]), [ranged, instant]
    )
    assert (ranged.engine, instant.engine) == ([0.5, 0.7], [0.2])


def test_over_the_limit_are_the_slow_the_failed_and_the_unanswered() -> None:
    fast = _timing("fast", "a", "range", [0.1] * 5)
    slow = _timing("slow", "b", "range", [0.1] * 4 + [2.5])
    failed = _timing("failed", "c", "range", [0.1])
    failed.failure = "HTTP 422"
    unanswered = _timing("unanswered", "d", "range", [])
    assert over_limit([fast, slow, failed, unanswered]) == [slow, failed, unanswered]


def test_the_slowest_come_first() -> None:
    timings = [_timing(f"t{i}", f"q{i}", "range", [i / 10]) for i in range(12)]
    rows = slowest_table(timings, shown=3).splitlines()
    assert len(rows) == 4
    assert [row.split("/ ")[1].split(" (")[0] for row in rows[1:]] == ["t11", "t10", "t9"]
