"""The shipped dashboards' queries as a live Prometheus evaluates them: every panel target and template variable, with
the dashboard's variables set to `All` and Grafana's built-ins expanded as Grafana would."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from dashboards.generate import ROOT, boards, panels
from exporter.catalogue import Dialect

# Grafana's built-in variables, as Grafana would expand them for a 1-minute range with 1 s scrapes
BUILT_IN = {"__rate_interval": "10s", "__range_s": "60", "__range": "1m", "__interval": "2s"}
VARIABLE = re.compile(r"\$\{?(\w+)\}?")


def substitute(
    expr: str,
    variables: set[str],
    built_in: Mapping[str, str] = BUILT_IN,
    values: Mapping[str, str] | None = None,
) -> str:
    """The dashboard's variables as `values` gives them, the others as `All` (the regex .*), and Grafana's built-ins
    as `built_in` gives them (default: as Grafana expands them for a 1-minute range with 1 s scrapes); anything else
    that looks like a variable (`$1` in label_replace) stays."""
    chosen = values or {}

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in built_in:
            return built_in[name]
        if name in variables:
            return chosen.get(name, ".*")
        return match.group(0)

    return VARIABLE.sub(value, expr)


def document(stem: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ROOT / "dist" / f"{stem}.json").read_text(encoding="utf-8"))
    return loaded


def variable_names(stem: str) -> set[str]:
    return {v["name"] for v in document(stem)["templating"]["list"]}


def query_variables(stem: str) -> list[tuple[str, str, str]]:
    """(variable, selector expression, label) of every `label_values(expr, label)` query variable, substituted."""
    found = []
    for variable in document(stem)["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.*), (\w+)\)", variable["query"])
        if match is None:
            raise AssertionError(f"{stem}: variable {variable['name']}: not label_values(...): {variable['query']}")
        found.append((variable["name"], substitute(match.group(1), variable_names(stem)), match.group(2)))
    return found


def panel_targets(stem: str) -> list[tuple[str, str]]:
    """(panel title, expression as written) of every panel query."""
    return [
        (panel["title"], target["expr"])
        for panel in panels(document(stem))
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def board_dialects(stem: str) -> list[Dialect]:
    """The dialects a dashboard is meant for (a dialect-neutral one: both)."""
    _, dialect = boards()[stem]
    return [dialect] if dialect is not None else list(Dialect)
