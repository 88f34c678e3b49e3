"""Namespace and workload: per-pod GPU figures, workloads from kube-state-metrics, and how shared GPUs are split.
Reads recorded series and the per-pod series, which both dialects publish alike.
"""

from __future__ import annotations

from dashboards.board import Board, Query, Variable, job_variable, matcher
from rules.jobs import Jobs
from rules.names import OWNER

NS = matcher(cluster="cluster", namespace="namespace")
WORKLOAD = matcher(cluster="cluster", namespace="namespace", workload="workload")
# the per-pod series as the exporters publish them (the recorded ones above no longer carry a job)
PER_POD = matcher(job="job", cluster="cluster", namespace="namespace")
SHARED = PER_POD[:-1] + ', share="process"}'


def of_workload(expr: str) -> str:
    """`expr` (per pod) restricted to the pods of the chosen workloads."""
    return f"{expr} * on (cluster, namespace, pod) group_left (workload) {OWNER}{WORKLOAD}"


def namespace_board(jobs: Jobs) -> Board:
    b = Board(
        uid="gpu-pulse-namespace",
        title="GPU namespace and workload",
        description="GPU use of namespaces, their workloads and pods, and how shared GPUs are split between pods.",
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
    )
    b.timeseries(
        "Devices allocated and busy",
        "Devices the namespace's pods hold, and busy GPU-equivalents (sum of their utilization).",
        "short",
        Query(f"namespace:gpu_pulse_pod_allocated_devices:sum{NS}", "{{namespace}} allocated"),
        Query(f"namespace:gpu_pulse_pod_gpu_utilization_ratio:sum{NS}", "{{namespace}} busy"),
    )
    b.timeseries(
        "Memory used",
        "Framebuffer the namespace's pods use.",
        "bytes",
        Query(f"namespace:gpu_pulse_pod_gpu_memory_used_bytes:sum{NS}", "{{namespace}}"),
    )
    b.timeseries(
        "Power",
        "The namespace's part of GPU power draw, and of energy use over 5 minutes.",
        "watt",
        Query(f"namespace:gpu_pulse_pod_gpu_power_watts:sum{NS}", "{{namespace}} power"),
        Query(f"namespace:gpu_pulse_pod_gpu_energy_joules:rate5m{NS}", "{{namespace}} energy rate"),
    )
    b.row("Workloads")
    b.timeseries(
        "GPU utilization by workload",
        "Mean GPU utilization of each workload's pods.",
        "percentunit",
        Query(
            f"namespace_workload:gpu_pulse_pod_gpu_utilization_ratio:avg{WORKLOAD}", "{{workload}} ({{workload_type}})"
        ),
        max_value=1,
    )
    b.timeseries(
        "Devices by workload",
        "Devices each workload's pods hold.",
        "short",
        Query(f"namespace_workload:gpu_pulse_pod_allocated_devices:sum{WORKLOAD}", "{{workload}} ({{workload_type}})"),
    )
    b.timeseries(
        "Memory by workload",
        "Framebuffer each workload's pods use.",
        "bytes",
        Query(
            f"namespace_workload:gpu_pulse_pod_gpu_memory_used_bytes:sum{WORKLOAD}", "{{workload}} ({{workload_type}})"
        ),
    )
    b.timeseries(
        "Power by workload",
        "Each workload's part of GPU power draw.",
        "watt",
        Query(f"namespace_workload:gpu_pulse_pod_gpu_power_watts:sum{WORKLOAD}", "{{workload}} ({{workload_type}})"),
    )
    b.row("Pods")
    b.timeseries(
        "GPU utilization by pod",
        "Mean utilization over each pod's GPUs: what the adapter serves as gpu_utilization (in percent).",
        "percentunit",
        Query(of_workload(f"namespace_pod:gpu_pulse_pod_gpu_utilization_ratio:avg{NS}"), "{{pod}}"),
        max_value=1,
    )
    b.timeseries(
        "Memory by pod",
        "Framebuffer each pod uses over its GPUs.",
        "bytes",
        Query(of_workload(f"namespace_pod:gpu_pulse_pod_gpu_memory_used_bytes:sum{NS}"), "{{pod}}"),
    )
    b.timeseries(
        "Memory of the fullest GPU by pod",
        "Each pod's use of its fullest GPU or MIG instance, against that device's size.",
        "percentunit",
        Query(of_workload(f"namespace_pod:gpu_pulse_pod_gpu_memory_utilization:max{NS}"), "{{pod}}"),
        max_value=1,
    )
    b.timeseries(
        "Power by pod",
        "Each pod's part of its GPUs' power draw.",
        "watt",
        Query(of_workload(f"namespace_pod:gpu_pulse_pod_gpu_power_watts:sum{NS}"), "{{pod}}"),
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
        "Each pod's share of a time-sliced or MPS GPU, stacked per GPU, from NVML per-process samples.",
        "percentunit",
        Query(
            f"sum by (node, gpu, namespace, pod) (gpu_pulse_pod_gpu_utilization_ratio{SHARED})",
            "{{node}} GPU {{gpu}}: {{namespace}}/{{pod}}",
        ),
        stacked=True,
    )
    b.timeseries(
        "Memory split of shared GPUs",
        "Framebuffer each pod uses on a shared GPU, stacked per GPU.",
        "bytes",
        Query(
            f"sum by (node, gpu, namespace, pod) (gpu_pulse_pod_gpu_memory_used_bytes{SHARED})",
            "{{node}} GPU {{gpu}}: {{namespace}}/{{pod}}",
        ),
        stacked=True,
    )
    b.timeseries(
        "Devices by share method",
        "How the namespace's (pod, device) figures are obtained; `unattributed` pods share a GPU without a "
        "per-process figure (see docs/install.md for per-process attribution).",
        "short",
        Query(f"count by (share) (gpu_pulse_pod_device_info{PER_POD})", "{{share}}"),
    )
    return b
