"""Names shared by the rule modules: the per-pod series both dialects publish, the recorded series other rules,
the dashboards and the adapter read, and the label sets each level aggregates by.
"""

from __future__ import annotations

from exporter import catalogue

POD_UTIL = catalogue.POD_UTILIZATION
POD_MEMORY = catalogue.POD_MEMORY_USED
POD_POWER = catalogue.POD_POWER
POD_ENERGY = catalogue.POD_ENERGY
POD_INFO = catalogue.POD_DEVICE_INFO
POD_SHARING = catalogue.POD_SHARING

# What the serving engine in a pod reports, as the exporter publishes it (the same names in both dialects, with the
# per-pod series' labels plus `engine` and `model`; figures only while the pod's engine is ready).
POD_INFERENCE_QUEUED = catalogue.names.POD_INFERENCE_QUEUED
POD_INFERENCE_RUNNING = catalogue.names.POD_INFERENCE_RUNNING
POD_INFERENCE_KV_CACHE = catalogue.names.POD_INFERENCE_KV_CACHE
POD_INFERENCE_TTFT = catalogue.names.POD_INFERENCE_TTFT  # {quantile="0.5"|"0.9"|"0.99"}
POD_INFERENCE_ITL = catalogue.names.POD_INFERENCE_ITL  # {quantile=...}
POD_INFERENCE_REQUESTS = catalogue.names.POD_INFERENCE_REQUESTS
POD_INFERENCE_GENERATED_TOKENS = catalogue.names.POD_INFERENCE_TOKENS
POD_INFERENCE_STATE = catalogue.names.POD_INFERENCE_STATE  # {state, reason} 1
POD_INFERENCE_SERIES = (
    POD_INFERENCE_QUEUED,
    POD_INFERENCE_RUNNING,
    POD_INFERENCE_KV_CACHE,
    POD_INFERENCE_TTFT,
    POD_INFERENCE_ITL,
    POD_INFERENCE_REQUESTS,
    POD_INFERENCE_GENERATED_TOKENS,
    POD_INFERENCE_STATE,
)

# recorded names other rules, the dashboards and the adapter read
DEV_UP = "node_gpu:nvidia_gpu_up:max"
DEV_UTIL = "node_gpu:nvidia_gpu_utilization_ratio:max"
DEV_MEM_USED = "node_gpu:nvidia_gpu_memory_used_bytes:max"
DEV_MEM_TOTAL = "node_gpu:nvidia_gpu_memory_total_bytes:max"
DEV_POWER = "node_gpu:nvidia_gpu_power_watts:max"
DEV_ENERGY = "node_gpu:nvidia_gpu_energy_joules:rate5m"
OWNER = "namespace_workload_pod:gpu_pulse_kube_pod_owner:relabel"
CLUSTER_UTIL_SUM = "cluster:nvidia_gpu_utilization_ratio:sum"
CLUSTER_UTIL_COUNT = "cluster:nvidia_gpu_utilization_ratio:count"
CLUSTER_SNAPSHOT_AGE_MAX = "cluster:gpu_pulse_snapshot_age_seconds:max"
CLUSTER_SNAPSHOT_AGE_MEDIAN = "cluster:gpu_pulse_snapshot_age_seconds:median"
# an exporter's own series (one per exporter target) and how old its snapshot was at the scrape
SNAPSHOT = "gpu_pulse_snapshot_timestamp_seconds"
SNAPSHOT_AGE = f"timestamp({SNAPSHOT}) - {SNAPSHOT}"

BY_CLUSTER = "cluster"
BY_NODE = "cluster, node"
BY_POD = "cluster, namespace, pod"
BY_POD_DEVICE = "cluster, namespace, pod, uuid, gpu_instance"
BY_NAMESPACE = "cluster, namespace"
BY_WORKLOAD = "cluster, namespace, workload, workload_type"
