"""The demo's live summary: the Deployment's pods, their GPU utilization as the adapter serves it (asked exactly as an
HPA asks), and what an HPA targeting 60 % average utilization would do; beside it, each pod's `inference_saturation`,
the term that drives it, and what an HPA targeting 100 % average saturation would do, under the traffic phase the
demo's pods are in (simulation/demo/scenarios.py TRAFFIC). Rendered as one screen for a terminal or as one log line
otherwise."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import aiohttp

from adapter.quantity import QuantityError, parse_quantity
from adapter.saturation import DRIVERS
from simulation.demo.cluster import DemoPod
from simulation.demo.commands import HPA_QUERY, SATURATION_QUERY
from simulation.demo.hpa import DEFAULT_TOLERANCE, ScaleSuggestion, suggest_replicas
from simulation.demo.kedastate import ACTIVATION_TARGET
from simulation.demo.scenarios import DEPLOYMENT, NAMESPACE, SELECTOR, TARGET_UTILIZATION

TARGET = Decimal(TARGET_UTILIZATION)
SATURATION_TARGET = 100  # percent of every term's target: the HPA's averageValue "100" (docs/hpa.md)
BAR_WIDTH = 20


@dataclass(frozen=True, slots=True)
class PodSaturation:
    name: str
    percent: Decimal | None  # as served; None when the adapter served nothing for the pod
    term: str | None  # the term that drives it (adapter.saturation.DRIVERS), as the served value's `term` label says


@dataclass(frozen=True, slots=True)
class SaturationSummary:
    """Each pod's inference_saturation, and what an HPA on it at SATURATION_TARGET would do."""

    pods: tuple[PodSaturation, ...]
    suggestion: ScaleSuggestion
    problem: str | None = None

    @property
    def driver(self) -> str | None:
        """The term that weighs most in the pods' average (the one whose pods' values sum highest): what has to fall
        for the HPA to scale down."""
        weight: dict[str, Decimal] = {}
        for pod in self.pods:
            if pod.percent is not None and pod.term is not None:
                weight[pod.term] = weight.get(pod.term, Decimal(0)) + pod.percent
        return max(weight, key=lambda term: weight[term]) if weight else None


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
    saturation: SaturationSummary | None = None  # the same pods on inference_saturation
    phase: str | None = None  # the traffic phase (scenarios.TRAFFIC) the pods were in

    @property
    def average(self) -> Decimal | None:
        values = [p.utilization for p in self.pods if p.utilization is not None]
        return sum(values, Decimal(0)) / len(values) if values else None


def _timestamp(text: object) -> float | None:
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _served(body: Mapping[str, Any] | None) -> dict[str, tuple[Decimal, float | None]]:
    """Each pod's value and sample time in a MetricValueList."""
    served: dict[str, tuple[Decimal, float | None]] = {}
    for item in (body or {}).get("items") or ():
        try:
            name = str(item["describedObject"]["name"])
            served[name] = (parse_quantity(str(item["value"])), _timestamp(item.get("timestamp")))
        except (KeyError, TypeError, QuantityError):
            continue
    return served


def _deployment_pods(pods: Sequence[DemoPod]) -> list[DemoPod]:
    return sorted((p for p in pods if p.namespace == NAMESPACE and p.workload.name == DEPLOYMENT), key=lambda p: p.name)


def summarize(
    pods: Sequence[DemoPod],
    body: Mapping[str, Any] | None,
    taken_at: float,
    problem: str | None = None,
    saturation: SaturationSummary | None = None,
    phase: str | None = None,
) -> WorkloadSummary:
    """The summary of the Deployment's `pods` from the adapter's MetricValueList `body` (None: no answer)."""
    served = _served(body)
    mine = _deployment_pods(pods)
    figures = tuple(
        PodFigure(p.name, p.node, *served[p.name]) if p.name in served else PodFigure(p.name, p.node, None, None)
        for p in mine
    )
    values = {f.name: f.utilization for f in figures if f.utilization is not None}
    suggestion = suggest_replicas([f.name for f in figures], values, TARGET)
    return WorkloadSummary(taken_at, figures, suggestion, problem, saturation, phase)


def summarize_saturation(
    pods: Sequence[DemoPod], body: Mapping[str, Any] | None, terms: Mapping[str, str], problem: str | None = None
) -> SaturationSummary:
    """The Deployment's `pods` on inference_saturation from the adapter's MetricValueList `body` (None: no answer),
    and `terms`, each pod's driving term by name."""
    served = _served(body)
    mine = [
        PodSaturation(p.name, served[p.name][0] if p.name in served else None, terms.get(p.name))
        for p in _deployment_pods(pods)
    ]
    values = {p.name: p.percent for p in mine if p.percent is not None}
    suggestion = suggest_replicas([p.name for p in mine], values, Decimal(SATURATION_TARGET))
    return SaturationSummary(tuple(mine), suggestion, problem)


