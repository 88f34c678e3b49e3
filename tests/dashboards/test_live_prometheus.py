"""Every dashboard query and every recording rule against a real Prometheus that scraped the real exporter on the
NVML simulator, in both dialects (see conftest.py for the stack)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from dashboards.generate import ROOT, boards, expressions, panels
from exporter.catalogue import Dialect
from rules.generate import ROOT as RULES_ROOT
from rules.inventory import adapter_names, exporter_names
from rules.promql import metric_names
from rules.render import RULE_FILE
from tests.dashboards.livestack import LiveStack

pytestmark = pytest.mark.timeout(180)

# Grafana's built-in variables, as Grafana would expand them for a 1-minute range with 1 s scrapes
BUILT_IN = {"__rate_interval": "10s", "__range_s": "60", "__range": "1m", "__interval": "2s"}
VARIABLE = re.compile(r"\$\{?(\w+)\}?")
ADAPTER = adapter_names()


def substitute(expr: str, variables: set[str]) -> str:
    """The dashboard's variables as `All` (the regex .*) and Grafana's built-ins as Grafana expands them; anything
    else that looks like a variable (`$1` in label_replace) stays."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        return BUILT_IN.get(name) or (".*" if name in variables else match.group(0))

    return VARIABLE.sub(value, expr)


def _variable_names(stem: str) -> set[str]:
    return {v["name"] for v in _document(stem)["templating"]["list"]}


def _document(stem: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((ROOT / "dist" / f"{stem}.json").read_text(encoding="utf-8"))
    return document


def _targets(stem: str) -> list[tuple[str, str]]:
    """(panel title, expression) of every panel query."""
    return [
        (panel["title"], target["expr"])
        for panel in panels(_document(stem))
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def _dialects(stem: str) -> list[Dialect]:
    _, dialect = boards()[stem]
    return [dialect] if dialect is not None else list(Dialect)


CASES = [(stem, dialect) for stem in boards() for dialect in _dialects(stem)]


@pytest.mark.parametrize(("stem", "dialect"), CASES, ids=[f"{s}-{d}" for s, d in CASES])
def test_every_panel_query_returns_data(live_stack: LiveStack, stem: str, dialect: Dialect) -> None:
    server = live_stack.prometheus[dialect]
    variables = _variable_names(stem)
    alerting = bool(server.query('ALERTS{alertstate="firing"}'))
    empty = []
    for title, expr in _targets(stem):
        names = metric_names(expr)
        if names & ADAPTER:
            # unverified here: the adapter needs a Kubernetes API for its pod cache and has no self-contained mode
            # yet; the names these panels read are checked against the adapter's own registry instead
            continue
        if "ALERTS" in names and not alerting:
            continue  # no alert fires in this stack: an empty answer is the right one
        if not server.query(substitute(expr, variables)):
            empty.append(f"{title}: {expr}")
    assert empty == [], "panels without data:\n" + "\n".join(empty)


@pytest.mark.parametrize(("stem", "dialect"), CASES, ids=[f"{s}-{d}" for s, d in CASES])
def test_every_variable_has_values(live_stack: LiveStack, stem: str, dialect: Dialect) -> None:
    server = live_stack.prometheus[dialect]
    for variable in _document(stem)["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.*), (\w+)\)", variable["query"])
        assert match, variable["query"]
        values = server.label_values(match.group(2), substitute(match.group(1), _variable_names(stem)))
        assert values, f"variable {variable['name']} has no values: {variable['query']}"


def _rules(dialect: Dialect) -> list[dict[str, Any]]:
    document = yaml.safe_load((RULES_ROOT / "dist" / str(dialect) / RULE_FILE).read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


@pytest.mark.parametrize("dialect", list(Dialect))
def test_every_recording_rule_has_data(live_stack: LiveStack, dialect: Dialect) -> None:
    server = live_stack.prometheus[dialect]
    missing = [r["record"] for r in _rules(dialect) if "record" in r and not server.query(r["record"])]
    assert missing == [], f"recording rules without data in the live {dialect} Prometheus: {missing}"


@pytest.mark.parametrize("dialect", list(Dialect))
def test_rules_and_dashboards_read_what_the_exporters_publish(live_stack: LiveStack, dialect: Dialect) -> None:
    """The names come from the catalogue; here the real exporters must actually publish every one that is read."""
    read: set[str] = set()
    for rule in _rules(dialect):
        read |= metric_names(rule["expr"])
    for stem, board_dialect in ((s, d) for s, (_, d) in boards().items()):
        if board_dialect in (None, dialect):
            for expr in expressions(_document(stem)):
                read |= metric_names(expr)
    published = exporter_names(dialect)
    absent = sorted((read & published) - live_stack.prometheus[dialect].names)
    assert absent == [], f"read by rules or dashboards but not published by the {dialect} exporters: {absent}"


def _by_gpu(result: list[dict[str, Any]]) -> dict[str, float]:
    return {r["metric"]["uuid"]: float(r["value"][1]) for r in result}


def test_both_dialects_record_the_same_figures(live_stack: LiveStack) -> None:
    """The same simulated node, once per dialect: the normalized device series agree (units converted right)."""
    node = '{node="gpu-shared"}'
    prom, dcgm = live_stack.prometheus[Dialect.PROMETHEUS], live_stack.prometheus[Dialect.DCGM]
    total = [_by_gpu(s.query(f"node_gpu:nvidia_gpu_memory_total_bytes:max{node}")) for s in (prom, dcgm)]
    assert total[0] and total[0].keys() == total[1].keys()
    for uuid, size in total[0].items():
        assert total[1][uuid] == pytest.approx(size, rel=0.001), uuid
    power = [_by_gpu(s.query(f"node_gpu:nvidia_gpu_power_watts:max{node}")) for s in (prom, dcgm)]
    for uuid, watts in power[0].items():
        assert 50 < watts < 1000, f"{uuid} draws {watts} W in the prometheus dialect"
        assert power[1][uuid] == pytest.approx(watts, rel=0.5), uuid
    util = [_by_gpu(s.query(f"node_gpu:nvidia_gpu_utilization_ratio:max{node}")) for s in (prom, dcgm)]
    for uuid, ratio in util[0].items():
        assert 0 <= ratio <= 1
        assert util[1][uuid] == pytest.approx(ratio, abs=0.3), uuid
