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
