"""The `/` page: what an operator who port-forwards to a node wants at a glance. Plain HTML, inline SVG, no JavaScript.

Node and driver; every GPU with its model, state, utilization, memory and pods; MIG instances under their GPU; a
sparkline of utilization and memory over the last minutes from the collector's sample buffers. Every string that comes
from the outside (model names, pod names, node name) is HTML-escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from html import escape

from exporter.collection import HistoryPoint
from exporter.snapshot import DeviceReading, MigIdentity, PodDeviceUse, Snapshot

History = Callable[[str, float], tuple[HistoryPoint, ...]]

WINDOW_SECONDS = 300.0
_SPARK_W, _SPARK_H = 180, 36
_GIB = 1024**3

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2430;background:#fbfbfc}
h1{font-size:1.3em;margin:0 0 .2em}
.meta{color:#5b6473;margin-bottom:1em}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.35em .6em;border-bottom:1px solid #e3e6ea;vertical-align:top}
th{background:#f0f2f5;font-weight:600}
tr.mig td:first-child{padding-left:1.8em}
.up{color:#17803d;font-weight:600}.down{color:#b42318;font-weight:600}
.spark{display:block}.muted{color:#8a93a3}
ul{margin:0;padding-left:1.1em}
"""


UTIL_COLOUR, MEMORY_COLOUR = "#2563eb", "#9333ea"
# what the two sparklines of a row are: utilization (0-100 %) above, memory used (0 to the device's size) below
_LEGEND = (
    f'<br><span class="muted"><span style="color:{UTIL_COLOUR}">&#9644;</span> utilization, 0-100 % '
    f'<span style="color:{MEMORY_COLOUR}">&#9644;</span> memory used, 0 to its size</span>'
)


def _fmt_percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} %"


def _fmt_memory(used: float | None, total: float | None) -> str:
    if used is None:
        return "n/a"
    if total:
        return f"{used / _GIB:.1f} / {total / _GIB:.1f} GiB ({100 * used / total:.0f} %)"
    return f"{used / _GIB:.1f} GiB"


def sparkline(points: Sequence[tuple[float, float]], low: float, high: float, *, title: str, colour: str) -> str:
    """An inline SVG polyline of (time, value) points scaled into [low, high]; a dash when there are fewer than two."""
    if len(points) < 2 or not high > low:
        return '<span class="muted">-</span>'
    t0, t1 = points[0][0], points[-1][0]
    span = (t1 - t0) or 1.0
    coords = []
    for at, value in points:
        x = (at - t0) / span * (_SPARK_W - 2) + 1
        clamped = min(max(value, low), high)
        y = _SPARK_H - 1 - (clamped - low) / (high - low) * (_SPARK_H - 2)
        coords.append(f"{x:.1f},{y:.1f}")
    return (
        f'<svg class="spark" width="{_SPARK_W}" height="{_SPARK_H}" viewBox="0 0 {_SPARK_W} {_SPARK_H}" '
        f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>'
        f'<rect width="{_SPARK_W}" height="{_SPARK_H}" fill="#f4f6f8"/>'
        f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{" ".join(coords)}"/></svg>'
    )


def _sparks(reading: DeviceReading, history: History, window: float) -> str:
    try:
        points = history(reading.uuid, window)
    except Exception:  # the page must render even if a buffer cannot be read
        points = ()
    minutes = f"{window / 60:g} min"
    util = [(p.at, p.utilization_percent) for p in points if p.utilization_percent is not None]
    mem = [(p.at, p.memory_used_bytes) for p in points if p.memory_used_bytes is not None]
    total = reading.values.get("fb_total") or max((m for _, m in mem), default=0.0)
    return sparkline(util, 0.0, 100.0, title=f"utilization, last {minutes}", colour=UTIL_COLOUR) + sparkline(
        mem, 0.0, float(total), title=f"memory used, last {minutes}", colour=MEMORY_COLOUR
    )


