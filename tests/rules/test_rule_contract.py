"""The conventions every rule must keep, checked on the committed files (not on the generator's model)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from exporter.catalogue import Dialect
from rules.generate import ROOT, UnknownSeriesError, check_reads
from rules.inventory import exporter_names, readable_names
from rules.model import Alert, Group, Severity
from rules.promql import metric_names
from rules.render import RULE_FILE, TEST_FILE
from rules.runbooks import default_base

RUNBOOKS = ROOT.parent / "docs" / "runbooks.md"
RECORD_NAME = re.compile(r"^[a-z][a-z_]*:[a-zA-Z][a-zA-Z0-9_]*:[a-z][a-z0-9_]*$")
ALERT_NAME = re.compile(r"^GPU[A-Z][A-Za-z0-9]*$")


def _load(dialect: str, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "dist" / dialect / name).read_text(encoding="utf-8"))
    return doc


def _rules(dialect: str) -> list[dict[str, Any]]:
    return [rule for group in _load(dialect, RULE_FILE)["groups"] for rule in group["rules"]]


def _runbook_anchors() -> set[str]:
    """GitHub anchors of the `##` headings of docs/runbooks.md."""
    anchors = set()
    for line in RUNBOOKS.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            anchors.add(re.sub(r"[^a-z0-9 _-]", "", line[3:].strip().lower()).replace(" ", "-"))
    return anchors


DIALECTS = [str(d) for d in Dialect]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_alert_is_named_labelled_and_annotated(dialect: str) -> None:
    alerts = [r for r in _rules(dialect) if "alert" in r]
    assert len(alerts) >= 15
    anchors = _runbook_anchors()
    for rule in alerts:
        name = rule["alert"]
        assert ALERT_NAME.match(name), name
        assert rule["labels"]["severity"] in {s.value for s in Severity}, name
        notes = rule["annotations"]
        assert set(notes) == {"summary", "description", "runbook_url"}, name
        assert notes["summary"].endswith(".") and "{{" not in notes["summary"], name
        if name != "GPUAdapterDown":  # all replicas: nothing to name
            assert "{{ $" in notes["description"], f"{name}: the description should say what is affected"
        assert notes["runbook_url"] == f"{default_base()}#{name.lower()}", name
        assert name.lower() in anchors, f"docs/runbooks.md has no `## {name}` section"


def test_every_runbook_section_belongs_to_an_alert() -> None:
    alerts = {r["alert"].lower() for d in DIALECTS for r in _rules(d) if "alert" in r}
    sections = {a for a in _runbook_anchors() if a.startswith("gpu")}
    assert sections == alerts


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_alert_has_a_firing_and_a_quiet_case(dialect: str) -> None:
    tests = _load(dialect, TEST_FILE)["tests"]
    firing: set[str] = set()
    quiet: set[str] = set()
    for test in tests:
        for case in test.get("alert_rule_test", []):
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    alerts = {r["alert"] for r in _rules(dialect) if "alert" in r}
    assert alerts - firing == set(), "alerts without a firing case"
    assert alerts - quiet == set(), "alerts without a not-firing case"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_recording_rule_is_named_by_convention_and_tested(dialect: str) -> None:
    tests = _load(dialect, TEST_FILE)["tests"]
    tested = {case["expr"] for t in tests for case in t.get("promql_expr_test", []) if case["exp_samples"]}
    records = {r["record"] for r in _rules(dialect) if "record" in r}
    assert len(records) >= 25
    for name in records:
        assert RECORD_NAME.match(name), f"{name} is not level:metric:operations"
    assert records - tested == set(), "recording rules without a promql_expr_test"


def test_both_dialects_record_the_same_series() -> None:
    """Dashboards and the adapter read recorded names only, so both dialects must record the same set."""
    records = [{r["record"] for r in _rules(d) if "record" in r} for d in DIALECTS]
    assert records[0] == records[1]
    alerts = [{r["alert"] for r in _rules(d) if "alert" in r} for d in DIALECTS]
    assert alerts[0] == alerts[1]


@pytest.mark.parametrize("dialect", list(Dialect))
def test_rules_read_only_what_the_exporter_publishes(dialect: Dialect) -> None:
    rules = _rules(str(dialect))
    recorded = {r["record"] for r in rules if "record" in r}
    allowed = readable_names(dialect) | recorded
    for rule in rules:
        unknown = metric_names(rule["expr"]) - allowed
        assert not unknown, f"{rule.get('record') or rule.get('alert')} reads {sorted(unknown)}"
    other = Dialect.DCGM if dialect is Dialect.PROMETHEUS else Dialect.PROMETHEUS
    foreign = exporter_names(other) - exporter_names(dialect)
    read = set().union(*(metric_names(r["expr"]) for r in rules))
    assert not read & foreign, f"the {dialect} rules read {other} series: {sorted(read & foreign)}"


def test_the_generator_refuses_a_rule_over_an_unknown_series() -> None:
    rogue = Alert("GPUNothing", "DCGM_FI_DEV_GPU_UTIL > 1", "0m", Severity.INFO, "Nothing.", "{{ $value }}", ())
    with pytest.raises(UnknownSeriesError, match="DCGM_FI_DEV_GPU_UTIL"):
        check_reads(Dialect.PROMETHEUS, (Group("g", (rogue,)),))
    check_reads(Dialect.DCGM, (Group("g", (rogue,)),))
