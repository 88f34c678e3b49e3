"""`index.html`: one self-contained file. Plots are inline SVG; no script, no font, no stylesheet or image from
anywhere else; a print stylesheet lays it out on paper (tables whole, plots not split across pages)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from html import escape

from report import plots
from report.model import Action, Report, WorkloadResult
from report.recommend import gib, percent

DETAILED = 30  # workloads shown with their own distribution plot: the largest savings
TABLE_ROWS = 500  # workloads listed in the table (report.json holds them all)
_COLUMNS = (
    ("namespace", True), ("workload", True), ("GPU", True), ("pods", False), ("GPUs (mean)", False),
    ("held", False), ("busy", False), ("idle", False), ("cost", False), ("util p50 / p95", False),
    ("memory p99 / peak", False), ("recommendation", True), ("saving (GPU-h)", False), ("saving (cost)", False),
)  # fmt: skip
HEADINGS = "".join(f'<th class="text">{t}</th>' if text else f"<th>{t}</th>" for t, text in _COLUMNS)

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto; max-width: 72em;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.meta { color: #666; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid #e4e4e4; padding: .3em .5em; text-align: right; vertical-align: top; }
th:first-child, td:first-child, td.text, th.text { text-align: left; }
.cards { display: flex; flex-wrap: wrap; gap: 1em; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: .6em 1em; min-width: 10em; }
.card b { display: block; font-size: 1.4em; }
.reclaim { color: #b03030; font-weight: 600; } .mig { color: #5a3fa0; font-weight: 600; }
.share { color: #2f6f9f; font-weight: 600; } .keep { color: #555; }
.nothing { border: 1px solid #b03030; border-radius: 6px; padding: .8em 1em; background: #fbeeee; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
.workload { border-top: 1px solid #ddd; padding-top: .5em; margin-top: 1.2em; }
ul.why { margin: .3em 0 .6em 1.2em; padding: 0; }
tr.row td { border-bottom: none; } tr.why td { text-align: left; color: #555; font-size: 12px; padding-top: 0; }
@media print {
  body { margin: 0; max-width: none; font-size: 10pt; }
  h2 { break-after: avoid; } figure, .workload, tr, .card { break-inside: avoid; } tr.row { break-after: avoid; }
  a { color: inherit; text-decoration: none; }
}
"""


def _money(value: float, report: Report) -> str:
    return f"{value:,.2f} {escape(report.currency)}".strip() if report.priced else "-"


def utc_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _row(result: WorkloadResult, report: Report) -> str:
    f, rec = result.figures, result.recommendation
    hours = (report.end - report.start) / 3600
    action = f'<span class="{rec.action}">{rec.action}{" " + escape(rec.profile) if rec.profile else ""}</span>'
    cells = (
        f'<td class="text">{escape(f.key.namespace)}</td>',
        f'<td class="text">{escape(f.key.kind)}/{escape(f.key.name)}</td>',
        f'<td class="text">{escape(f.model)}{" " + escape(f.profile) if f.profile else ""}</td>',
        f"<td>{f.pods}</td>",
        f"<td>{f.held_gpu_hours / hours if hours else 0:,.2f}</td>",
        f"<td>{f.held_gpu_hours:,.1f}</td>",
        f"<td>{f.busy_gpu_hours:,.1f}</td>",
        f"<td>{f.idle_gpu_hours:,.1f}</td>",
        f"<td>{_money(f.cost, report)}</td>",
        f"<td>{percent(f.utilization_p50)} / {percent(f.utilization_p95)}</td>",
        f"<td>{gib(f.memory_p99)} / {gib(f.memory_peak)}</td>",
        f'<td class="text">{action}</td>',
        f"<td>{rec.saving_gpu_hours:,.1f}</td>",
        f"<td>{_money(rec.saving_cost, report)}</td>",
    )
    why = escape("; ".join(rec.why))
    return f'<tr class="row">{"".join(cells)}</tr><tr class="why"><td colspan="{len(cells)}">{why}</td></tr>'


def _detail(result: WorkloadResult, report: Report) -> str:
    f, rec = result.figures, result.recommendation
    why = "".join(f"<li>{escape(line)}</li>" for line in rec.why)
    sm = (
        f"; SM activity p50 {percent(f.sm_active_p50)}, p95 {percent(f.sm_active_p95)}"
        if f.sm_active_p50 is not None
        else ""
    )
    return (
        f'<div class="workload"><h3>{escape(str(f.key))}: <span class="{rec.action}">{rec.action}'
        f"{' to ' + escape(rec.profile) if rec.profile else ''}</span></h3>"
        f'<p class="meta">{f.pods} pod{"" if f.pods == 1 else "s"} on {escape(f.model)} ({f.placement}, '
        f"{f.gpu_share:.3g} GPU per device, up to "
        f"{f.devices_per_pod} per pod): held {f.held_gpu_hours:,.1f}, busy {f.busy_gpu_hours:,.1f}, idle "
        f"{f.idle_gpu_hours:,.1f} GPU-hours; cost {_money(f.cost, report)}{sm}</p>"
        f'<ul class="why">{why}</ul><figure>{plots.workload_distribution(result)}</figure></div>'
    )


