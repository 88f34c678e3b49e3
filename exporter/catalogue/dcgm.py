"""Facts of the dcgm dialect that are not one measurement's: the release it matches, dcgm-exporter's default set, and
the fields of dcgm-exporter's counters files that gpu-pulse never serves, with the reason."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from exporter.catalogue.dcgm_exporter_files import DEFAULT_COUNTERS

# The dcgm dialect matches this dcgm-exporter release (NVIDIA/dcgm-exporter tag; internal/pkg/rendermetrics and
# internal/pkg/collector): names, types, label names and order, `device` = nvidia<GPU index>, XID `err_code`/`err_msg`.
DCGM_EXPORTER_RELEASE = "4.5.3-4.8.2"

# dcgm-exporter's default counter set: the enabled lines of etc/default-counters.csv that are not labels
DCGM_DEFAULT_SET: frozenset[str] = frozenset(
    line.name for line in DEFAULT_COUNTERS if line.enabled and line.type != "label"
)

# Why a field is not served, as `gpu_pulse_device_unavailable_info{reason}` and the start-up log say it
NOT_IN_NVML = "not_in_nvml"  # DCGM computes it from its own modules; NVML has no such figure
NOT_PROVIDED = "not_provided"  # NVML could give what it is computed from, but gpu-pulse does not compute it

# Fields of dcgm-exporter's counters files that gpu-pulse never serves -> (reason, what to use instead)
NEVER_SERVED: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "DCGM_EXP_GPU_HEALTH_STATUS": (
            NOT_IN_NVML,
            "DCGM's health watches (dcgm-exporter gpu_health_collector.go); the XID, ECC, row-remap and thermal "
            "series give the inputs, the shipped alerts the verdicts",
        ),
        "DCGM_EXP_XID_ERRORS_COUNT": (
            NOT_PROVIDED,
            "dcgm-exporter counts DCGM's XID samples over a sliding window (xid_collector.go); gpu-pulse publishes "
            "every XID as it arrives, counted per XID: increase(nvidia_gpu_xid_errors_total[5m]), in the dcgm "
            "dialect increase(gpu_pulse_xid_errors_total[5m])",
        ),
        "DCGM_EXP_CLOCK_EVENTS_COUNT": (
            NOT_PROVIDED,
            "dcgm-exporter counts DCGM's clock-event samples over a sliding window (clock_events_collector.go); "
            "gpu-pulse publishes the reasons each poll: count_over_time() of DCGM_FI_DEV_CLOCKS_EVENT_REASONS or of "
            "nvidia_gpu_clock_event_active",
        ),
        "DCGM_EXP_P2P_STATUS": (
            NOT_PROVIDED,
            "dcgm-exporter's NVLink peer-to-peer status matrix (p2p_status_collector.go); not computed by gpu-pulse",
        ),
    }
)
