"""One report: read the window's history, work out figures and recommendations, write index.html and report.json."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from report.document import report_json
from report.history import HELD, HistoryReader, Progress
from report.model import Report, WorkloadResult
from report.owners import KubernetesOwners, OwnerSource, PrometheusOwners
from report.page import report_html, utc_time
from report.prices import Prices
from report.prometheus import Connection, PrometheusClient, PrometheusError
from report.recommend import recommend
from report.settings import ReportSettings
from report.window import Window
from toolkit.credentials import BearerToken, client_ssl_context
from toolkit.thresholds import Thresholds

__all__ = ["PrometheusError", "connect", "report_from", "write_outputs"]


@dataclass(frozen=True, slots=True)
class Outputs:
    html: Path
    json: Path


def connect(settings: ReportSettings) -> tuple[Connection, OwnerSource | None]:
    """How to reach Prometheus (and the Kubernetes API, with --kubeconfig). ValueError (one line) when a file named by
    a flag cannot be used."""
    connection = Connection(
        url=settings.url,
        token=(
            BearerToken(settings.prometheus_token_file, "--prometheus-token-file")
            if settings.prometheus_token_file
            else None
        ),
        ssl_context=client_ssl_context(settings.prometheus_ca_file, "--prometheus-ca-file"),
        timeout=settings.prometheus_timeout,
        max_response_bytes=settings.prometheus_max_response_bytes,
        parallel=settings.prometheus_parallel,
    )
    if settings.kubeconfig is None:
        return connection, None
    from toolkit.kubeclient import api_client  # the kubernetes client is large: only with --kubeconfig

    return connection, KubernetesOwners(api_client(kubeconfig=settings.kubeconfig))


async def report_from(
    connection: Connection,
    window: Window,
    thresholds: Thresholds,
    prices: Prices,
    *,
    kube_owners: OwnerSource | None = None,
    max_points: int = 500_000,
    progress: Progress | None = None,
) -> Report:
    """The report over `window`, from the Prometheus `connection` reaches."""
    async with PrometheusClient(connection) as client:
        return await build_report(
            client, connection.url, window, thresholds, prices, kube_owners=kube_owners, max_points=max_points,
            progress=progress,
        )  # fmt: skip


async def build_report(
    client: PrometheusClient,
    url: str,
    window: Window,
    thresholds: Thresholds,
    prices: Prices,
    *,
    kube_owners: OwnerSource | None = None,
    max_points: int = 500_000,
    progress: Progress | None = None,
) -> Report:
    owners: list[tuple[str, OwnerSource]] = []
    if kube_owners is not None:
        owners.append(("the Kubernetes API", kube_owners))
    owners.append(("kube-state-metrics' history", PrometheusOwners(client, window.start, window.end)))
    reader = HistoryReader(
        client,
        window,
        idle_utilization=thresholds.idle_utilization,
        price_of=prices.of,
        owners=owners,
        max_points=max_points,
        progress=progress,
    )
    collected = await reader.read()
    step_hours = window.step / 3600
    results = []
    for totals in collected.workloads.values():
        figures = totals.figures(step_hours, collected.gpu_memory)
        utilization, memory = totals.distributions()
        results.append(WorkloadResult(figures, recommend(figures, thresholds), utilization, memory))
    results.sort(key=lambda r: (-r.recommendation.saving_gpu_hours, -r.figures.idle_gpu_hours, str(r.figures.key)))
    namespaces = tuple(
        (name, held * step_hours, known * step_hours, busy * step_hours, idle * step_hours)
        for name, (held, known, busy, idle) in sorted(collected.namespaces.items())
    )
    sources = ", ".join(f"{name} ({count} pods)" for name, count in collected.owner_sources.most_common())
    notes = _notes(results)
    return Report(
        prometheus_url=url,
        generated_at=time.time(),
        start=window.start,
        end=window.end,
        step=window.step,
        currency=prices.currency,
        priced=prices.priced,
        thresholds={k: float(v) for k, v in thresholds.model_dump().items()},
        owners=sources or "no pods",
        timeline=reader.timeline.timeline([window.time_of(i) for i in range(window.steps)]),
        workloads=tuple(results),
        namespaces=namespaces,
        queries=client.requests,
        bytes_read=client.bytes_read,
        notes=notes,
        nothing_to_judge=None if results else nothing_found(url, window),
    )


def nothing_found(url: str, window: Window) -> str:
    """The line for a window without a single pod series: what was looked for, where and when, and the usual
    causes. A report over it would read as a verdict ("every workload is kept") about nothing."""
    return (
        f"nothing to judge: no {HELD} series in {url} from {utc_time(window.start)} to {utc_time(window.end)} "
        "(too little history for --window, a Prometheus that does not scrape the gpu-pulse exporters, or no pod "
        "holding a GPU)"
    )


def _notes(results: Sequence[WorkloadResult]) -> tuple[str, ...]:
    notes = []
    unknown = sum(1 for r in results if r.figures.known_gpu_hours < r.figures.held_gpu_hours - 1e-9)
    if unknown:
        notes.append(
            f"{unknown} workloads held devices whose utilization was unknown part of the time (MIG instances of GPUs "
            "without GPM, time-sliced GPUs whose processes could not be tied to pods): their idle and busy figures "
            "cover the measured part only."
        )
    if any(r.figures.model == "unknown" for r in results):
        notes.append("Some GPUs' model was not found (no nvidia_gpu_up or gpu_pulse_gpu_up series): no MIG profile.")
    return tuple(notes)


def write_outputs(report: Report, directory: Path) -> Outputs:
    """Write both files, each first to a temporary name and then renamed: a reader never sees half a report."""
    directory.mkdir(parents=True, exist_ok=True)
    outputs = Outputs(directory / "index.html", directory / "report.json")
    for path, text in ((outputs.json, report_json(report)), (outputs.html, report_html(report))):
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    return outputs
