"""The field sets (exporter.catalogue.field_sets): the default set holds dcgm-exporter's default counters and every
catalogue measurement the shipped rules and dashboards read, so nothing gpu-pulse ships reads a series a default
install does not serve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dashboards.generate import expressions
from exporter.catalogue import (
    ALWAYS_SERVED,
    BY_KEY,
    DCGM_DEFAULT_SET,
    DEFAULT_MEASUREMENTS,
    DEFAULT_REASONS,
    FIELD_SETS,
    MEASUREMENTS,
    Dialect,
)
from exporter.catalogue.field_sets import BOARD_LIMITS, DIALECT_TWINS
from exporter.nvml.coverage import enabled_measurements
from rules.promql import metric_names

ROOT = Path(__file__).resolve().parents[2]


def _read_by(expressions_of: list[str], dialect: Dialect) -> set[str]:
    names = set().union(*(metric_names(e) for e in expressions_of))
    return {m.key for m in MEASUREMENTS if (r := m.rendering(dialect)) is not None and r.name in names}


def _rule_expressions(dialect: Dialect) -> list[str]:
    document = yaml.safe_load((ROOT / "rules" / "dist" / str(dialect) / "gpu-pulse.rules.yaml").read_text())
    return [rule["expr"] for group in document["groups"] for rule in group["rules"]]


@pytest.mark.parametrize("dialect", list(Dialect))
def test_the_default_set_serves_what_the_shipped_rules_read(dialect: Dialect) -> None:
    read = _read_by(_rule_expressions(dialect), dialect)
    assert read, "the rule file reads catalogue series"
    assert read - DEFAULT_MEASUREMENTS == set()


def test_the_default_set_serves_what_the_dashboards_other_than_the_node_board_read() -> None:
    """The node board charts every field (its panels of `--field-set all` fields are empty by default); every other
    board reads recorded series, or exporter series the default set serves."""
    for path in sorted((ROOT / "dashboards" / "dist").glob("*.json")):
        if "-node-" in path.name:
            continue
        board = expressions(json.loads(path.read_text()))
        for dialect in Dialect:
            assert _read_by(board, dialect) - DEFAULT_MEASUREMENTS == set(), path.name


def test_the_default_set_holds_dcgm_exporters_defaults_and_the_alerts_reads() -> None:
    in_defaults = {m.key for m in MEASUREMENTS if m.dcgm is not None and m.dcgm.name in DCGM_DEFAULT_SET}
    twins = {twin for key in in_defaults for twin in DIALECT_TWINS.get(key, ())}
    assert in_defaults | twins | ALWAYS_SERVED | BOARD_LIMITS <= DEFAULT_MEASUREMENTS
    assert DEFAULT_MEASUREMENTS == set(DEFAULT_REASONS)


def test_all_is_every_field_but_the_per_link_ones_and_default_is_a_part_of_it() -> None:
    assert FIELD_SETS["all"] == {m.key for m in MEASUREMENTS if m.default}
    assert DEFAULT_MEASUREMENTS < FIELD_SETS["all"]
    left_out = FIELD_SETS["all"] - DEFAULT_MEASUREMENTS
    # what a dcgm-exporter default install does not serve either, and no shipped alert reads
    assert all(BY_KEY[key].dcgm is None or BY_KEY[key].dcgm.name not in DCGM_DEFAULT_SET for key in left_out)
    assert left_out & ALWAYS_SERVED == set()
    assert {"ecc_sbe_aggregate", "power_violation", "fp64_active", "pstate"} <= left_out


def test_the_collector_reads_the_default_set_without_a_selection() -> None:
    assert enabled_measurements(None) == enabled_measurements(DEFAULT_MEASUREMENTS)
    assert enabled_measurements(FIELD_SETS["all"]) > enabled_measurements(None)
