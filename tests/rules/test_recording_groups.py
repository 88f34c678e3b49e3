"""The device and pod levels split into groups by what their series are for: every rule kept, in order, in one group
of its level, each group at its interval, and no rule reading what another group of its level records (it would read
it as of that group's last evaluation)."""

from __future__ import annotations

import pytest

from adapter.metrics_config import default_metrics_config
from exporter.catalogue import Dialect
from rules.dialect import Vocabulary
from rules.generate import alerts
from rules.inference import inference_rules
from rules.model import Recording
from rules.promql import metric_names
from rules.recording import (
    ACCOUNTING_INTERVAL,
    DEVICE_PARTS,
    INTERVAL,
    POD_PARTS,
    Part,
    recording_groups,
    recording_intervals,
    split_by_family,
)

POWER = (Part("memory-power", "2m", ("power",)),)


def _rule(record: str, expr: str) -> Recording:
    return Recording(record, expr, "test rule", ())


def test_a_rule_reading_another_groups_record_is_refused() -> None:
    rules = (
        _rule("node_gpu:nvidia_gpu_power_watts:max", "max by (node) (power)"),
        _rule("node:nvidia_gpu_up:sum", "sum by (node) (node_gpu:nvidia_gpu_power_watts:max)"),
    )
    with pytest.raises(ValueError, match="node:nvidia_gpu_up:sum reads"):
        split_by_family("gpu-pulse.device.rules", rules, POWER)


def test_an_empty_group_is_refused() -> None:
    rules = (_rule("node_gpu:nvidia_gpu_up:max", "max by (node) (up)"),)
    with pytest.raises(ValueError, match=r"gpu-pulse\.device\.memory-power\.rules would have no rule"):
        split_by_family("gpu-pulse.device.rules", rules, POWER)


def test_the_split_keeps_every_rule_in_order_at_its_parts_interval() -> None:
    rules = (
        _rule("node_gpu:nvidia_gpu_up:max", "max by (node) (up)"),
        _rule("node_gpu:nvidia_gpu_power_watts:max", "max by (node) (power)"),
        _rule("node:nvidia_gpu_up:sum", "sum by (node) (node_gpu:nvidia_gpu_up:max)"),
        _rule("node:nvidia_gpu_power_watts:sum", "sum by (node) (node_gpu:nvidia_gpu_power_watts:max)"),
    )
    first, second = split_by_family("gpu-pulse.device.rules", rules, POWER)
    assert (first.name, second.name) == ("gpu-pulse.device.rules", "gpu-pulse.device.memory-power.rules")
    assert [r.record for r in first.rules] == ["node_gpu:nvidia_gpu_up:max", "node:nvidia_gpu_up:sum"]
    power = ["node_gpu:nvidia_gpu_power_watts:max", "node:nvidia_gpu_power_watts:sum"]
    assert [r.record for r in second.rules] == power
    assert (first.interval, second.interval) == (INTERVAL, "2m")


def test_a_rule_goes_to_the_first_part_naming_its_family() -> None:
    parts = (Part("memory-power", "2m", ("memory",)), Part("allocation", "2m", ("allocated", "memory")))
    rules = (
        _rule("namespace_pod:gpu_pulse_pod_gpu_memory_used_bytes:sum", "sum by (pod) (mem)"),
        _rule("namespace_pod:gpu_pulse_pod_allocated_devices:sum", "sum by (pod) (alloc)"),
        _rule("namespace_pod:gpu_pulse_pod_gpu_utilization_ratio:avg", "avg by (pod) (util)"),
    )
    own, memory, allocation = split_by_family("gpu-pulse.pod.rules", rules, parts)
    assert [len(g.rules) for g in (own, memory, allocation)] == [1, 1, 1]
    assert memory.rules[0].record == "namespace_pod:gpu_pulse_pod_gpu_memory_used_bytes:sum"


@pytest.mark.parametrize("dialect", list(Dialect))
def test_each_shipped_level_reads_no_record_of_another_group_of_its_level(dialect: Dialect) -> None:
    groups = {g.name: g for g in recording_groups(Vocabulary.of(dialect))}
    for level, parts in (("gpu-pulse.device", DEVICE_PARTS), ("gpu-pulse.pod", POD_PARTS)):
        names = [f"{level}.rules", *(f"{level}.{p.suffix}.rules" for p in parts)]
        for name in names:
            recorded_elsewhere = {
                r.record for other in names if other != name for r in groups[other].rules if isinstance(r, Recording)
            }
            assert groups[name].rules
            assert all(not (metric_names(r.expr) & recorded_elsewhere) for r in groups[name].rules)


def test_state_and_utilization_every_minute_accounting_every_two() -> None:
    every = recording_intervals(Vocabulary.of(Dialect.PROMETHEUS))
    minute = {name for name, interval in every.items() if interval == INTERVAL}
    assert {
        "node_gpu:nvidia_gpu_up:max",
        "node_gpu:nvidia_gpu_utilization_ratio:max",
        "namespace_pod:gpu_pulse_pod_gpu_utilization_ratio:avg",
        "namespace:gpu_pulse_pod_gpu_utilization_ratio:avg",
    } <= minute
    for accounting in (
        "node_gpu:nvidia_gpu_energy_joules:rate5m",
        "namespace_pod:gpu_pulse_pod_gpu_memory_used_bytes:sum",
        "namespace:gpu_pulse_pod_allocated_devices:sum",
        "namespace:gpu_pulse_pod_idle_devices:sum",
        "namespace_workload:gpu_pulse_pod_gpu_utilization_ratio:avg",
    ):
        assert every[accounting] == ACCOUNTING_INTERVAL, accounting


def test_both_dialects_record_the_same_names_at_the_same_intervals() -> None:
    assert recording_intervals(Vocabulary.of(Dialect.DCGM)) == recording_intervals(Vocabulary.of(Dialect.PROMETHEUS))


@pytest.mark.parametrize("dialect", list(Dialect))
def test_no_alert_and_no_default_adapter_query_reads_a_recorded_series(dialect: Dialect) -> None:
    """What lets the accounting groups run every two minutes: their series feed dashboards and the report only. The
    inference alerts on workloads read the inference group's series (written every 15 s), and no other."""
    recorded = set(recording_intervals(Vocabulary.of(dialect)))
    inference = {rule.record for rule in inference_rules()}
    assert not [a.alert for a in alerts(dialect) if metric_names(a.expr) & (recorded - inference)]
    read = {a.alert for a in alerts(dialect) if metric_names(a.expr) & inference}
    assert read == {"GPUInferenceTTFTOverSLO", "GPUInferenceAtMaxReplicas"}
    config = default_metrics_config()
    queries = [d.prometheus for d in (*config.metrics, *config.external) if d.prometheus is not None]
    assert queries
    for query in queries:
        assert not (metric_names(query.query) | metric_names(query.sample_time_query)) & recorded
