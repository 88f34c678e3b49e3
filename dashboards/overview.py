"""Cluster GPU overview: fleet utilization, allocation against use, idle cost, health. Reads recorded series, so it
works with exporters of either dialect; only the exporters' own health (up, the oldest snapshots now) reads their own
series, the same in both.
"""

from __future__ import annotations

from dashboards.grafana import NAMESPACE_DRILL, RECORDED, Board, Query, Variable, job_variable, matcher
from rules.jobs import Jobs
from rules.names import (
    CLUSTER_SNAPSHOT_AGE_MAX,
    CLUSTER_SNAPSHOT_AGE_MEDIAN,
    CLUSTER_UTIL_COUNT,
    CLUSTER_UTIL_SUM,
)

C = matcher(cluster="cluster")
TARGETS = matcher(job="job", cluster="cluster")
# the mean utilization of the whole GPUs: the same mean as `avg` over every GPU's recorded series, read from one sum
# and one count per cluster (an `avg` over 20,000 GPUs' series at each step of the hour costs seconds)
FLEET_UTIL = f"sum({CLUSTER_UTIL_SUM}{C}) / sum({CLUSTER_UTIL_COUNT}{C})"


def overview_board(jobs: Jobs) -> Board:
    b = Board(
        uid="gpu-pulse-cluster",
        title="GPU cluster overview",
        description="The GPU fleet at a glance: how busy it is, how much of what is allocated is used, what idles, "
        "and what is broken. Reads the gpu-pulse recording rules.",
        tags=("gpu", "cluster"),
        variables=(
            Variable("cluster", "Cluster", "label_values(node:nvidia_gpu_up:count, cluster)"),
            job_variable(jobs.exporter, "gpu_pulse_snapshot_timestamp_seconds", "exporters"),
        ),
    )
    b.row("Fleet")
    b.stat("GPUs", "Physical GPUs the exporters know.", "short", Query(f"sum(node:nvidia_gpu_up:count{C})"))
    b.stat("GPUs lost", "GPUs that stopped answering NVML.", "short",
           Query(f"sum(node:nvidia_gpu_up:count{C}) - sum(node:nvidia_gpu_up:sum{C})"))  # fmt: skip
    b.stat(
        "Utilization",
        "Mean utilization of the whole GPUs (MIG-enabled GPUs do not report one).",
        "percentunit",
        Query(FLEET_UTIL),
        instant=True,  # a figure of now: once, not at each step (the panel below draws the hour)
    )
    b.stat(
        "Memory allocated",
        "Share of all GPU framebuffer that is allocated.",
        "percentunit",
        Query(f"sum(node:nvidia_gpu_memory_used_bytes:sum{C}) / sum(node:nvidia_gpu_memory_total_bytes:sum{C})"),
    )
    b.stat("Power", "Power draw of all GPUs.", "watt", Query(f"sum(node:nvidia_gpu_power_watts:sum{C})"))
    b.stat(
        "Devices allocated",
        "Share of the allocatable devices (whole GPUs and MIG instances) that pods hold.",
        "percentunit",
        Query(f"sum(node:gpu_pulse_pod_allocated_devices:sum{C}) / sum(node:gpu_pulse_allocatable_devices:count{C})"),
    )
    b.timeseries(
        "Fleet utilization",
        "Mean utilization of whole GPUs, and the share of framebuffer allocated.",
        "percentunit",
        Query(FLEET_UTIL, "utilization"),
        Query(
            f"sum(node:nvidia_gpu_memory_used_bytes:sum{C}) / sum(node:nvidia_gpu_memory_total_bytes:sum{C})",
            "memory allocated",
        ),
        max_value=1,
        min_interval=RECORDED,
    )
    b.timeseries(
        "Utilization by node",
        "Mean utilization of each node's whole GPUs.",
        "percentunit",
        Query(f"node:nvidia_gpu_utilization_ratio:avg{C}", "{{node}}"),
        max_value=1,
        min_interval=RECORDED,
    )
    b.row("Allocation and use")
    b.timeseries(
        "Devices: allocatable, allocated, busy",
        "Devices pods can get (whole GPUs and MIG instances), devices pods hold (a GPU shared by n pods counts 1/n "
        "per pod), and busy GPU-equivalents (the sum of the pods' utilization).",
        "short",
        Query(f"sum(node:gpu_pulse_allocatable_devices:count{C})", "allocatable"),
        Query(f"sum(namespace:gpu_pulse_pod_allocated_devices:sum{C})", "allocated"),
        Query(f"sum(namespace:gpu_pulse_pod_gpu_utilization_ratio:sum{C})", "busy"),
        min_interval=RECORDED,
    )
    b.timeseries(
        "Allocation efficiency by namespace",
        "Busy GPU-equivalents over the allocation they were measured on (devices without a utilization figure, "
        "such as MIG instances, are left out).",
        "percentunit",
        Query(f"namespace:gpu_pulse_pod_allocated_devices_used:ratio{C}", "{{namespace}}"),
        max_value=1,
        min_interval=RECORDED,
    )
    b.row("Idle cost")
    b.timeseries(
        "Idle devices by namespace",
        "Allocated but unused devices: allocation minus utilization, per namespace.",
        "short",
        Query(f"namespace:gpu_pulse_pod_idle_devices:sum{C}", "{{namespace}}"),
        stacked=True,
        min_interval=RECORDED,
    )
    b.table(
        "Idle GPU-hours in the time range",
        "Idle device-hours per namespace over the dashboard's time range: the mean idle devices times the hours.",
        "h",
        Query(
            f"sort_desc(avg_over_time(namespace:gpu_pulse_pod_idle_devices:sum{C}[$__range]) * $__range_s / 3600)",
            "{{namespace}}",
        ),
        width=12,
        drill_down=NAMESPACE_DRILL,
    )
    b.row("Health")
    b.table(
        "GPU state",
        "Every GPU with its NVML state (0: lost), lost ones first.",
        "bool",
        Query(f"sort(node_gpu:nvidia_gpu_up:max{C})"),
        width=12,
    )
    b.timeseries(
        "Firing GPU alerts",
        "gpu-pulse alerts firing now, by name.",
        "short",
        Query(
            'count by (alertname) (ALERTS{alertstate="firing", alertname=~"GPU.+", cluster=~"$cluster"})',
            "{{alertname}}",
        ),
        Query('count(ALERTS{alertstate="firing", alertname=~"GPU.+", cluster=~"$cluster"}) or vector(0)', "total"),
        width=12,
    )
    b.timeseries(
        "Exporters up",
        "Share of the gpu-pulse exporters Prometheus can scrape.",
        "percentunit",
        Query(f"avg(up{TARGETS})", "exporters up"),
        max_value=1,
    )
    b.timeseries(
        "Snapshot age at scrape",
        "How old the exporters' snapshots were when scraped: the oldest and the median exporter (with several "
        "clusters chosen, the highest of their medians). Above a few poll intervals a poll loop is stuck or too slow: "
        "the table below names the exporter.",
        "s",
        Query(f"max({CLUSTER_SNAPSHOT_AGE_MAX}{C})", "oldest"),
        Query(f"max({CLUSTER_SNAPSHOT_AGE_MEDIAN}{C})", "median"),
        min_interval=RECORDED,
    )
    age = f"timestamp(gpu_pulse_snapshot_timestamp_seconds{TARGETS}) - gpu_pulse_snapshot_timestamp_seconds{TARGETS}"
    b.table(
        "Oldest snapshots now",
        "The ten exporters whose snapshots were oldest at their last scrape, with their age in seconds.",
        "s",
        Query(f"topk(10, {age})", "{{node}}"),
    )
    return b
