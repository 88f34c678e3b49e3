"""GPU waste and right-sizing: GPU-hours held, busy and idle over the dashboard's time range, per namespace and
workload, and the workloads idle long enough to reclaim. Reads the waste rules (rules/waste.py), in GPUs (a MIG
instance is its share of its GPU), with the idle threshold and the reclaim share of `gpu-pulse-report`'s defaults:
the report over the same window gives the same figures (docs/rightsizing.md).
"""

from __future__ import annotations

from dashboards.grafana import NAMESPACE_DRILL, WORKLOAD_DRILL, Board, Query, Variable, job_variable, matcher
from rules.jobs import Jobs
from rules.names import POD_SHARING
from toolkit.thresholds import Thresholds

NS = matcher(cluster="cluster", namespace="namespace")
PER_POD = matcher(job="job", cluster="cluster", namespace="namespace")
RECLAIM_SHARE = Thresholds.model_validate({}).reclaim_idle_share
WORKLOAD = "cluster, namespace, workload, workload_type"


def hours(record: str, by: str = "") -> str:
    """GPU-hours of `record` (GPUs) over the dashboard's range: its mean over the range times the range in hours."""
    grouped = f"sum by ({by}) " if by else "sum "
    return f"{grouped}(avg_over_time({record}{NS}[$__range])) * $__range_s / 3600"


def idle_share() -> str:
    """Per workload: the share of its measured GPU-time spent idle (the report's reclaim figure)."""
    return (
        f"sum by ({WORKLOAD}) (avg_over_time(namespace_workload:gpu_pulse_pod_idle_held_gpus:sum{NS}[$__range]))"
        f" / sum by ({WORKLOAD}) (avg_over_time(namespace_workload:gpu_pulse_pod_measured_gpus:sum{NS}[$__range]))"
    )


def waste_board(jobs: Jobs) -> Board:
    b = Board(
        uid="gpu-pulse-waste",
        title="GPU waste and right-sizing",
        description="GPU-hours held, busy and idle per namespace and workload over the time range, and the workloads "
        "to reclaim; gpu-pulse-report adds MIG and sharing recommendations.",
        tags=("gpu", "waste"),
        variables=(
            Variable("cluster", "Cluster", "label_values(namespace:gpu_pulse_pod_held_gpus:sum, cluster)"),
            job_variable(jobs.exporter, "gpu_pulse_snapshot_timestamp_seconds", "exporters"),
            Variable(
                "namespace",
                "Namespace",
                'label_values(namespace:gpu_pulse_pod_held_gpus:sum{cluster=~"$cluster"}, namespace)',
            ),
        ),
    )
    # the figures over the whole range are instant queries: one evaluation of `[$__range]` at its end, where a range
    # query would evaluate the same window again at every step (at 20,000 pods "Workloads to reclaim" took 18 to 29
    # s so: docs/performance.md)
    b.row("Over the time range")
    b.stat(
        "GPU-hours held",
        "GPUs held by pods, integrated over the time range (a MIG instance counts its share of its GPU).",
        "short",
        Query(hours("namespace:gpu_pulse_pod_held_gpus:sum")),
        width=6,
        instant=True,
    )
    b.stat(
        "GPU-hours busy",
        "Utilization-weighted GPU-hours: each device's utilization times its share of a GPU.",
        "short",
        Query(hours("namespace:gpu_pulse_pod_busy_gpus:sum")),
        width=6,
        instant=True,
    )
    b.stat(
        "GPU-hours idle",
        "Held but not busy, over the devices whose utilization is known.",
        "short",
        Query(hours("namespace:gpu_pulse_pod_idle_gpus:sum")),
        width=6,
        instant=True,
    )
    b.stat(
        "Workloads to reclaim",
        f"Workloads idle for at least {RECLAIM_SHARE:.0%} of their measured GPU-time.",
        "short",
        Query(f"count(({idle_share()}) >= {RECLAIM_SHARE}) or vector(0)"),
        width=6,
        instant=True,
    )
    b.row("Over time")
    b.stat(
        "Pods holding GPUs",
        "Pods holding a GPU, MIG instance or share now, as the exporters report them.",
        "short",
        Query(f"count(group by (cluster, namespace, pod) ({POD_SHARING}{PER_POD})) or vector(0)"),
        width=4,
        height=8,
        instant=True,  # a figure of now: the raw per-pod series counted once, not at every step (6 to 9 s so)
    )
    b.timeseries(
        "GPUs held and busy",
        "GPUs held by pods, and busy GPU-equivalents.",
        "short",
        Query(f"sum(namespace:gpu_pulse_pod_held_gpus:sum{NS})", "held"),
        Query(f"sum(namespace:gpu_pulse_pod_busy_gpus:sum{NS})", "busy"),
        width=10,
    )
    b.timeseries(
        "Idle GPUs by namespace",
        "Held but not busy GPUs of each namespace.",
        "short",
        Query(f"namespace:gpu_pulse_pod_idle_gpus:sum{NS}", "{{namespace}}"),
        width=10,
        stacked=True,
    )
    b.row("Who holds idle GPUs")
    b.table(
        "Idle GPU-hours by workload",
        "The 20 workloads with the most idle GPU-hours over the time range.",
        "short",
        Query(f"topk(20, {hours('namespace_workload:gpu_pulse_pod_idle_gpus:sum', WORKLOAD)})"),
        width=12,
        drill_down=WORKLOAD_DRILL,
    )
    b.table(
        "Idle share by workload",
        f"Share of each workload's measured GPU-time spent idle; at {RECLAIM_SHARE:.0%} or more the report says "
        "reclaim.",
        "percentunit",
        Query(f"topk(20, {idle_share()})"),
        width=12,
        drill_down=WORKLOAD_DRILL,
    )
    b.table(
        "GPU-hours by namespace",
        "Held, busy and idle GPU-hours of each namespace over the time range.",
        "short",
        Query(hours("namespace:gpu_pulse_pod_held_gpus:sum", "cluster, namespace"), "held"),
        Query(hours("namespace:gpu_pulse_pod_busy_gpus:sum", "cluster, namespace"), "busy"),
        Query(hours("namespace:gpu_pulse_pod_idle_gpus:sum", "cluster, namespace"), "idle"),
        drill_down=NAMESPACE_DRILL,
    )
    return b
