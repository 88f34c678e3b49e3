"""LLM serving: what the serving engine in each GPU pod reports (queue, running batch, KV cache, time to first token,
inter-token latency, tokens per second), its saturation and the term that drives it, beside the GPU utilization and
power of the same workloads and pods. Reads the recorded series (rules/inference.py, rules/saturation.py) and the
engines' state series, which both dialects publish alike.

As on the namespace board, a panel with a line per pod or workload draws the TOP with the highest mean over the time
range among the chosen namespaces and workloads (dashboards/namespace.py).
"""

from __future__ import annotations

from dashboards.grafana import RECORDED, Board, Query, Variable, job_variable
from dashboards.namespace import NS, PER_POD, TOP, WORKLOAD, top, top_pods, top_workloads
from rules.inference import (
    POD_ITL,
    POD_KV_CACHE,
    POD_QUEUED,
    POD_RUNNING,
    POD_TTFT,
    WORKLOAD_ITL,
    WORKLOAD_KV_CACHE,
    WORKLOAD_QUEUED,
    WORKLOAD_RUNNING,
    WORKLOAD_TTFT,
)
from rules.jobs import Jobs
from rules.names import BY_WORKLOAD, OWNER, POD_INFERENCE_STATE
from rules.saturation import (
    KV_CACHE_TARGET,
    POD_DRIVING,
    POD_SATURATION,
    POD_TOKENS,
    QUEUE_TARGET,
    WORKLOAD_DRIVING,
    WORKLOAD_SATURATION,
    WORKLOAD_TOKENS,
)

UID = "gpu-pulse-inference"
TARGET = Query("vector(1)", "target")  # saturation 1: a pod at its target (the adapter's 100 %)
IN_WORKLOADS = f"present_over_time({OWNER}{WORKLOAD}[$__range] @ end())"
WORKLOADS = "{{workload}} ({{workload_type}})"


def _quantile(series: str, quantile: str) -> str:
    """`series` with the board's namespace and workload filters and one `quantile`."""
    return f'{series}{WORKLOAD[:-1]}, quantile="{quantile}"}}'


def _workload_quantile(series: str, quantile: str) -> str:
    """A per-workload percentile series at `quantile`, for the TOP workloads with the highest mean of it."""
    return top(_quantile(series, quantile), BY_WORKLOAD)


def _pod_quantile(series: str, quantile: str) -> str:
    """A per-pod percentile series at `quantile`, for the TOP pods of the chosen workloads with the highest mean."""
    selected = f'{series}{NS[:-1]}, quantile="{quantile}"}}'
    return top(selected, "cluster, namespace, pod", IN_WORKLOADS)


