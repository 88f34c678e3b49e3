"""`report.json`: the report's figures for machines and CI, the same the HTML shows."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from report.model import Report, WorkloadResult

SCHEMA = "gpu-pulse.dev/report/v1"


def _workload(result: WorkloadResult, hours: float) -> dict[str, Any]:
    f, rec = result.figures, result.recommendation
    figures = asdict(f)
    figures["gpus_mean"] = f.held_gpu_hours / hours if hours > 0 else 0.0
    figures.pop("key")
    figures["models"] = [{"model": m, "gpu_hours": h} for m, h in f.models]
    figures["idle_share"] = f.idle_share
    recommendation = asdict(rec)
    recommendation["why"] = list(rec.why)
    return {
        "cluster": f.key.cluster,
        "namespace": f.key.namespace,
        "kind": f.key.kind,
        "name": f.key.name,
        "figures": figures,
        "recommendation": recommendation,
    }


def report_document(report: Report) -> dict[str, Any]:
    hours = (report.end - report.start) / 3600
    workloads = [_workload(r, hours) for r in report.workloads]
    totals = {
        "held_gpu_hours": sum(r.figures.held_gpu_hours for r in report.workloads),
        "busy_gpu_hours": sum(r.figures.busy_gpu_hours for r in report.workloads),
        "idle_gpu_hours": sum(r.figures.idle_gpu_hours for r in report.workloads),
        "cost": sum(r.figures.cost for r in report.workloads),
        "saving_gpu_hours": sum(r.recommendation.saving_gpu_hours for r in report.workloads),
        "saving_cost": sum(r.recommendation.saving_cost for r in report.workloads),
    }
    return {
        "apiVersion": SCHEMA,
        "nothing_to_judge": report.nothing_to_judge,  # the window held no pod series: no figure below is a verdict
        "prometheus": report.prometheus_url,
        "generated_at": report.generated_at,
        "window": {"start": report.start, "end": report.end, "step_seconds": report.step},
        "currency": report.currency,
        "priced": report.priced,
        "thresholds": report.thresholds,
        "owners": report.owners,
        "totals": totals,
        # busy and idle cover the known GPU-hours; busy_share is null where none was known (MIG without GPM)
        "namespaces": [
            {
                "namespace": n,
                "held_gpu_hours": h,
                "known_gpu_hours": k,
                "busy_gpu_hours": b,
                "idle_gpu_hours": i,
                "busy_share": b / k if k > 0 else None,
            }
            for n, h, k, b, i in report.namespaces
        ],
        "timeline": {
            "times": list(report.timeline.times),
            "held": list(report.timeline.held),
            "known": list(report.timeline.known),
            "busy": list(report.timeline.busy),
        },
        "workloads": workloads,
        "queries": report.queries,
        "bytes_read": report.bytes_read,
        "notes": list(report.notes),
    }


def report_json(report: Report) -> str:
    return json.dumps(report_document(report), indent=1, sort_keys=False, allow_nan=False) + "\n"