async def _ask(session: aiohttp.ClientSession, url: str) -> tuple[Mapping[str, Any] | None, str | None]:
    """The adapter's answer to `url`, or None and why not."""
    try:
        async with session.get(url) as response:
            body = await response.json(content_type=None)
            if response.status != 200:
                message = body.get("message") if isinstance(body, dict) else None
                return None, f"HTTP {response.status}: {message or 'no message'}"
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return None, f"the adapter did not answer: {exc or type(exc).__name__}"
    return (body, None) if isinstance(body, dict) else (None, "the adapter answered no MetricValueList")


async def read_saturation(
    session: aiohttp.ClientSession, adapter_url: str, pods: Sequence[DemoPod]
) -> SaturationSummary:
    """Ask the adapter for each pod's inference_saturation as an HPA would, and which term drives each (the same
    question with `metricLabelSelector=term=...`, one per term)."""
    body, problem = await _ask(session, f"{adapter_url}{SATURATION_QUERY}")
    terms: dict[str, str] = {}
    if body is not None:
        for term in DRIVERS:
            driven, _ = await _ask(session, f"{adapter_url}{SATURATION_QUERY}&metricLabelSelector=term%3D{term}")
            terms.update(dict.fromkeys(_served(driven), term))
    return summarize_saturation(pods, body, terms, problem)


async def read_summary(
    session: aiohttp.ClientSession,
    adapter_url: str,
    pods: Sequence[DemoPod],
    clock: Callable[[], float] = time.time,
    phase: str | None = None,
) -> WorkloadSummary:
    """Ask the adapter as an HPA would, and summarize the answer; `phase`: the traffic phase the pods are in."""
    try:
        async with session.get(f"{adapter_url}{HPA_QUERY}") as response:
            body = await response.json(content_type=None)
            if response.status != 200:
                message = body.get("message") if isinstance(body, dict) else None
                problem = f"HTTP {response.status}: {message or 'no message'}"
                return summarize(pods, None, clock(), problem, phase=phase)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        problem = f"the adapter did not answer: {exc or type(exc).__name__}"
        return summarize(pods, None, clock(), problem, phase=phase)
    saturation = await read_saturation(session, adapter_url, pods)
    return summarize(pods, body if isinstance(body, dict) else None, clock(), saturation=saturation, phase=phase)


def _clock_time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S")


def _hpa_line(summary: WorkloadSummary) -> str:
    s = summary.suggestion
    missing = f", {s.missing} pod(s) without a figure" if s.missing else ""
    return f"{s.current} -> {s.desired} replicas ({s.verdict}{missing})"


def _saturation_line(saturation: SaturationSummary) -> str:
    """inference_saturation: each pod's value and driving term, and what an HPA at 100 % would do, driven by which."""
    if saturation.problem is not None:
        return f"inference_saturation: no figures: {saturation.problem}"
    values = [p.percent for p in saturation.pods if p.percent is not None]
    average = f"avg {sum(values, Decimal(0)) / len(values):.1f}%" if values else "no figures"
    pods = ", ".join(f"{p.name} {_percent(p.percent)} {p.term or '-'}" for p in saturation.pods)
    s = saturation.suggestion
    missing = f", {s.missing} pod(s) without a figure" if s.missing else ""
    return (
        f"inference_saturation {average} ({pods}); HPA at {SATURATION_TARGET}%: {s.current} -> {s.desired} replicas "
        f"({s.verdict}{missing}), driven by {saturation.driver or '-'}"
    )


def _keda_line(keda: str | None) -> str:
    return "" if keda is None else f"KEDA trigger (activationTarget {ACTIVATION_TARGET}): {keda}"


def render_line(summary: WorkloadSummary, keda: str | None = None) -> str:
    """One log line: time, the traffic phase, each pod's figure, the average, the HPA's suggestion and, with
    `--keda-listen`, whether the scaler calls the demo's trigger active."""
    stamp = datetime.fromtimestamp(summary.taken_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if summary.phase is not None:
        stamp = f"{stamp} [traffic {summary.phase}]"
    if summary.problem is not None:
        return f"{stamp} {DEPLOYMENT}: no figures: {summary.problem}"
    pods = ", ".join(f"{p.name} {_percent(p.utilization)}" for p in summary.pods)
    average = summary.average
    shown = f"avg {average:.1f}%" if average is not None else "no figures"
    line = (
        f"{stamp} {DEPLOYMENT}: {len(summary.pods)} pods, gpu_utilization {shown} ({pods}); "
        f"HPA at {TARGET_UTILIZATION}%: {_hpa_line(summary)}"
    )
    if summary.saturation is not None:
        line = f"{line}; {_saturation_line(summary.saturation)}"
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
    if summary.phase is not None:
        lines.append(f"  traffic phase: {summary.phase}")
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
    if summary.saturation is not None:
        lines.append(_saturation_line(summary.saturation))
    if keda is not None:
        lines.append(_keda_line(keda))
    lines += ["", *footer]
    return "\n".join(lines)