def _namespaces(report: Report) -> Iterable[str]:
    """Busy and idle cover the GPU-hours whose utilization was known; the busy share is of those, and "unknown" where
    none was (MIG instances of GPUs without GPM): never a 0% that reads as idle."""
    for namespace, held, known, busy, idle in report.namespaces:
        measured = known > 0
        yield (
            f'<tr><td class="text">{escape(namespace)}</td><td>{held:,.1f}</td><td>{known:,.1f}</td>'
            f"<td>{f'{busy:,.1f}' if measured else 'unknown'}</td><td>{f'{idle:,.1f}' if measured else 'unknown'}</td>"
            f"<td>{percent(busy / known if measured else None)}</td></tr>"
        )


def _nothing(reason: str) -> str:
    """The page of a window without a single pod series: it says so, and shows no figures or plots."""
    return (
        f'<p class="nothing"><b>Nothing to judge.</b> {escape(reason.removeprefix("nothing to judge: "))}. No '
        "workload is kept or reclaimed on this evidence: widen --window, or point --prometheus-url at the Prometheus "
        "that scrapes the gpu-pulse exporters.</p>"
    )


def report_html(report: Report) -> str:
    results = report.workloads
    held = sum(r.figures.held_gpu_hours for r in results)
    busy = sum(r.figures.busy_gpu_hours for r in results)
    idle = sum(r.figures.idle_gpu_hours for r in results)
    saving = sum(r.recommendation.saving_gpu_hours for r in results)
    saving_cost = sum(r.recommendation.saving_cost for r in results)
    counts = {a: sum(1 for r in results if r.recommendation.action is a) for a in Action}
    cards = (
        ("GPU-hours held", f"{held:,.1f}"),
        ("busy (utilization-weighted)", f"{busy:,.1f}"),
        ("idle", f"{idle:,.1f}"),
        ("cost", _money(sum(r.figures.cost for r in results), report)),
        ("saving recommended", f"{saving:,.1f} GPU-hours"),
        ("saving, cost", _money(saving_cost, report)),
        ("workloads", " / ".join(f"{counts[a]} {a}" for a in Action)),
    )
    thresholds = ", ".join(f"{k} {v:g}" for k, v in report.thresholds.items())
    table = "".join(_row(r, report) for r in results[:TABLE_ROWS])
    more = (
        f"<p class='meta'>{len(results) - TABLE_ROWS} more workloads in report.json.</p>"
        if len(results) > TABLE_ROWS
        else ""
    )
    detailed = [r for r in results if r.recommendation.action is not Action.KEEP][:DETAILED]
    notes = "".join(f"<li>{escape(n)}</li>" for n in report.notes)
    if report.nothing_to_judge is not None:
        body = _nothing(report.nothing_to_judge)
    else:
        shown = "".join(f'<div class="card">{escape(k)}<b>{escape(v)}</b></div>' for k, v in cards)
        body = f"""<div class="cards">{shown}</div>
<h2>Fleet</h2>
<figure>{plots.fleet_timeline(report.timeline)}</figure>
<figure>{plots.top_idle(results)}</figure>
<h2>Namespaces</h2>
<table><thead><tr><th>namespace</th><th>GPU-hours held</th><th>measured</th><th>busy</th><th>idle</th>
<th>busy share</th></tr></thead>
<tbody>{"".join(_namespaces(report))}</tbody></table>
<h2>Workloads</h2>
<table><thead><tr>{HEADINGS}</tr></thead><tbody>{table}</tbody></table>{more}
<h2>Recommendations, with the figures behind them</h2>
{"".join(_detail(r, report) for r in detailed) or "<p>No workload calls for a change: every one is kept.</p>"}"""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>GPU waste and right-sizing report</title>
<style>{STYLE}</style></head>
<body>
<h1>GPU waste and right-sizing</h1>
<p class="meta">{utc_time(report.start)} to {utc_time(report.end)} ({(report.end - report.start) / 3600:,.1f} hours,
figures every {report.step} s) from {escape(report.prometheus_url)}; workloads from {escape(report.owners)}; generated
{utc_time(report.generated_at)}. Thresholds: {escape(thresholds)} (docs/rightsizing.md).</p>
{body}
{f"<h2>Notes</h2><ul>{notes}</ul>" if notes else ""}
</body></html>
"""
