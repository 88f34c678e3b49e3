"""Every dashboard query and every recording rule against a real Prometheus that scraped the real exporter on the
NVML simulator, in both dialects (see conftest.py for the stack)."""

from __future__ import annotations

from typing import Any

import pytest

from dashboards.generate import boards, expressions
from exporter.catalogue import Dialect
from rules.inventory import adapter_names, exporter_names
from rules.names import POD_INFERENCE_SERIES
from rules.promql import metric_names
from tests.dashboards.livestack import LiveStack
from tests.support.dashboard_queries import (
    board_dialects,
    document,
    panel_targets,
    query_variables,
    substitute,
    variable_names,
)
from tests.support.prometheus import shipped_rules

pytestmark = pytest.mark.timeout(180)

ADAPTER = adapter_names()


CASES = [(stem, dialect) for stem in boards() for dialect in board_dialects(stem)]


@pytest.mark.parametrize(("stem", "dialect"), CASES, ids=[f"{s}-{d}" for s, d in CASES])
def test_every_panel_query_returns_data(live_stack: LiveStack, stem: str, dialect: Dialect) -> None:
    server = live_stack.prometheus[dialect]
    variables = variable_names(stem)
    alerting = bool(server.query('ALERTS{alertstate="firing"}'))
    empty = []
    for title, expr in panel_targets(stem):
        names = metric_names(expr)
        if names & ADAPTER:
            # not here: this stack runs no adapter (tests/e2e scrapes two real adapters and checks these panels);
            # the names these panels read are checked against the adapter's own registry instead
            continue
        if "ALERTS" in names and not alerting:
            continue  # no alert fires in this stack: an empty answer is the right one
        if not server.query(substitute(expr, variables)):
            empty.append(f"{title}: {expr}")
    assert empty == [], "panels without data:\n" + "\n".join(empty)


@pytest.mark.parametrize(("stem", "dialect"), CASES, ids=[f"{s}-{d}" for s, d in CASES])
def test_every_variable_has_values(live_stack: LiveStack, stem: str, dialect: Dialect) -> None:
    server = live_stack.prometheus[dialect]
    for name, selector, label in query_variables(stem):
        if metric_names(selector) & ADAPTER:
            continue  # no adapter in this stack, as for the panels above (tests/e2e scrapes real adapters)
        values = server.label_values(label, selector)
        assert values, f"variable {name} has no values: label_values({selector}, {label})"


@pytest.mark.parametrize("dialect", list(Dialect))
def test_every_recording_rule_has_data(live_stack: LiveStack, dialect: Dialect) -> None:
    server = live_stack.prometheus[dialect]
    missing = [r["record"] for r in shipped_rules(dialect) if "record" in r and not server.query(r["record"])]
    assert missing == [], f"recording rules without data in the live {dialect} Prometheus: {missing}"


@pytest.mark.parametrize("dialect", list(Dialect))
def test_rules_and_dashboards_read_what_the_exporters_publish(live_stack: LiveStack, dialect: Dialect) -> None:
    """The names come from the catalogue; here the real exporters must actually publish every one that is read."""
    read: set[str] = set()
    for rule in shipped_rules(dialect):
        read |= metric_names(rule["expr"])
    for stem, board_dialect in ((s, d) for s, (_, d) in boards().items()):
        if board_dialect in (None, dialect):
            for expr in expressions(document(stem)):
                read |= metric_names(expr)
    # the serving engines' series are published only for pods whose engine the exporter reads, and the simulated
    # nodes run none (livestack.SimulatedKube.engines stands in for them, so that their rules have data)
    published = exporter_names(dialect) - set(POD_INFERENCE_SERIES)
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
