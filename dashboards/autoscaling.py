"""Autoscaling: HorizontalPodAutoscalers (kube-state-metrics) beside the GPU figure they read, and the adapter's own
latency and freshness.
"""

from __future__ import annotations

from dashboards.grafana import RECORDED, Board, Query, Variable, job_variable, matcher
from rules.jobs import Jobs
from rules.names import OWNER

HPA = matcher(cluster="cluster", namespace="namespace", horizontalpodautoscaler="hpa")
ADAPTER = matcher(job="job", cluster="cluster")
RATE = "[$__rate_interval]"

# one series per HPA: the name of the workload it scales, as `workload`
TARGET = (
    "max by (cluster, namespace, horizontalpodautoscaler, workload) "
    f'(label_replace(kube_horizontalpodautoscaler_info{HPA}, "workload", "$1", "scaletargetref_name", "(.*)"))'
)
# the pods of the scaled workloads, one series each with its workload and HPA: the owner series joined to the HPAs
# first, so that the per-pod figures below join a series per scaled pod, not each of the cluster's pods twice (at
# 20,000 pods the other order took 15 to 25 s over an hour: docs/performance.md)
SCALED_PODS = (
    f'{OWNER}{{cluster=~"$cluster", namespace=~"$namespace"}}'
    f" * on (cluster, namespace, workload) group_left (horizontalpodautoscaler) {TARGET}"
)
# per pod of a scaled workload: the pod's mean GPU utilization in percent, as the adapter serves gpu_utilization
# (scaled after the join, so only the scaled pods' figures are multiplied at each step)
POD_PERCENT = (
    '100 * (namespace_pod:gpu_pulse_pod_gpu_utilization_ratio:avg{cluster=~"$cluster", namespace=~"$namespace"}'
    f" * on (cluster, namespace, pod) group_left (workload, horizontalpodautoscaler) ({SCALED_PODS}))"
)


