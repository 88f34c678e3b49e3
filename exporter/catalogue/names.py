"""Names that are not one measurement's: label names per dialect, and the identity, up, per-pod and self-health
series."""

from __future__ import annotations

# ---- label names, per dialect ------------------------------------------------------------------------------------
# The dcgm dialect's, in dcgm-exporter's order (internal/pkg/rendermetrics); label fields the counters CSV asks for
# follow the node-name label in name order, as Go's template ranges over a map.
# The node-name label: `Hostname` in that release; renamed `hostname` after it (dcgm-exporter pull request 655)
DCGM_HOSTNAME_LABELS = ("Hostname", "hostname")
DCGM_DEVICE_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName")
DCGM_MIG_LABELS = ("GPU_I_PROFILE", "GPU_I_ID")
DCGM_TRAILING_LABELS = ("Hostname", "DCGM_FI_DRIVER_VERSION")
DCGM_POD_LABELS = ("container", "namespace", "pod")
# dcgm-exporter's labels of a device held through a DRA ResourceClaim (internal/pkg/transformation/const.go)
DCGM_DRA_LABELS = ("dra_claim_name", "dra_claim_namespace", "dra_driver_name", "dra_pool_name", "dra_device_name")

PROM_DEVICE_LABELS = ("gpu", "uuid", "model", "node")
PROM_MIG_LABELS = ("gpu_instance", "mig_profile")

# ---- series that are not per-measurement: identity, up, per-pod, self-health -------------------------------------
PROM_INFO = "nvidia_gpu_info"  # labels: gpu, uuid, model, node, pci_bus_id, device, driver_version,
#                                cuda_version, nvml_version, brand, serial, vbios_version, mig_mode; and per MIG
#                                instance mig_uuid
PROM_INFOROM_INFO = "nvidia_gpu_inforom_info"  # labels: gpu, uuid, model, node, and the InfoROM versions
PROM_UP = "nvidia_gpu_up"
DCGM_UP = "gpu_pulse_gpu_up"

# Per-pod series, identical in both dialects. Labels: node, namespace, pod, container, gpu, uuid (the physical GPU),
# gpu_instance and mig_profile (MIG only, empty otherwise), share (ShareMethod).
POD_UTILIZATION = "gpu_pulse_pod_gpu_utilization_ratio"
POD_MEMORY_USED = "gpu_pulse_pod_gpu_memory_used_bytes"
POD_POWER = "gpu_pulse_pod_gpu_power_watts"
POD_ENERGY = "gpu_pulse_pod_gpu_energy_joules_total"
POD_DEVICE_INFO = "gpu_pulse_pod_device_info"  # value 1: which pod/container holds which device, and how
POD_SHARING = "gpu_pulse_pod_gpu_sharing_pods"  # how many pods share the device this pod uses
POD_LABELS = ("node", "namespace", "pod", "container", "gpu", "uuid", "gpu_instance", "mig_profile", "share")
POD_CLAIM_LABELS = ("dra_claim_name", "dra_claim_namespace")  # only on the series of a device held through a claim

# Per-pod serving-engine series (exporter.engines), identical in both dialects. Labels: node, namespace, pod, engine,
# model; the quantile series add `quantile`, the state series `state` and `reason`.
POD_INFERENCE_QUEUED = "gpu_pulse_pod_inference_queued_requests"
POD_INFERENCE_RUNNING = "gpu_pulse_pod_inference_running_requests"
POD_INFERENCE_KV_CACHE = "gpu_pulse_pod_inference_kv_cache_utilization_ratio"
POD_INFERENCE_TTFT = "gpu_pulse_pod_inference_time_to_first_token_seconds"  # {quantile} over the window
POD_INFERENCE_ITL = "gpu_pulse_pod_inference_inter_token_latency_seconds"  # {quantile} over the window
POD_INFERENCE_REQUESTS = "gpu_pulse_pod_inference_requests_total"  # the exporter's total of the engine's deltas
POD_INFERENCE_TOKENS = "gpu_pulse_pod_inference_generated_tokens_total"  # likewise
POD_INFERENCE_STATE = "gpu_pulse_pod_inference_engine_state"  # {state, reason} 1 for the pod's current state
POD_INFERENCE_LABELS = ("node", "namespace", "pod", "engine", "model")

# Exporter self-metrics, identical in both dialects.
SELF_BUILD_INFO = "gpu_pulse_exporter_build_info"  # {version, dialect} 1
SELF_COLLECTOR_SUCCESS = "gpu_pulse_collector_success"  # {collector} 0/1
SELF_COLLECTOR_DURATION = "gpu_pulse_collector_duration_seconds"  # {collector}
SELF_COLLECTOR_ERRORS = "gpu_pulse_collector_errors_total"  # {collector}
SELF_SNAPSHOT_TIMESTAMP = "gpu_pulse_snapshot_timestamp_seconds"  # wall-clock time the snapshot was taken
SELF_POLL_INTERVAL = "gpu_pulse_poll_interval_seconds"
SELF_NVML_ERRORS = "gpu_pulse_nvml_errors_total"  # {gpu, uuid, error}: GPU_IS_LOST, NO_PERMISSION, TIMEOUT, ...
SELF_NVML_STALLED = "gpu_pulse_nvml_stalled_call_seconds"  # {gpu, uuid, call}: a hung NVML call, how long so far
SELF_KUBELET_UP = "gpu_pulse_kubelet_up"  # 1 while the last pod-resources List succeeded
SELF_KUBELET_MAPPING_AGE = "gpu_pulse_kubelet_mapping_age_seconds"  # age of the pod mapping in use
SELF_CONNECTIONS = "gpu_pulse_http_connections"  # open now (toolkit.connections)
SELF_CONNECTIONS_MAX = "gpu_pulse_http_connections_max"  # --max-connections
SELF_CONNECTIONS_ACCEPTED = "gpu_pulse_http_connections_accepted_total"
SELF_CONNECTIONS_CLOSED = "gpu_pulse_http_connections_closed_total"  # {reason}: toolkit.connections
SELF_UNAVAILABLE = "gpu_pulse_device_unavailable_info"  # {gpu, uuid, gpu_instance, measurement, reason} 1
SELF_PROCESS_VISIBILITY = "gpu_pulse_process_visibility"  # 1: other pods' GPU processes are seen, 0: they are not
SELF_ENGINE_READS = "gpu_pulse_engine_reads_total"  # reads of engine endpoints (exporter.engines)
SELF_ENGINE_FAILURES = "gpu_pulse_engine_read_failures_total"  # {reason}: a bounded kind
SELF_ENGINE_BYTES = "gpu_pulse_engine_read_bytes_total"  # as received
SELF_ENGINE_SECONDS = "gpu_pulse_engine_read_seconds_total"  # time spent in reads that answered
SELF_ENGINE_ENDPOINTS = "gpu_pulse_engine_endpoints"  # pods whose engine endpoint was read in the last cycle
SELF_NVML_UP = "gpu_pulse_nvml_up"  # 1 while NVML is usable; 0 while the driver is not (not loaded, version mismatch)