def _utilization(reading: DeviceReading) -> str:
    """A GPU's NVML utilization; a MIG instance's graphics-engine activity (GPM, Hopper and newer), the figure its
    sparkline draws (exporter/nvml/collector.py, `_remember`): NVML gives no utilization per MIG instance."""
    if not reading.is_mig:
        return _fmt_percent(reading.values.get("gpu_util"))
    active = reading.values.get("gr_engine_active")
    if active is None:
        return '<span class="muted">unknown: no per-instance figure without GPM (before Hopper)</span>'
    return f'{active:.0f} % <span class="muted">(engine active, GPM)</span>'


def _pods_cell(uses: Sequence[PodDeviceUse]) -> str:
    if not uses:
        return '<span class="muted">none</span>'
    items = []
    for use in uses:
        pod = use.pod
        share = f" ({escape(str(use.share))}"
        if use.utilization_percent is not None:
            share += f", {use.utilization_percent:.0f} %"
        share += ")"
        items.append(
            f"<li>{escape(pod.namespace)}/{escape(pod.name)} <span class='muted'>{escape(pod.container)}"
            f"{share}</span></li>"
        )
    return "<ul>" + "".join(items) + "</ul>"


def _row(reading: DeviceReading, uses: Sequence[PodDeviceUse], history: History, window: float) -> str:
    ident = reading.identity
    gpu = reading.gpu
    if isinstance(ident, MigIdentity):
        name = f"MIG {escape(ident.profile)} (GI {ident.gpu_instance_id})"
        model, css = escape(ident.uuid), "mig"
    else:
        name = f"GPU {gpu.index}"
        model, css = f"{escape(gpu.model)}<br><span class='muted'>{escape(gpu.uuid)}</span>", "gpu"
    state = '<span class="up">up</span>' if reading.up else '<span class="down">down</span>'
    values = reading.values
    cells = [
        name,
        model,
        state,
        _utilization(reading) if reading.up else "",
        _fmt_memory(values.get("fb_used"), values.get("fb_total")) if reading.up else "",
        _pods_cell(uses),
        _sparks(reading, history, window) if reading.up else "",
    ]
    return f'<tr class="{css}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def render_page(
    snapshot: Snapshot | None, history: History, *, window_seconds: float = WINDOW_SECONDS, readiness: str = ""
) -> str:
    """The whole page for the newest snapshot (or a short "no data yet" page before the first one)."""
    head = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>gpu-pulse{' · ' + escape(snapshot.node) if snapshot else ''}</title>"
        f"<style>{_STYLE}</style></head><body>"
    )
    links = '<p><a href="/metrics">/metrics</a> · <a href="/pods">/pods</a> · <a href="/readyz">/readyz</a></p>'
    if snapshot is None:
        return f"{head}<h1>gpu-pulse</h1><p>No snapshot yet. {escape(readiness)}</p>{links}</body></html>"
    drivers = sorted({d.gpu.driver_version for d in snapshot.devices if d.gpu.driver_version})
    taken = datetime.fromtimestamp(snapshot.taken_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    meta = (
        f"driver {escape(', '.join(drivers) or 'unknown')} · {len([d for d in snapshot.devices if not d.is_mig])} GPUs"
        f" · snapshot {taken}"
    )
    if readiness:
        meta += f" · {escape(readiness)}"
    by_device: dict[str, list[PodDeviceUse]] = {}
    for use in snapshot.pods:
        by_device.setdefault(use.device_uuid, []).append(use)
    header = "".join(
        f"<th>{h}</th>"
        for h in (
            "device",
            "model / UUID",
            "state",
            "utilization",
            "memory",
            "pods",
            f"last {window_seconds / 60:g} min {_LEGEND}",
        )
    )
    rows = "".join(
        _row(reading, by_device.get(reading.uuid, ()), history, window_seconds) for reading in snapshot.devices
    )
    return (
        f"{head}<h1>gpu-pulse · {escape(snapshot.node)}</h1><div class='meta'>{meta}</div>{links}"
        f"<table><thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table></body></html>"
    )
