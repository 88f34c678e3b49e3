"""The report's plots as inline SVG, drawn by matplotlib's SVG backend: no browser, no display, no fonts from the
network (text is drawn as paths, so the SVG needs no font at all), and the same bytes for the same figures.

matplotlib is an optional dependency (`pip install 'gpu-pulse[report]'`): the services never import this module.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import UTC

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from report.model import Distribution, Timeline, WorkloadResult

mpl.rcParams.update(
    {
        "svg.fonttype": "path",  # glyphs as paths: the SVG references no font
        "svg.hashsalt": "gpu-pulse-report",  # stable element ids: the same figures give the same bytes
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
    }
)
HELD_COLOR = "#4c72b0"
BUSY_COLOR = "#55a868"
IDLE_COLOR = "#c44e52"
LIMIT_COLOR = "#8172b2"


def _svg(figure: Figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": "gpu-pulse-report"})
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # inline: without the XML declaration and doctype


def fleet_timeline(timeline: Timeline) -> str:
    """GPUs held and busy GPU-equivalents over the window."""
    figure = Figure(figsize=(9, 3.2))
    axes = figure.subplots()
    times = [t / 86400 for t in timeline.times]  # matplotlib's dates: days since 1970-01-01
    axes.fill_between(times, timeline.held, color=HELD_COLOR, alpha=0.25, step="pre", label="GPUs held")
    axes.step(times, timeline.held, color=HELD_COLOR, linewidth=1, where="pre")
    axes.fill_between(
        times, timeline.busy, color=BUSY_COLOR, alpha=0.6, step="pre", label="busy (utilization-weighted)"
    )
    axes.xaxis_date(tz=UTC)
    axes.set_ylabel("GPUs")
    axes.set_ylim(bottom=0)
    axes.legend(loc="upper left", frameon=False)
    axes.set_title("Fleet: GPUs held vs busy (UTC)")
    figure.autofmt_xdate()
    return _svg(figure)


def top_idle(results: Sequence[WorkloadResult], count: int = 15) -> str:
    """The workloads with the most idle GPU-hours (held minus busy), as bars split into busy and idle."""
    top = sorted(results, key=lambda r: -r.figures.idle_gpu_hours)[:count]
    top = [r for r in top if r.figures.idle_gpu_hours > 0]
    figure = Figure(figsize=(9, 0.35 * max(len(top), 3) + 0.9))
    axes = figure.subplots()
    labels = [f"{r.figures.key.namespace}/{r.figures.key.name}" for r in top][::-1]
    idle = [r.figures.idle_gpu_hours for r in top][::-1]
    busy = [r.figures.busy_gpu_hours for r in top][::-1]
    axes.barh(labels, busy, color=BUSY_COLOR, label="busy GPU-hours")
    axes.barh(labels, idle, left=busy, color=IDLE_COLOR, label="idle GPU-hours")
    axes.set_xlabel("GPU-hours")
    axes.set_title("Top idle holders", loc="left")
    if top:
        axes.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.12 - 1.2 / figure.get_figheight()), ncol=2, frameon=False
        )
    else:
        axes.text(0.5, 0.5, "no idle GPU-hours in the window", ha="center", va="center", transform=axes.transAxes)
    return _svg(figure)


def _bars(axes: Axes, distribution: Distribution, scale: float, span: float) -> None:
    """Each bin a bar ending at its upper edge, at least 1% of the axis (`span`) wide so that a steady figure shows."""
    total = sum(distribution.counts) or 1
    edges = [e * scale for e in distribution.edges]
    shares = [c / total * 100 for c in distribution.counts]
    if edges:
        widths = [max(e * 0.03, span / 100) for e in edges]
        axes.bar(edges, shares, width=[-w for w in widths], align="edge", color=HELD_COLOR)
    axes.set_ylabel("% of steps")


def workload_distribution(result: WorkloadResult) -> str:
    """A workload's utilization and memory over its steps, against the limits of what it holds and of the
    recommended profile."""
    f, rec = result.figures, result.recommendation
    figure = Figure(figsize=(9, 2.4))
    left, right = figure.subplots(1, 2)
    _bars(left, result.utilization, 100, 100)
    left.set_xlabel("device utilization (%)")
    left.set_xlim(0, 105)
    if rec.profile_gpu_share is not None:
        limit = rec.profile_gpu_share * 100 / (f.gpu_share if f.gpu_share > 0 else 1)
        left.axvline(min(limit, 104), color=LIMIT_COLOR, linestyle="--", label=f"{rec.profile} compute")
        left.legend(frameon=False, loc="upper right")
    limits = [f.gpu_memory_bytes or 0.0, rec.profile_memory_bytes or 0.0, *result.memory.edges]
    _bars(right, result.memory, 1 / 2**30, max(limits) / 2**30 or 1.0)
    right.set_xlabel("pod memory (GiB)")
    if f.gpu_memory_bytes:
        right.axvline(f.gpu_memory_bytes / 2**30, color="#888888", linestyle=":", label="GPU memory")
    if rec.profile_memory_bytes is not None:
        right.axvline(
            rec.profile_memory_bytes / 2**30, color=LIMIT_COLOR, linestyle="--", label=f"{rec.profile} memory"
        )
    if f.gpu_memory_bytes or rec.profile_memory_bytes is not None:
        right.legend(frameon=False, loc="upper right")
    right.set_xlim(left=0)
    return _svg(figure)
