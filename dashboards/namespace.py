"""Namespace and workload: per-pod GPU figures, workloads from kube-state-metrics, and how shared GPUs are split.
Reads recorded series and the per-pod series, which both dialects publish alike.

The board opens on `All` namespaces and workloads, which at fleet size is every pod of the cluster: 20,000 GPU pods
are 20,000 lines in a per-pod panel, more than anyone reads and, as range queries, seconds of Prometheus' time each
(docs/performance.md). So every panel that draws one line per pod, workload or shared GPU draws the TOP (TOP_GPUS)
of them with the highest mean over the dashboard's time range, chosen once per query (`@ end()`: one evaluation, the
same lines at every step) among the chosen namespaces and workloads; a choice of TOP or fewer draws them all. The
per-pod figures are the recorded ones (`namespace_pod:*`), restricted to the chosen workloads by `and` against the
owner series (the same answer as a `group_left` join, without building a joined series per pod at every step).
"""

from __future__ import annotations

from dashboards.grafana import RECORDED, Board, Query, Variable, job_variable, matcher
from rules.jobs import Jobs
from rules.names import BY_POD, BY_WORKLOAD, OWNER
from rules.pods import NAMESPACE_SHARES

NS = matcher(cluster="cluster", namespace="namespace")
WORKLOAD = matcher(cluster="cluster", namespace="namespace", workload="workload")
# the per-pod series as the exporters publish them (the recorded ones above no longer carry a job)
PER_POD = matcher(job="job", cluster="cluster", namespace="namespace")
SHARED = PER_POD[:-1] + ', share="process"}'
TOP = 20  # the most pods or workloads a panel draws: those with the highest mean over the time range
TOP_GPUS = 10  # the most shared GPUs a split panel draws (each with every pod on it)
SHARED_GPU = "node, gpu"


def top(series: str, by: str, among: str = "") -> str:
    """`series` (a selector) for the TOP label sets `by` with the highest mean over the dashboard's range, chosen
    among those `among` also has (an `and` operand; empty: all). The choice is evaluated once, at the end of the
    range, and draws the same lines at every step."""
    ranked = f"avg_over_time({series}[$__range] @ end())"
    if among:
        ranked = f"{ranked} and on ({by}) {among}"
    return f"{series} and on ({by}) topk({TOP}, {ranked})"


def top_pods(series: str) -> str:
    """`series` (recorded per pod) for the TOP pods of the chosen workloads with the highest mean over the range."""
    return top(f"{series}{NS}", BY_POD, f"present_over_time({OWNER}{WORKLOAD}[$__range] @ end())")


def top_workloads(series: str) -> str:
    """`series` (recorded per workload) for the TOP workloads with the highest mean over the range."""
    return top(f"{series}{WORKLOAD}", BY_WORKLOAD)


def shared_split(series: str) -> str:
    """Each pod's part of `series` (a per-pod series) on a shared GPU, for the TOP_GPUS shared GPUs whose pods' parts
    sum highest, as a mean over the range."""
    split = f"sum by ({SHARED_GPU}, namespace, pod) ({series}{SHARED})"
    ranked = f"sum by ({SHARED_GPU}) (avg_over_time({series}{SHARED}[$__range] @ end()))"
    return f"{split} and on ({SHARED_GPU}) topk({TOP_GPUS}, {ranked})"


