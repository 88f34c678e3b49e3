"""The demo's live summary: the Deployment's pods, their GPU utilization as the adapter serves it (asked exactly as an
HPA asks), and what an HPA targeting 60 % average utilization would do. Rendered as one screen for a terminal or as
one log line otherwise."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import aiohttp

from adapter.quantity import QuantityError, parse_quantity
from simulation.demo.cluster import DemoPod
from simulation.demo.commands import HPA_QUERY
from simulation.demo.hpa import DEFAULT_TOLERANCE, ScaleSuggestion, suggest_replicas
from simulation.demo.kedastate import ACTIVATION_TARGET
from simulation.demo.scenarios import DEPLOYMENT, NAMESPACE, SELECTOR, TARGET_UTILIZATION

TARGET = Decimal(TARGET_UTILIZATION)
BAR_WIDTH = 20


@dataclass(frozen=True, slots=True)
class PodFigure:
    name: str
    node: str
    utilization: Decimal | None  # percent, as served; None when the adapter served nothing for the pod
    sampled_at: float | None


@dataclass(frozen=True, slots=True)
class WorkloadSummary:
    taken_at: float
    pods: tuple[PodFigure, ...]
    suggestion: ScaleSuggestion
    problem: str | None = None  # why the adapter gave no figures

    @property
    def average(self) -> Decimal | None:
        values = [p.utilization for p in self.pods if p.utilization is not None]
        return sum(values, Decimal(0)) / len(values) if values else None


def _timestamp(text: object) -> float | None:
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def summarize(
    pods: Sequence[DemoPod], body: Mapping[str, Any] | None, taken_at: float, problem: str | None = None
) -> WorkloadSummary:
    """The summary of the Deployment's `pods` from the adapter's MetricValueList `body` (None: no answer)."""
    served: dict[str, tuple[Decimal, float | None]] = {}
    for item in (body or {}).get("items") or ():
        try:
            name = str(item["describedObject"]["name"])
            served[name] = (parse_quantity(str(item["value"])), _timestamp(item.get("timestamp")))
        except (KeyError, TypeError, QuantityError):
            continue
    mine = sorted((p for p in pods if p.namespace == NAMESPACE and p.workload.name == DEPLOYMENT), key=lambda p: p.name)
    figures = tuple(
        PodFigure(p.name, p.node, *served[p.name]) if p.name in served else PodFigure(p.name, p.node, None, None)
        for p in mine
    )
    values = {f.name: f.utilization for f in figures if f.utilization is not None}
    suggestion = suggest_replicas([f.name for f in figures], values, TARGET)
    return WorkloadSummary(taken_at, figures, suggestion, problem)


async def read_summary(
    session: aiohttp.ClientSession, adapter_url: str, pods: Sequence[DemoPod], clock: Callable[[], float] = time.time
) -> WorkloadSummary:
    """Ask the adapter as an HPA would, and summarize the answer."""
    try:
        async with session.get(f"{adapter_url}{HPA_QUERY}") as response:
            body = await response.json(content_type=None)
            if response.status != 200:
                message = body.get("message") if isinstance(body, dict) else None
                return summarize(pods, None, clock(), f"HTTP {response.status}: {message or 'no message'}")
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return summarize(pods, None, clock(), f"the adapter did not answer: {exc or type(exc).__name__}")
    return summarize(pods, body if isinstance(body, dict) else None, clock())


def _clock_time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S")


def _hpa_line(summary: WorkloadSummary) -> str:
    s = summary.suggestion
    missing = f", {s.missing} pod(s) without a figure" if s.missing else ""
    return f"{s.current} -> {s.desired} replicas ({s.verdict}{missing})"


def _keda_line(keda: str | None) -> str:
    return "" if keda is None else f"KEDA trigger (activationTarget {ACTIVATION_TARGET}): {keda}"


def render_line(summary: WorkloadSummary, keda: str | None = None) -> str:
    """One log line: time, each pod's figure, the average, the HPA's suggestion and, with `--keda-listen`, whether
    the scaler calls the demo's trigger active."""
    stamp = datetime.fromtimestamp(summary.taken_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if summary.problem is not None:
        return f"{stamp} {DEPLOYMENT}: no figures: {summary.problem}"
    pods = ", ".join(f"{p.name} {_percent(p.utilization)}" for p in summary.pods)
    average = summary.average
    shown = f"avg {average:.1f}%" if average is not None else "no figures"
    line = (
        f"{stamp} {DEPLOYMENT}: {len(summary.pods)} pods, gpu_utilization {shown} ({pods}); "
        f"HPA at {TARGET_UTILIZATION}%: {_hpa_line(summary)}"
    )
    return f"{line}; {_keda_line(keda)}" if keda is not None else line


def _percent(value: Decimal | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _bar(value: Decimal | None) -> str:
    if value is None:
        return "[" + "?" * BAR_WIDTH + "]"
    filled = max(0, min(BAR_WIDTH, round(float(value) / 100 * BAR_WIDTH)))
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


def render_screen(
    summary: WorkloadSummary, header: Sequence[str], footer: Sequence[str], keda: str | None = None
) -> str:
    """One screen: `header`, the pods table, the HPA's suggestion, `footer`."""
    width = max([len(p.name) for p in summary.pods] + [3])
    nodes = max([len(p.node) for p in summary.pods] + [4])
    lines = [*header, ""]
    lines.append(f"Deployment {NAMESPACE}/{DEPLOYMENT} ({SELECTOR}): gpu_utilization as the adapter serves it")
    lines.append(f"  {'POD':<{width}}  {'NODE':<{nodes}}  {'GPU':>7}  {'':<{BAR_WIDTH + 2}}  SAMPLED")
    for pod in summary.pods:
        sampled = _clock_time(pod.sampled_at) if pod.sampled_at is not None else "-"
        lines.append(
            f"  {pod.name:<{width}}  {pod.node:<{nodes}}  {_percent(pod.utilization):>7}  {_bar(pod.utilization)}"
            f"  {sampled}"
        )
    average = summary.average
    if summary.problem is not None:
        lines.append(f"  no figures: {summary.problem}")
    elif average is not None:
        lines.append(f"  average {average:.1f}% over {len(summary.pods)} pods; target {TARGET_UTILIZATION}%")
    lines.append("")
    lines.append(
        f"HPA (Pods metric gpu_utilization, average target {TARGET_UTILIZATION}%, tolerance {DEFAULT_TOLERANCE:g}): "
        f"{_hpa_line(summary)}"
    )
    if keda is not None:
        lines.append(_keda_line(keda))
    lines += ["", *footer]
    return "\n".join(lines)
