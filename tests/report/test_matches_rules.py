"""The report's figures are the waste dashboard's: each recording rule of rules/waste.py (and the owner rule it
joins), evaluated over the known history at the report's step and integrated as the dashboard integrates it, gives
the GPU-hours the report gives, per workload and per namespace.

The rules were not running while the history was written (promtool backfills raw series), so each recorded name is
replaced by its rule's expression, recursively: what Prometheus would have recorded at each step is what the
expression gives at that step.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from exporter.catalogue import Dialect
from report.prometheus import Connection, PrometheusClient
from rules.generate import recordings
from tests.report.conftest import KnownPrometheus, by_workload

FIGURES = {"held_gpus": "held_gpu_hours", "busy_gpus": "busy_gpu_hours", "idle_gpus": "idle_gpu_hours",
           "measured_gpus": "known_gpu_hours", "idle_held_gpus": "idle_held_gpu_hours"}  # fmt: skip


def inlined(record: str) -> str:
    rules = {r.record: r.expr for r in recordings(Dialect.PROMETHEUS)}
    expr = rules[record]
    pattern = re.compile(r"(?<![\w:])(" + "|".join(re.escape(name) for name in rules) + r")(?![\w:])")
    for _ in range(10):
        replaced = pattern.sub(lambda m: f"({rules[m.group(1)]})", expr)
        if replaced == expr:
            return expr
        expr = replaced
    raise AssertionError(f"{record}: recorded names nested too deep")


def gpu_hours(known: KnownPrometheus, record: str, step: int, steps: int) -> dict[tuple[str, ...], float]:
    """The dashboard's figure: the rule's values over the window, summed over its steps, in hours."""

    async def query() -> Any:
        async with PrometheusClient(Connection(known.url)) as client:
            return await client.range_query(inlined(record), known.end - (steps - 1) * step, known.end, step)

    out: dict[tuple[str, ...], float] = {}
    for series in asyncio.run(query()):
        key = tuple(series.labels.get(k, "") for k in ("namespace", "workload_type", "workload"))
        out[key] = float(series.values.sum()) * step / 3600
    return out


@pytest.mark.parametrize("figure", sorted(FIGURES))
def test_workload_rules_give_the_reports_figures(known: KnownPrometheus, document: dict[str, Any], figure: str) -> None:
    step = document["window"]["step_seconds"]
    steps = len(document["timeline"]["times"])
    recorded = gpu_hours(known, f"namespace_workload:gpu_pulse_pod_{figure}:sum", step, steps)
    reported = {k: w["figures"][FIGURES[figure]] for k, w in by_workload(document).items()}
    # the rules name an ownerless pod's workload after the pod, as the report does (kind Pod)
    assert {k: v for k, v in recorded.items() if v} == pytest.approx({k: v for k, v in reported.items() if v})


@pytest.mark.parametrize("figure", ["held_gpus", "busy_gpus", "idle_gpus"])
def test_namespace_rules_give_the_reports_figures(
    known: KnownPrometheus, document: dict[str, Any], figure: str
) -> None:
    step = document["window"]["step_seconds"]
    steps = len(document["timeline"]["times"])
    recorded = {k[0]: v for k, v in gpu_hours(known, f"namespace:gpu_pulse_pod_{figure}:sum", step, steps).items()}
    name = FIGURES[figure]
    reported = {n["namespace"]: n[name] for n in document["namespaces"]}
    assert recorded == pytest.approx(reported)
