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

# What the serving engine in a pod reports, as the exporter publishes it (issue 37's series: the same in both dialects,
# with the per-pod series' labels plus `engine` and `model`; figures only while the pod's engine is ready). The
# exporter's side of the contract names them in its catalogue; they are spelled out here until both sides meet.
POD_INFERENCE_QUEUED = "gpu_pulse_pod_inference_queued_requests"
POD_INFERENCE_RUNNING = "gpu_pulse_pod_inference_running_requests"
POD_INFERENCE_KV_CACHE = "gpu_pulse_pod_inference_kv_cache_utilization_ratio"
POD_INFERENCE_TTFT = "gpu_pulse_pod_inference_time_to_first_token_seconds"  # {quantile="0.5"|"0.9"|"0.99"}
POD_INFERENCE_ITL = "gpu_pulse_pod_inference_inter_token_latency_seconds"  # {quantile=...}
POD_INFERENCE_REQUESTS = "gpu_pulse_pod_inference_requests_total"
POD_INFERENCE_GENERATED_TOKENS = "gpu_pulse_pod_inference_generated_tokens_total"
POD_INFERENCE_STATE = "gpu_pulse_pod_inference_engine_state"  # {state, reason} 1
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

BY_CLUSTER = "cluster"
BY_NODE = "cluster, node"
BY_POD = "cluster, namespace, pod"
BY_POD_DEVICE = "cluster, namespace, pod, uuid, gpu_instance"
BY_NAMESPACE = "cluster, namespace"
BY_WORKLOAD = "cluster, namespace, workload, workload_type"
