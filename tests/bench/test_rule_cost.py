"""bench/rule_cost.py: the rule groups' figures read from Prometheus' /metrics and the budget they are held to."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from rule_cost import GroupCost, RuleGroupSampler, cost_table, parse_rule_group_metrics, record, within_budget

FILE = "/etc/prometheus/rules/gpu-pulse.rules.yaml"


def exposition(group: str, interval: float, duration: float, ran: float, missed: float = 0, samples: float = 0) -> str:
    """The lines Prometheus 2.42 writes for one rule group (as read from a running server), and an unrelated one."""
    label = f'{{rule_group="{FILE};{group}"}}'
    return "\n".join(
        [
            "# HELP prometheus_rule_group_last_duration_seconds The duration of the last rule group evaluation.",
            "# TYPE prometheus_rule_group_last_duration_seconds gauge",
            f"prometheus_rule_group_interval_seconds{label} {interval:g}",
            f"prometheus_rule_group_iterations_missed_total{label} {missed:g}",
            f"prometheus_rule_group_iterations_total{label} 12",
            f"prometheus_rule_group_last_duration_seconds{label} {duration!r}",
            f"prometheus_rule_group_last_evaluation_samples{label} {samples:g}",
            f"prometheus_rule_group_last_evaluation_timestamp_seconds{label} {ran!r}",
            f"prometheus_rule_group_rules{label} 19",
            'prometheus_http_requests_total{code="200",handler="/metrics"} 3',
        ]
    )


def test_every_figure_of_a_group_is_read() -> None:
    parsed = parse_rule_group_metrics(exposition("gpu-pulse.pod.rules", 60, 1.5e-05, 1.8e9, missed=2, samples=183300))
    figures = parsed["gpu-pulse.pod.rules"]
    assert figures["prometheus_rule_group_interval_seconds"] == 60
    assert figures["prometheus_rule_group_last_duration_seconds"] == 1.5e-05
    assert figures["prometheus_rule_group_iterations_missed_total"] == 2
    assert figures["prometheus_rule_group_last_evaluation_samples"] == 183300
    assert list(parsed) == ["gpu-pulse.pod.rules"]


@given(st.lists(st.floats(min_value=0.001, max_value=100, allow_nan=False), min_size=1, max_size=8))
def test_each_evaluation_is_counted_once_however_often_it_is_read(durations: list[float]) -> None:
    costs: dict[str, GroupCost] = {}
    for n, duration in enumerate(durations):
        text = exposition("g", 30, duration, 1000.0 + 30 * n)
        record(costs, parse_rule_group_metrics(text))
        record(costs, parse_rule_group_metrics(text))  # read twice before the next evaluation
    cost = costs["g"]
    assert len(cost.evaluations) == len(durations)
    assert cost.worst == max(durations)
    assert abs(cost.share - sum(durations) / len(durations) / 30) < 1e-9


def test_a_group_that_has_not_run_has_no_evaluation() -> None:
    costs: dict[str, GroupCost] = {}
    record(costs, parse_rule_group_metrics(exposition("g", 60, 0, 0)))
    assert costs["g"].evaluations == {}
    assert costs["g"].within_budget


def test_the_budget_is_a_tenth_of_the_interval_no_missed_iteration_and_a_quarter_core_in_all() -> None:
    def costs_of(*groups: tuple[str, float, float, float]) -> list[GroupCost]:
        costs: dict[str, GroupCost] = {}
        for name, interval, duration, _ in groups:
            record(costs, parse_rule_group_metrics(exposition(name, interval, duration, 100.0)))
        for name, interval, duration, missed in groups:  # the second reading: missed iterations since the first
            record(costs, parse_rule_group_metrics(exposition(name, interval, duration, 100.0, missed=missed)))
        return list(costs.values())

    assert within_budget(costs_of(("a", 30, 2.9, 0), ("b", 60, 5.9, 0)))
    assert not within_budget(costs_of(("a", 30, 3.1, 0)))
    assert not within_budget(costs_of(("a", 30, 1.0, 1)))
    # each within its tenth, together 0.29 of an interval
    assert not within_budget(costs_of(("a", 30, 2.9, 0), ("b", 30, 2.9, 0), ("c", 30, 2.9, 0)))
    # the same groups whose waits for a core made the sum: the CPU they add decides when it is known
    assert within_budget(costs_of(("a", 30, 2.9, 0), ("b", 30, 2.9, 0), ("c", 30, 2.9, 0)), rules_cpu=0.2)
    assert not within_budget(costs_of(("a", 30, 1.0, 0)), rules_cpu=0.3)
    assert not within_budget(costs_of(("a", 30, 3.1, 0)), rules_cpu=0.1)
    table = cost_table(costs_of(("a", 30, 3.1, 0)), 60)
    assert "NO" in table.splitlines()[3]
    lines = cost_table(costs_of(("a", 30, 2.9, 0), ("b", 30, 2.9, 0), ("c", 30, 2.9, 0)), 60, rules_cpu=0.2)
    shares, cpu = lines.splitlines()[-2:]
    assert shares.endswith("(bound)") and cpu.startswith("all groups, CPU they add") and cpu.endswith("yes")


def test_the_sampler_reads_until_stopped_and_survives_a_failed_read() -> None:
    readings: Iterator[str | OSError] = iter(
        [exposition("g", 30, 1.0, 100.0), OSError("refused"), exposition("g", 30, 2.0, 130.0)]
    )

    def read() -> str:
        reading = next(readings, exposition("g", 30, 2.0, 130.0))
        if isinstance(reading, OSError):
            raise reading
        return reading

    sampler = RuleGroupSampler(read, period=0.01)
    sampler.start()
    for _ in range(1000):  # the thread reads every 10 ms; a bound so that a broken sampler fails instead of hanging
        if sampler.errors and len(sampler.costs["g"].evaluations) == 2:
            break
        time.sleep(0.01)
    (cost,) = sampler.stop()
    assert sorted(cost.evaluations.values()) == [1.0, 2.0]
    assert sampler.errors == 1