def namespace_board(jobs: Jobs) -> Board:
    b = Board(
        uid="gpu-pulse-namespace",
        title="GPU namespace and workload",
        description="GPU use of namespaces, their workloads and pods, and how shared GPUs are split between pods. "
        f"Panels with a line per pod or workload draw the {TOP} with the highest mean over the time range (shared "
        f"GPUs: the {TOP_GPUS} busiest or fullest); pick namespaces or workloads to narrow the choice.",
        tags=("gpu", "namespace"),
        variables=(
            Variable("cluster", "Cluster", "label_values(node:nvidia_gpu_up:count, cluster)"),
            job_variable(jobs.exporter, "gpu_pulse_snapshot_timestamp_seconds", "exporters"),
            Variable(
                "namespace",
                "Namespace",
                'label_values(namespace:gpu_pulse_pod_allocated_devices:sum{cluster=~"$cluster"}, namespace)',
            ),
            Variable(
                "workload",
                "Workload",
                f'label_values({OWNER}{{cluster=~"$cluster", namespace=~"$namespace"}}, workload)',
                description="Deployment, StatefulSet, Job ... from kube-state-metrics; `unknown` type: no owner known",
            ),
        ),
    )
    b.row("Namespaces")
    b.timeseries(
        "Mean GPU utilization",
        "Mean of every pod's utilization figure on every GPU it holds (on a shared GPU: the pod's share).",
        "percentunit",
        Query(f"namespace:gpu_pulse_pod_gpu_utilization_ratio:avg{NS}", "{{namespace}}"),
        max_value=1,
        min_interval=RECORDED,
    )
    b.timeseries(
        "Devices allocated and busy",
        "Devices the namespace's pods hold, and busy GPU-equivalents (sum of their utilization).",
        "short",
        Query(f"namespace:gpu_pulse_pod_allocated_devices:sum{NS}", "{{namespace}} allocated"),
        Query(f"namespace:gpu_pulse_pod_gpu_utilization_ratio:sum{NS}", "{{namespace}} busy"),
        min_interval=RECORDED,
    )
    b.timeseries(
        "Memory used",
        "Framebuffer the namespace's pods use.",
        "bytes",
        Query(f"namespace:gpu_pulse_pod_gpu_memory_used_bytes:sum{NS}", "{{namespace}}"),
        min_interval=RECORDED,
    )
    b.timeseries(
        "Power",
        "The namespace's part of GPU power draw, and of energy use over 5 minutes.",
        "watt",
        Query(f"namespace:gpu_pulse_pod_gpu_power_watts:sum{NS}", "{{namespace}} power"),
        Query(f"namespace:gpu_pulse_pod_gpu_energy_joules:rate5m{NS}", "{{namespace}} energy rate"),
        min_interval=RECORDED,
    )
    b.row("Workloads")
    b.timeseries(
        "GPU utilization by workload",
        f"Mean GPU utilization of each workload's pods (the {TOP} workloads with the highest mean over the time "
        "range).",
        "percentunit",
        Query(
            top_workloads("namespace_workload:gpu_pulse_pod_gpu_utilization_ratio:avg"),
            "{{workload}} ({{workload_type}})",
        ),
        max_value=1,
        min_interval=RECORDED,
    )
    b.timeseries(
        "Devices by workload",
        f"Devices each workload's pods hold (the {TOP} workloads holding the most over the time range).",
        "short",
        Query(
            top_workloads("namespace_workload:gpu_pulse_pod_allocated_devices:sum"), "{{workload}} ({{workload_type}})"
        ),
        min_interval=RECORDED,
    )
    b.timeseries(
        "Memory by workload",
        f"Framebuffer each workload's pods use (the {TOP} workloads using the most over the time range).",
        "bytes",
        Query(
            top_workloads("namespace_workload:gpu_pulse_pod_gpu_memory_used_bytes:sum"),
            "{{workload}} ({{workload_type}})",
        ),
        min_interval=RECORDED,
    )
    b.timeseries(
        "Power by workload",
        f"Each workload's part of GPU power draw (the {TOP} workloads drawing the most over the time range).",
        "watt",
        Query(
            top_workloads("namespace_workload:gpu_pulse_pod_gpu_power_watts:sum"), "{{workload}} ({{workload_type}})"
        ),
        min_interval=RECORDED,
    )
    b.row("Pods")
    b.timeseries(
        "GPU utilization by pod",
        "Mean utilization over each pod's GPUs: what the adapter serves as gpu_utilization (in percent); the "
        f"{TOP} pods of the chosen workloads with the highest mean over the time range.",
        "percentunit",
        Query(top_pods("namespace_pod:gpu_pulse_pod_gpu_utilization_ratio:avg"), "{{pod}}"),
        max_value=1,
        min_interval=RECORDED,
    )
    b.timeseries(
        "Memory by pod",
        f"Framebuffer each pod uses over its GPUs; the {TOP} pods of the chosen workloads using the most over the "
        "time range.",
        "bytes",
        Query(top_pods("namespace_pod:gpu_pulse_pod_gpu_memory_used_bytes:sum"), "{{pod}}"),
        min_interval=RECORDED,
    )
    b.timeseries(
        "Memory of the fullest GPU by pod",
        "Each pod's use of its fullest GPU or MIG instance, against that device's size; the "
        f"{TOP} pods of the chosen workloads with the highest mean over the time range.",
        "percentunit",
        Query(top_pods("namespace_pod:gpu_pulse_pod_gpu_memory_utilization:max"), "{{pod}}"),
        max_value=1,
        min_interval=RECORDED,
    )
    b.timeseries(
        "Power by pod",
        f"Each pod's part of its GPUs' power draw; the {TOP} pods of the chosen workloads drawing the most over the "
        "time range.",
        "watt",
        Query(top_pods("namespace_pod:gpu_pulse_pod_gpu_power_watts:sum"), "{{pod}}"),
        min_interval=RECORDED,
    )
    b.table(
        "Pods and their GPUs",
        "Which container holds which GPU or MIG instance, and how its share is known: exclusive, mig, process "
        "(split by NVML per-process samples) or unattributed (shared, no per-process figure).",
        "none",
        Query(f"gpu_pulse_pod_device_info{PER_POD}"),
    )
    b.row("Shared GPUs")
    b.timeseries(
        "Utilization split of shared GPUs",
        "Each pod's share of a time-sliced or MPS GPU, stacked per GPU, from NVML per-process samples; the "
        f"{TOP_GPUS} shared GPUs busiest over the time range, with every pod on them.",
        "percentunit",
        Query(shared_split("gpu_pulse_pod_gpu_utilization_ratio"), "{{node}} GPU {{gpu}}: {{namespace}}/{{pod}}"),
        stacked=True,
    )
    b.timeseries(
        "Memory split of shared GPUs",
        f"Framebuffer each pod uses on a shared GPU, stacked per GPU; the {TOP_GPUS} shared GPUs whose pods use the "
        "most over the time range, with every pod on them.",
        "bytes",
        Query(shared_split("gpu_pulse_pod_gpu_memory_used_bytes"), "{{node}} GPU {{gpu}}: {{namespace}}/{{pod}}"),
        stacked=True,
    )
    b.timeseries(
        "Devices by share method",
        "How the namespace's (pod, device) figures are obtained; `unattributed` pods share a GPU without a "
        "per-process figure (see docs/install.md for per-process attribution).",
        "short",
        Query(f"sum by (share) ({NAMESPACE_SHARES}{NS})", "{{share}}"),
        min_interval=RECORDED,
    )
    return b