def autoscaling_board(jobs: Jobs) -> Board:
    b = Board(
        uid="gpu-pulse-autoscaling",
        title="GPU autoscaling",
        description="HorizontalPodAutoscalers on GPU metrics: their replicas beside the figure they read, and the "
        "gpu-pulse adapter that serves it.",
        tags=("gpu", "autoscaling"),
        variables=(
            Variable("cluster", "Cluster", "label_values(kube_horizontalpodautoscaler_info, cluster)"),
            job_variable(jobs.adapter, "gpu_pulse_adapter_pod_cache_synced", "adapter"),
            Variable(
                "namespace",
                "Namespace",
                'label_values(kube_horizontalpodautoscaler_info{cluster=~"$cluster"}, namespace)',
            ),
            Variable(
                "hpa",
                "HorizontalPodAutoscaler",
                'label_values(kube_horizontalpodautoscaler_info{cluster=~"$cluster", namespace=~"$namespace"}, '
                "horizontalpodautoscaler)",
            ),
        ),
    )
    b.row("HorizontalPodAutoscalers")
    b.timeseries(
        "Replicas",
        "Current and desired replicas, and the bounds, from kube-state-metrics.",
        "short",
        Query(f"kube_horizontalpodautoscaler_status_current_replicas{HPA}", "{{horizontalpodautoscaler}} current"),
        Query(f"kube_horizontalpodautoscaler_status_desired_replicas{HPA}", "{{horizontalpodautoscaler}} desired"),
        Query(f"kube_horizontalpodautoscaler_spec_min_replicas{HPA}", "{{horizontalpodautoscaler}} min"),
        Query(f"kube_horizontalpodautoscaler_spec_max_replicas{HPA}", "{{horizontalpodautoscaler}} max"),
    )
    b.timeseries(
        "GPU utilization the HPA reads, and its target",
        "The mean over the scale target's pods of each pod's gpu_utilization (percent), as the HPA averages the "
        "adapter's answers, beside the target of HPAs on gpu_utilization.",
        "percent",
        Query(f"avg by (cluster, namespace, horizontalpodautoscaler) ({POD_PERCENT})", "{{horizontalpodautoscaler}}"),
        Query(
            'kube_horizontalpodautoscaler_spec_target_metric{cluster=~"$cluster", namespace=~"$namespace", '
            'horizontalpodautoscaler=~"$hpa", metric_name="gpu_utilization"}',
            "{{horizontalpodautoscaler}} target",
        ),
        min_interval=RECORDED,
    )
    b.timeseries(
        "gpu_utilization per pod of the scale target",
        "Each pod's value as the adapter serves it (percent); missing pods count as at target on scale-down.",
        "percent",
        Query(POD_PERCENT, "{{pod}}"),
        min_interval=RECORDED,
    )
    b.row("Adapter")
    b.timeseries(
        "API requests",
        "Requests per second by API group and status code (404: no figure for the object; 503: source down).",
        "reqps",
        Query(
            f"sum by (group, code) (rate(gpu_pulse_adapter_request_duration_seconds_count{ADAPTER}{RATE}))",
            "{{group}} {{code}}",
        ),
    )
    b.timeseries(
        "API latency",
        "50th and 99th percentile time to answer, by API group.",
        "s",
        *(
            Query(
                f"histogram_quantile({q}, sum by (le, group) "
                f"(rate(gpu_pulse_adapter_request_duration_seconds_bucket{ADAPTER}{RATE})))",
                f"{{{{group}}}} p{int(q * 100)}",
            )
            for q in (0.5, 0.99)
        ),
    )
    b.timeseries(
        "Waits outside the handler",
        "99th percentile of what delays an answer before its handler runs: how late the adapter's event loop runs a "
        "timer (busy with documents and other answers, or without a core), and each garbage collection's pause, "
        "by generation.",
        "s",
        Query(
            "histogram_quantile(0.99, sum by (le) "
            f"(rate(gpu_pulse_adapter_event_loop_lag_seconds_bucket{ADAPTER}{RATE})))",
            "event loop lag p99",
        ),
        Query(
            "histogram_quantile(0.99, sum by (le, generation) "
            f"(rate(gpu_pulse_adapter_gc_pause_seconds_bucket{ADAPTER}{RATE})))",
            "GC pause p99, generation {{generation}}",
        ),
    )
    b.timeseries(
        "Source latency",
        "99th percentile time of one call to the number source (an exporter /pods fetch or a PromQL query).",
        "s",
        Query(
            "histogram_quantile(0.99, sum by (le, source, outcome) "
            f"(rate(gpu_pulse_adapter_source_duration_seconds_bucket{ADAPTER}{RATE})))",
            "{{source}} {{outcome}}",
        ),
    )
    b.timeseries(
        "Age of served figures",
        "50th and 99th percentile age of the figures behind served values, from sample time to answer; it stays "
        "below --max-age, since older figures are left out.",
        "s",
        *(
            Query(
                f"histogram_quantile({q}, sum by (le) "
                f"(rate(gpu_pulse_adapter_served_figure_age_seconds_bucket{ADAPTER}{RATE})))",
                f"p{int(q * 100)}",
            )
            for q in (0.5, 0.99)
        ),
    )
    b.timeseries(
        "Values served",
        "Metric values served per second, by API group.",
        "cps",
        Query(f"sum by (group) (rate(gpu_pulse_adapter_served_values_total{ADAPTER}{RATE}))", "{{group}}"),
    )
    b.timeseries(
        "Pod cache",
        "Pods in each replica's cache, and whether it has synced.",
        "short",
        Query(f"gpu_pulse_adapter_pod_cache_pods{ADAPTER}", "{{instance}} pods"),
        Query(f"gpu_pulse_adapter_pod_cache_synced{ADAPTER}", "{{instance}} synced"),
    )
    b.timeseries(
        "Metrics APIServices unavailable",
        "1 while kube-apiserver marks a custom or external metrics APIService unavailable (HPAs then stop scaling).",
        "bool",
        Query(
            'max by (name) (aggregator_unavailable_apiservice{cluster=~"$cluster", '
            "name=~`v1beta[12]\\.(custom|external)\\.metrics\\.k8s\\.io`})",
            "{{name}}",
        ),
    )
    return b
