"""The shipped dashboards' queries as Grafana sends them, timed against a running Prometheus.

Grafana opens a board on its default range (the last hour) and, per panel, sends a range query whose step is the
panel's interval: the range over the panel's data points (its width in pixels, about 1,000 for a wide panel) rounded
to a nice interval, but not under the panel's "Min interval" (its `interval`) or, without one, the data source's
scrape interval (15 s by default); start and end aligned to the step. `$__interval` is that step, `$__rate_interval`
the larger of step + scrape interval and four scrape intervals, `$__range`/`$__range_s` the range. A table panel
with `instant: true` sends one instant query at the end instead. A query variable `label_values(selector, label)` asks
/api/v1/label/<label>/values for the range.

Variables take the value the board opens on: the one it names as current, else `All` (its allValue, `.*`); those of
PINNED take the first value their query answers (a node board looked at for one node: `All` there draws every one of
20,000 GPUs' raw series in each panel, not a view anyone reads). The namespace board is timed as it opens, on `All`
namespaces and workloads: its panels are built to answer on `All` at fleet size.

Each distinct query runs `repeats` times, one after another; the wall time is the request's, Prometheus' own time
(execTotalTime) comes from its query log (variables' label look-ups are not logged: wall time only).
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.dashboard_queries import document, panel_targets, substitute, variable_names

LIMIT_P99 = 2.0  # seconds: the slowest a panel may answer at fleet size (issue 22)
RANGE_S = 3600  # the boards open on the last hour
DATA_POINTS = 1000  # a wide panel's width in pixels: Grafana's maxDataPoints
SCRAPE_S = 15  # the data source's scrape interval: Grafana's minimum step
# per board, the variables set to a single value (the first their query answers): the board of one node; `All` there
# is every GPU's raw series in each panel, at fleet size not a view anyone can read. Every other board opens on `All`.
PINNED = {
    "gpu-pulse-node-dcgm": frozenset({"node"}),
    "gpu-pulse-node-prometheus": frozenset({"node"}),
}

# Grafana rounds a computed interval to the nearest of these (seconds; a tie to the larger)
NICE_S = (1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def grafana_step(range_s: float, data_points: int = DATA_POINTS, scrape_s: int = SCRAPE_S) -> int:
    """The step Grafana chooses for a panel of `data_points` over `range_s` seconds: range over points rounded to the
    nearest nice interval (beyond a day: whole days), then not under `scrape_s` (the scrape interval, or the panel's
    "Min interval" where it has one)."""
    raw = range_s / data_points
    if raw > NICE_S[-1]:
        rounded = int(math.ceil(raw / NICE_S[-1]) * NICE_S[-1])
    else:
        rounded = min(NICE_S, key=lambda nice: (abs(raw - nice), -nice))
    return max(rounded, scrape_s)


def min_step(interval: str | None, scrape_s: int = SCRAPE_S) -> int:
    """The least step of a panel: its "Min interval" (`30s`, `1m`, `1h`), else the data source's scrape interval."""
    if not interval:
        return scrape_s
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return int(float(interval[:-1]) * units[interval[-1]]) if interval[-1] in units else int(interval)


def built_ins(range_s: int, step: int, scrape_s: int = SCRAPE_S) -> dict[str, str]:
    """Grafana's built-in variables for a panel of step `step` over `range_s` seconds."""
    return {
        "__interval": f"{step}s",
        "__rate_interval": f"{max(step + scrape_s, 4 * scrape_s)}s",
        "__range": f"{range_s}s",
        "__range_s": str(range_s),
    }


