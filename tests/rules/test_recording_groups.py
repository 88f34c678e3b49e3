"""The device and pod levels split in two groups each: every rule kept, in order, and no rule reading what the other
group of its level records (it would read it one evaluation late)."""

from __future__ import annotations

import pytest

from exporter.catalogue import Dialect
from rules.dialect import Vocabulary
from rules.model import Recording
from rules.promql import metric_names
from rules.recording import recording_groups, split_by_family


def _rule(record: str, expr: str) -> Recording:
    return Recording(record, expr, "test rule", ())


def test_a_rule_reading_its_sibling_groups_record_is_refused() -> None:
    rules = (
        _rule("node_gpu:nvidia_gpu_memory_used_bytes:max", "max by (node) (mem)"),
        _rule("node:nvidia_gpu_up:sum", "sum by (node) (node_gpu:nvidia_gpu_memory_used_bytes:max)"),
    )
    with pytest.raises(ValueError, match="node:nvidia_gpu_up:sum reads"):
        split_by_family("gpu-pulse.device.rules", rules)


def test_the_split_keeps_every_rule_in_order() -> None:
    rules = (
        _rule("node_gpu:nvidia_gpu_up:max", "max by (node) (up)"),
        _rule("node_gpu:nvidia_gpu_power_watts:max", "max by (node) (power)"),
        _rule("node:nvidia_gpu_up:sum", "sum by (node) (node_gpu:nvidia_gpu_up:max)"),
        _rule("node:nvidia_gpu_power_watts:sum", "sum by (node) (node_gpu:nvidia_gpu_power_watts:max)"),
    )
    first, second = split_by_family("gpu-pulse.device.rules", rules)
    assert (first.name, second.name) == ("gpu-pulse.device.rules", "gpu-pulse.device.memory-power.rules")
    assert [r.record for r in first.rules] == ["node_gpu:nvidia_gpu_up:max", "node:nvidia_gpu_up:sum"]
    power = ["node_gpu:nvidia_gpu_power_watts:max", "node:nvidia_gpu_power_watts:sum"]
    assert [r.record for r in second.rules] == power
    assert first.interval == second.interval == "1m"


@pytest.mark.parametrize("dialect", list(Dialect))
def test_each_shipped_level_reads_no_record_of_its_sibling_group(dialect: Dialect) -> None:
    groups = {g.name: g for g in recording_groups(Vocabulary.of(dialect))}
    for level in ("gpu-pulse.device", "gpu-pulse.pod"):
        first, second = groups[f"{level}.rules"], groups[f"{level}.memory-power.rules"]
        for part, sibling in ((first, second), (second, first)):
            recorded = {r.record for r in sibling.rules if isinstance(r, Recording)}
            assert all(not (metric_names(r.expr) & recorded) for r in part.rules)
        assert first.rules and second.rules
