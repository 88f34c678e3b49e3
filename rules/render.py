"""Rule groups as YAML documents: a plain Prometheus rule file, a PrometheusRule manifest, a promtool test file."""

from __future__ import annotations

from typing import Any

import yaml

from rules.model import Alert, AlertCase, ExprCase, Group, Recording, Rule, RuleTest
from rules.runbooks import runbook_url

RULE_FILE = "gpu-pulse.rules.yaml"
TEST_FILE = "gpu-pulse.tests.yaml"
MANIFEST_FILE = "prometheusrule.yaml"
MANIFEST_NAME = "gpu-pulse"


class _Dumper(yaml.SafeDumper):
    """Block style, keys in insertion order, long lines kept whole."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def dump(document: Any, header: str) -> str:
    body = yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=100_000, allow_unicode=True)
    return f"{header}{body}"


def rule_document(rule: Rule, runbook_base: str) -> dict[str, Any]:
    if isinstance(rule, Recording):
        return {"record": rule.record, "expr": rule.expr}
    doc: dict[str, Any] = {"alert": rule.alert, "expr": rule.expr}
    if rule.for_ != "0m":
        doc["for"] = rule.for_
    doc["labels"] = {"severity": str(rule.severity)} | dict(rule.labels)
    doc["annotations"] = {
        "summary": rule.summary,
        "description": rule.description,
        "runbook_url": runbook_url(runbook_base, rule.anchor),
    }
    return doc


def groups_document(groups: tuple[Group, ...], runbook_base: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for group in groups:
        doc: dict[str, Any] = {"name": group.name}
        if group.interval:
            doc["interval"] = group.interval
        doc["rules"] = [rule_document(r, runbook_base) for r in group.rules]
        out.append(doc)
    return out


def rule_file(groups: tuple[Group, ...], header: str, runbook_base: str) -> str:
    return dump({"groups": groups_document(groups, runbook_base)}, header)


def prometheus_rule(groups: tuple[Group, ...], header: str, dialect: str, runbook_base: str) -> str:
    manifest = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": MANIFEST_NAME,
            "labels": {
                "app.kubernetes.io/name": "gpu-pulse",
                "app.kubernetes.io/component": "rules",
                "app.kubernetes.io/part-of": "gpu-pulse",
                "gpu-pulse.dev/dialect": dialect,
            },
        },
        "spec": {"groups": groups_document(groups, runbook_base)},
    }
    return dump(manifest, header)


def _alert_case(alert: Alert, case: AlertCase, runbook_base: str) -> dict[str, Any]:
    return {
        "eval_time": case.eval_time,
        "alertname": alert.alert,
        "exp_alerts": [
            {
                "exp_labels": dict(expected.labels) | {"severity": str(alert.severity)} | dict(alert.labels),
                "exp_annotations": {
                    "summary": alert.summary,
                    "description": expected.description,
                    "runbook_url": runbook_url(runbook_base, alert.anchor),
                },
            }
            for expected in case.firing
        ],
    }


def _expr_case(recording: Recording, case: ExprCase) -> dict[str, Any]:
    return {
        "expr": case.expr or recording.record,
        "eval_time": case.eval_time,
        "exp_samples": [{"labels": s.labels, "value": s.value} for s in case.samples],
    }


def _test_document(rule: Rule, test: RuleTest, runbook_base: str) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": test.name,
        "interval": test.interval,
        "input_series": [{"series": s.series, "values": s.values} for s in test.inputs],
    }
    if isinstance(rule, Alert):
        doc["alert_rule_test"] = [_alert_case(rule, c, runbook_base) for c in test.alert_cases]
    elif test.expr_cases:
        doc["promql_expr_test"] = [_expr_case(rule, c) for c in test.expr_cases]
    return doc


def test_file(groups: tuple[Group, ...], header: str, runbook_base: str) -> str:
    tests = [
        _test_document(rule, test, runbook_base) for group in groups for rule in group.rules for test in rule.tests
    ]
    return dump({"rule_files": [RULE_FILE], "evaluation_interval": "1m", "tests": tests}, header)