def aligned(end: float, range_s: int, step: int) -> tuple[int, int]:
    """(start, end) of the range, both on a multiple of the step, as Grafana sends them."""
    last = int(end // step * step)
    return last - range_s // step * step, last


@dataclass(frozen=True)
class Query:
    """One request a board sends: a panel target (range or instant) or a variable's label look-up."""

    board: str
    title: str
    expr: str
    kind: str  # "range", "instant" or "label:<name>"
    step: int = 0  # a range query's step, seconds


@dataclass
class Timing:
    query: Query
    wall: list[float] = field(default_factory=list)
    engine: list[float] = field(default_factory=list)
    series: int = 0
    failure: str = ""

    @property
    def p99(self) -> float:
        return percentile(self.wall, 0.99)


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def opening_values(
    variables: Sequence[Mapping[str, Any]], answers: Mapping[str, Sequence[str]], pinned: frozenset[str] = frozenset()
) -> dict[str, str]:
    """Per variable, the value the board opens on: its current value, else the first answer for a `pinned` one, else
    its allValue (`.*`). `answers`: what each query variable's look-up answered."""
    values = {}
    for variable in variables:
        name = variable["name"]
        current = (variable.get("current") or {}).get("value")
        if isinstance(current, str) and current and current != "$__all":
            values[name] = current
        elif name in pinned and answers.get(name):
            values[name] = sorted(answers[name])[0]
        else:
            values[name] = variable.get("allValue") or ".*"
    return values


def _label_values_query(variable: Mapping[str, Any]) -> tuple[str, str]:
    inner = variable["query"].removeprefix("label_values(").removesuffix(")")
    selector, _, label = inner.rpartition(", ")
    return selector, label


class Prometheus:
    """Prometheus' HTTP API as Grafana uses it (queries POSTed form-encoded, label look-ups by GET)."""

    def __init__(self, url: str, timeout: float = 120.0) -> None:
        self.url, self.timeout = url, timeout

    def ask(self, path: str, params: Sequence[tuple[str, str]]) -> list[Any]:
        encoded = urllib.parse.urlencode(params)
        if "/label/" in path:
            request = urllib.request.Request(f"{self.url}{path}?{encoded}")
        else:
            request = urllib.request.Request(self.url + path, data=encoded.encode(), method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise RuntimeError(body.get("error", "no success"))
        result: list[Any] = body["data"]["result"] if isinstance(body["data"], dict) else body["data"]
        return result


def _timed(prometheus: Prometheus, query: Query, params: Sequence[tuple[str, str]], timing: Timing) -> list[str]:
    path = {"range": "/api/v1/query_range", "instant": "/api/v1/query"}.get(query.kind)
    if path is None:
        path = f"/api/v1/label/{query.kind.removeprefix('label:')}/values"
    started = time.perf_counter()
    try:
        result = prometheus.ask(path, params)
    except Exception as failed:  # a failed query is a finding, reported with the others
        timing.failure = str(failed)[:120]
        return []
    timing.wall.append(time.perf_counter() - started)
    timing.series = len(result)
    return [str(item) for item in result] if query.kind.startswith("label:") else []


def time_board(prometheus: Prometheus, stem: str, repeats: int, now: float | None = None) -> list[Timing]:
    """Every variable look-up and panel query of board `stem`, `repeats` times each (variables first, in order,
    each with the values of those before it)."""
    step = grafana_step(RANGE_S)
    clock = now if now is not None else time.time()
    start, end = aligned(clock, RANGE_S, step)
    expand = built_ins(RANGE_S, step)
    names = variable_names(stem)
    variables = document(stem)["templating"]["list"]
    answers: dict[str, list[str]] = {}
    timings: list[Timing] = []
    for variable in variables:
        if variable["type"] != "query":
            continue
        selector, label = _label_values_query(variable)
        expr = substitute(selector, names, expand, opening_values(variables, answers, PINNED.get(stem, frozenset())))
        timing = Timing(Query(stem, f"${variable['name']}", expr, f"label:{label}"))
        params = [("match[]", expr), ("start", str(start)), ("end", str(end))]
        for _ in range(repeats):
            answers[variable["name"]] = _timed(prometheus, timing.query, params, timing)
        timings.append(timing)
    values = opening_values(variables, answers, PINNED.get(stem, frozenset()))
    instant = _instant_targets(stem)
    least = _min_steps(stem)
    seen: set[tuple[str, str, int]] = set()
    for title, written in panel_targets(stem):
        step = grafana_step(RANGE_S, scrape_s=least.get((title, written), SCRAPE_S))  # the panel's own step
        start, end = aligned(clock, RANGE_S, step)
        expr = substitute(written, names, built_ins(RANGE_S, step), values)
        kind = "instant" if (title, written) in instant else "range"
        if (expr, kind, step) in seen:
            continue  # the same query in two panels: Grafana would send it twice, it costs the same
        seen.add((expr, kind, step))
        query = Query(stem, title, expr, kind, step if kind == "range" else 0)
        params = (
            [("query", expr), ("time", str(end))]
            if kind == "instant"
            else [("query", expr), ("start", str(start)), ("end", str(end)), ("step", str(step))]
        )
        timing = Timing(query)
        for _ in range(repeats):
            _timed(prometheus, query, params, timing)
        timings.append(timing)
    return timings


def _min_steps(stem: str) -> dict[tuple[str, str], int]:
    """(panel title, expression) -> the panel's least step, for the panels with a "Min interval"."""
    return {
        (inner["title"], target["expr"]): min_step(inner["interval"])
        for panel in document(stem).get("panels", [])
        for inner in [panel, *panel.get("panels", [])]
        if inner.get("interval")
        for target in inner.get("targets") or []
    }


def _instant_targets(stem: str) -> set[tuple[str, str]]:
    found = set()
    for panel in document(stem).get("panels", []):
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets") or []:
                if target.get("instant"):
                    found.add((inner["title"], target["expr"]))
    return found


def engine_times(entries: Iterator[Mapping[str, Any]], timings: Sequence[Timing]) -> None:
    """Fill each timing's Prometheus' own times (execTotalTime) from query-log `entries` (rule evaluations left
    out), matched on the expression and the kind of query."""
    by_key = {(t.query.expr, t.query.kind): t for t in timings if not t.query.kind.startswith("label:")}
    for entry in entries:
        if "ruleGroup" in entry:
            continue
        params = entry.get("params", {})
        kind = "range" if params.get("step") else "instant"
        timing = by_key.get((params.get("query", ""), kind))
        if timing is not None:
            timing.engine.append(float(entry["stats"]["timings"]["execTotalTime"]))


def slowest_table(timings: Sequence[Timing], shown: int = 10) -> str:
    """The `shown` slowest queries by wall p99, with p50/p99 of wall and Prometheus' own time."""
    ranked = sorted(timings, key=lambda t: -t.p99 if t.wall else -math.inf)[:shown]
    lines = [f"{'wall p50':>9} {'p99':>8} {'own p50':>8} {'p99':>8} {'series':>7}  board / panel (kind): query"]
    for t in ranked:
        own = (
            f"{percentile(t.engine, 0.5) * 1e3:6.0f}ms {percentile(t.engine, 0.99) * 1e3:6.0f}ms"
            if t.engine
            else f"{'-':>8} {'-':>8}"
        )
        lines.append(
            f"{percentile(t.wall, 0.5) * 1e3:7.0f}ms {t.p99 * 1e3:6.0f}ms {own} {t.series:7,}  "
            f"{t.query.board.removeprefix('gpu-pulse-')} / {t.query.title} ({t.query.kind}"
            f"{f' {t.query.step} s' if t.query.step else ''}): {t.query.expr[:140]}"
        )
    return "\n".join(lines)


def over_limit(timings: Sequence[Timing], limit: float = LIMIT_P99) -> list[Timing]:
    """The queries whose wall p99 is over `limit` seconds, or that failed."""
    return [t for t in timings if t.failure or not t.wall or t.p99 > limit]


def read_log(path: Path, offset: int) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    with path.open("rb") as log:
        log.seek(offset)
        for line in log:
            yield json.loads(line)