def inference_board(jobs: Jobs) -> Board:
    b = Board(
        uid=UID,
        title="GPU LLM serving",
        description="What the serving engines of GPU pods report (vLLM, SGLang, NIM, Triton with TensorRT-LLM, "
        "Dynamo, TGI: docs/llm-serving.md), their saturation and what drives it, beside the GPU utilization and "
        f"power of the same workloads and pods. Panels with a line per workload or pod draw the {TOP} with the "
        "highest mean over the time range; pick namespaces or workloads to narrow the choice.",
        tags=("gpu", "inference", "llm"),
        variables=(
            Variable("cluster", "Cluster", f"label_values({WORKLOAD_QUEUED}, cluster)"),
            job_variable(jobs.exporter, "gpu_pulse_snapshot_timestamp_seconds", "exporters"),
            Variable("namespace", "Namespace", f'label_values({WORKLOAD_QUEUED}{{cluster=~"$cluster"}}, namespace)'),
            Variable(
                "workload",
                "Workload",
                f'label_values({WORKLOAD_QUEUED}{{cluster=~"$cluster", namespace=~"$namespace"}}, workload)',
                description="Deployments, StatefulSets ... with a serving engine the exporters read",
            ),
        ),
    )
    b.row("Workloads")
    b.timeseries(
        "Saturation by workload",
        f"Mean over a workload's ready pods of each pod's saturation: the largest of its requests waiting over "
        f"{QUEUE_TARGET} and its KV-cache use over {KV_CACHE_TARGET:g} (llm-d's thresholds). 100% is the target an "
        "HPA on the adapter's inference_saturation (averageValue 100) holds the workload at; dashed: the target.",
        "percentunit",
        Query(top_workloads(WORKLOAD_SATURATION), WORKLOADS),
        TARGET,
        min_interval=RECORDED,
        limits=1,
    )
    b.timeseries(
        "What drives saturation",
        "Pods of each workload whose saturation each term drives: queue (requests waiting) or kv_cache (KV-cache "
        "use); a queue-driven workload needs replicas for its arrivals, a KV-cache-driven one for its sequences.",
        "short",
        Query(f"{WORKLOAD_DRIVING}{WORKLOAD}", "{{workload}}: {{term}}"),
        stacked=True,
        min_interval=RECORDED,
    )
    b.timeseries(
        "Requests waiting by workload",
        "Requests waiting in the serving engines of each workload's ready pods (summed).",
        "short",
        Query(top_workloads(WORKLOAD_QUEUED), WORKLOADS),
        min_interval=RECORDED,
    )
    b.timeseries(
        "Requests running by workload",
        "Requests in the running batches of each workload's ready pods (summed).",
        "short",
        Query(top_workloads(WORKLOAD_RUNNING), WORKLOADS),
        min_interval=RECORDED,
    )
    b.timeseries(
        "KV-cache use by workload",
        f"Mean KV-cache use of each workload's ready pods; dashed: llm-d's saturation threshold ({KV_CACHE_TARGET:g}).",
        "percentunit",
        Query(top_workloads(WORKLOAD_KV_CACHE), WORKLOADS),
        Query(f"vector({KV_CACHE_TARGET})", "threshold"),
        max_value=1,
        min_interval=RECORDED,
        limits=1,
    )
    b.timeseries(
        "Tokens per second by workload",
        "Tokens each workload's serving engines generate per second, over 2 minutes.",
        "short",
        Query(top_workloads(WORKLOAD_TOKENS), WORKLOADS),
        min_interval=RECORDED,
    )
    b.timeseries(
        "Time to first token by workload",
        "p90 and p99 time to first token of each workload: the slowest of its ready pods' percentiles over the "
        "exporter's window (GPUInferenceTTFTOverSLO compares the p90 with the SLO).",
        "s",
        Query(_workload_quantile(WORKLOAD_TTFT, "0.9"), "{{workload}} p90"),
        Query(_workload_quantile(WORKLOAD_TTFT, "0.99"), "{{workload}} p99"),
        min_interval=RECORDED,
    )
    b.timeseries(
        "Inter-token latency by workload",
        "p90 and p99 inter-token latency of each workload: the slowest of its ready pods' percentiles.",
        "s",
        Query(_workload_quantile(WORKLOAD_ITL, "0.9"), "{{workload}} p90"),
        Query(_workload_quantile(WORKLOAD_ITL, "0.99"), "{{workload}} p99"),
        min_interval=RECORDED,
    )
    b.timeseries(
        "GPU utilization by workload",
        "Mean GPU utilization of each workload's pods: near 100% both when the engines idle on a small decode batch "
        "and when their queues grow (docs/llm-serving.md); read it beside saturation.",
        "percentunit",
        Query(top_workloads("namespace_workload:gpu_pulse_pod_gpu_utilization_ratio:avg"), WORKLOADS),
        max_value=1,
        min_interval=RECORDED,
    )
    b.timeseries(
        "GPU power by workload",
        "Each workload's part of its GPUs' power draw.",
        "watt",
        Query(top_workloads("namespace_workload:gpu_pulse_pod_gpu_power_watts:sum"), WORKLOADS),
        min_interval=RECORDED,
    )
    b.row("Pods")
    b.timeseries(
        "Saturation by pod",
        f"Each ready pod's saturation: the largest of requests waiting over {QUEUE_TARGET} and KV-cache use over "
        f"{KV_CACHE_TARGET:g}; the {TOP} pods of the chosen workloads with the highest mean; dashed: the target.",
        "percentunit",
        Query(top_pods(POD_SATURATION), "{{pod}}"),
        TARGET,
        min_interval=RECORDED,
        limits=1,
    )
    b.table(
        "Driving term by pod",
        "The term that drives each pod's saturation now, valued at the pod's saturation (both where they tie).",
        "percentunit",
        Query(f"{POD_DRIVING}{NS} and on (cluster, namespace, pod) {OWNER}{WORKLOAD}"),
        width=12,
    )
    b.table(
        "Engines and their state",
        "Each GPU pod's serving engine as the exporter reads it: ready, warming (left out of every figure), "
        "unreachable, unrecognised or refused, with the reason (GPUInferenceEngineSilent fires after 15 minutes "
        "without figures).",
        "none",
        Query(f"{POD_INFERENCE_STATE}{PER_POD} == 1"),
        width=12,
    )
    b.timeseries(
        "Requests waiting and running by pod",
        f"Requests waiting in and running in each pod's serving engine; the {TOP} pods of the chosen workloads with "
        "the most waiting (and running) over the time range.",
        "short",
        Query(top_pods(POD_QUEUED), "{{pod}} waiting"),
        Query(top_pods(POD_RUNNING), "{{pod}} running"),
        min_interval=RECORDED,
    )
    b.timeseries(
        "KV-cache use by pod",
        f"KV-cache use of each pod's serving engine; the {TOP} pods of the chosen workloads with the fullest caches.",
        "percentunit",
        Query(top_pods(POD_KV_CACHE), "{{pod}}"),
        max_value=1,
        min_interval=RECORDED,
    )
    b.timeseries(
        "Time to first token by pod",
        "p50, p90 and p99 time to first token of each pod's serving engine over the exporter's window.",
        "s",
        Query(_pod_quantile(POD_TTFT, "0.5"), "{{pod}} p50"),
        Query(_pod_quantile(POD_TTFT, "0.9"), "{{pod}} p90"),
        Query(_pod_quantile(POD_TTFT, "0.99"), "{{pod}} p99"),
        min_interval=RECORDED,
    )
    b.timeseries(
        "Inter-token latency by pod",
        "p50, p90 and p99 inter-token latency of each pod's serving engine over the exporter's window.",
        "s",
        Query(_pod_quantile(POD_ITL, "0.5"), "{{pod}} p50"),
        Query(_pod_quantile(POD_ITL, "0.9"), "{{pod}} p90"),
        Query(_pod_quantile(POD_ITL, "0.99"), "{{pod}} p99"),
        min_interval=RECORDED,
    )
    b.timeseries(
        "Tokens per second by pod",
        "Tokens each pod's serving engine generates per second, over 2 minutes.",
        "short",
        Query(top_pods(POD_TOKENS), "{{pod}}"),
        min_interval=RECORDED,
    )
    b.timeseries(
        "GPU utilization by pod",
        "Mean utilization over each pod's GPUs (the adapter's gpu_utilization, in percent), beside its saturation.",
        "percentunit",
        Query(top_pods("namespace_pod:gpu_pulse_pod_gpu_utilization_ratio:avg"), "{{pod}}"),
        max_value=1,
        min_interval=RECORDED,
    )
    b.timeseries(
        "GPU power by pod",
        "Each pod's part of its GPUs' power draw.",
        "watt",
        Query(top_pods("namespace_pod:gpu_pulse_pod_gpu_power_watts:sum"), "{{pod}}"),
        min_interval=RECORDED,
    )
    return b
