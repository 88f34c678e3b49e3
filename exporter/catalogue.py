"""The measurement catalogue: what is measured, in which native unit, and how each dialect names it.

One row per measurement. A row carries both dialects side by side so that they cannot drift. The snapshot stores the
native NVML unit (`Measurement.unit`); a dialect's `Rendering.scale` converts it to the unit that dialect publishes.

Several measurements may render into one metric family with constant labels (ECC correctable and uncorrectable become
`nvidia_gpu_ecc_errors_total{type=...}` in the prometheus dialect, two names in the dcgm dialect).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class Dialect(StrEnum):
    DCGM = "dcgm"
    PROMETHEUS = "prometheus"


class MetricType(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"


@dataclass(frozen=True, slots=True)
class Rendering:
    """How one dialect publishes a measurement."""

    name: str  # family name; for counters in the prometheus dialect it ends in _total
    type: MetricType
    help: str
    scale: float = 1.0  # published = native * scale
    const_labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # a bitmask measurement published as one 0/1 series per named bit, under `bit_label`
    bits: Mapping[str, int] | None = None
    bit_label: str = "reason"
    # a vector measurement (DeviceReading.vectors) published with its keys under this label
    vector_label: str | None = None
    integer: bool = False  # published value floored to an integer (dcgm MiB figures are integers)
    # the value is an XID: also published as `err_code` and named in `err_msg` (dcgm-exporter 4.x)
    xid_labels: bool = False


@dataclass(frozen=True, slots=True)
class Measurement:
    key: str  # the key in DeviceReading.values / .vectors
    unit: str  # the native NVML unit the snapshot holds
    source: str  # the NVML call or field it comes from
    dcgm: Rendering | None  # None: dcgm-exporter has no such field
    prometheus: Rendering | None
    mig: bool = False  # also reported per MIG instance
    vector: bool = False  # lives in DeviceReading.vectors, keyed by a label value

    def rendering(self, dialect: Dialect) -> Rendering | None:
        return self.dcgm if dialect is Dialect.DCGM else self.prometheus


G, C = MetricType.GAUGE, MetricType.COUNTER
MIB = 1.0 / (1024 * 1024)

# Clock-event (throttle) reasons: bit values of nvmlClocksEventReasons (nvml.h), named for the `reason` label.
CLOCK_EVENT_REASONS: Mapping[str, int] = MappingProxyType(
    {
        "gpu_idle": 0x1,
        "applications_clocks_setting": 0x2,
        "sw_power_cap": 0x4,
        "hw_slowdown": 0x8,
        "sync_boost": 0x10,
        "sw_thermal_slowdown": 0x20,
        "hw_thermal_slowdown": 0x40,
        "hw_power_brake_slowdown": 0x80,
        "display_clock_setting": 0x100,
    }
)


def _r(name: str, type_: MetricType, help_: str, scale: float = 1.0, **kw: object) -> Rendering:
    return Rendering(name, type_, help_, scale, **kw)  # type: ignore[arg-type]


def _labels(**kv: str) -> Mapping[str, str]:
    return MappingProxyType(dict(kv))


# What a lost GPU's series still say (GPU_IS_LOST): the XIDs it reported, XID 79 among them as it fell off the bus.
KEPT_WHILE_DOWN = frozenset({"last_xid", "xid_errors"})

MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(
        "gpu_util",
        "%",
        "nvmlDeviceGetUtilizationRates.gpu",
        _r("DCGM_FI_DEV_GPU_UTIL", G, "GPU utilization (in %)."),
        _r("nvidia_gpu_utilization_ratio", G, "Fraction of the last sample period the GPU was busy.", 0.01),
    ),
    Measurement(
        "mem_copy_util",
        "%",
        "nvmlDeviceGetUtilizationRates.memory",
        _r("DCGM_FI_DEV_MEM_COPY_UTIL", G, "Memory utilization (in %)."),
        _r(
            "nvidia_gpu_memory_copy_utilization_ratio",
            G,
            "Fraction of the last sample period device memory was being read or written.",
            0.01,
        ),
    ),
    Measurement(
        "enc_util",
        "%",
        "nvmlDeviceGetEncoderUtilization",
        _r("DCGM_FI_DEV_ENC_UTIL", G, "Encoder utilization (in %)."),
        _r("nvidia_gpu_encoder_utilization_ratio", G, "Fraction of time the video encoder was busy.", 0.01),
    ),
    Measurement(
        "dec_util",
        "%",
        "nvmlDeviceGetDecoderUtilization",
        _r("DCGM_FI_DEV_DEC_UTIL", G, "Decoder utilization (in %)."),
        _r("nvidia_gpu_decoder_utilization_ratio", G, "Fraction of time the video decoder was busy.", 0.01),
    ),
    Measurement(
        "fb_used",
        "B",
        "nvmlDeviceGetMemoryInfo_v2.used",
        mig=True,
        dcgm=_r("DCGM_FI_DEV_FB_USED", G, "Framebuffer memory used (in MiB).", MIB, integer=True),
        prometheus=_r("nvidia_gpu_memory_used_bytes", G, "Framebuffer memory allocated, in bytes."),
    ),
    Measurement(
        "fb_free",
        "B",
        "nvmlDeviceGetMemoryInfo_v2.free",
        mig=True,
        dcgm=_r("DCGM_FI_DEV_FB_FREE", G, "Framebuffer memory free (in MiB).", MIB, integer=True),
        prometheus=_r("nvidia_gpu_memory_free_bytes", G, "Framebuffer memory free, in bytes."),
    ),
    Measurement(
        "fb_reserved",
        "B",
        "nvmlDeviceGetMemoryInfo_v2.reserved",
        mig=True,
        dcgm=_r("DCGM_FI_DEV_FB_RESERVED", G, "Framebuffer memory reserved (in MiB).", MIB, integer=True),
        prometheus=_r("nvidia_gpu_memory_reserved_bytes", G, "Framebuffer memory reserved by the driver, in bytes."),
    ),
    Measurement(
        "fb_total",
        "B",
        "nvmlDeviceGetMemoryInfo_v2.total",
        mig=True,
        dcgm=_r("DCGM_FI_DEV_FB_TOTAL", G, "Framebuffer memory total (in MiB).", MIB, integer=True),
        prometheus=_r("nvidia_gpu_memory_total_bytes", G, "Framebuffer memory in total, in bytes."),
    ),
    Measurement(
        "gpu_temp",
        "C",
        "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
        _r("DCGM_FI_DEV_GPU_TEMP", G, "GPU temperature (in C)."),
        _r("nvidia_gpu_temperature_celsius", G, "GPU die temperature, in degrees Celsius."),
    ),
    Measurement(
        "memory_temp",
        "C",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP=82)",
        _r("DCGM_FI_DEV_MEMORY_TEMP", G, "Memory temperature (in C)."),
        _r("nvidia_gpu_memory_temperature_celsius", G, "HBM memory temperature, in degrees Celsius."),
    ),
    Measurement(
        "power_usage",
        "mW",
        "nvmlDeviceGetPowerUsage",
        _r("DCGM_FI_DEV_POWER_USAGE", G, "Power draw (in W).", 0.001),
        _r("nvidia_gpu_power_watts", G, "Power draw, in watts (1 s average on Ampere and newer).", 0.001),
    ),
    Measurement(
        "power_limit",
        "mW",
        "nvmlDeviceGetEnforcedPowerLimit",
        _r("DCGM_FI_DEV_POWER_MGMT_LIMIT", G, "Power management limit (in W).", 0.001),
        _r("nvidia_gpu_power_limit_watts", G, "Enforced power limit, in watts.", 0.001),
    ),
    Measurement(
        "total_energy",
        "mJ",
        "nvmlDeviceGetTotalEnergyConsumption",
        _r("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", C, "Total energy consumption since boot (in mJ)."),
        _r(
            "nvidia_gpu_energy_joules_total",
            C,
            "Energy consumed since the driver was loaded, in joules.",
            0.001,
        ),
    ),
    Measurement(
        "sm_clock",
        "MHz",
        "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
        _r("DCGM_FI_DEV_SM_CLOCK", G, "SM clock frequency (in MHz)."),
        _r("nvidia_gpu_sm_clock_hertz", G, "SM clock frequency, in hertz.", 1e6),
    ),
    Measurement(
        "mem_clock",
        "MHz",
        "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)",
        _r("DCGM_FI_DEV_MEM_CLOCK", G, "Memory clock frequency (in MHz)."),
        _r("nvidia_gpu_memory_clock_hertz", G, "Memory clock frequency, in hertz.", 1e6),
    ),
    Measurement(
        "pstate",
        "",
        "nvmlDeviceGetPerformanceState",
        _r("DCGM_FI_DEV_PSTATE", G, "Performance state (P-State) 0-15. 0=highest."),
        _r("nvidia_gpu_performance_state", G, "Performance state, 0 (highest) to 15 (lowest)."),
    ),
    Measurement(
        "clock_event_reasons",
        "bitmask",
        "nvmlDeviceGetCurrentClocksEventReasons",
        _r("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", G, "Current clock event reasons (bitmask)."),
        _r(
            "nvidia_gpu_clock_event_active",
            G,
            "1 while the named clock event (throttle) reason is active.",
            bits=CLOCK_EVENT_REASONS,
            bit_label="reason",
        ),
    ),
    Measurement(
        "pcie_tx",
        "KB/s",
        # Hopper and newer: GPM's NVML_GPM_METRIC_PCIE_TX_PER_SEC, the mean over the poll interval (as dcgm-exporter's
        # profiling field is an interval figure). Older GPUs: nvmlDeviceGetPcieThroughput, which nvml.h describes as
        # sampled over 20 ms; it blocks for that long, so it is taken every 5 s and held in between.
        "GPM PCIE_TX_PER_SEC, else nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES)",
        _r(
            "DCGM_FI_PROF_PCIE_TX_BYTES",
            G,
            "The rate of data transmitted over the PCIe bus (in bytes/s).",
            1024.0,
        ),
        _r(
            "nvidia_gpu_pcie_transmit_bytes_per_second",
            G,
            "PCIe transmit throughput, bytes/s: the mean over the poll interval on Hopper and newer (GPM), a 20 ms "
            "sample taken every 5 s on older GPUs.",
            1024.0,
        ),
    ),
    Measurement(
        "pcie_rx",
        "KB/s",
        # Hopper and newer: GPM's NVML_GPM_METRIC_PCIE_RX_PER_SEC, the mean over the poll interval (as dcgm-exporter's
        # profiling field is an interval figure). Older GPUs: nvmlDeviceGetPcieThroughput, which nvml.h describes as
        # sampled over 20 ms; it blocks for that long, so it is taken every 5 s and held in between.
        "GPM PCIE_RX_PER_SEC, else nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_RX_BYTES)",
        _r(
            "DCGM_FI_PROF_PCIE_RX_BYTES",
            G,
            "The rate of data received over the PCIe bus (in bytes/s).",
            1024.0,
        ),
        _r(
            "nvidia_gpu_pcie_receive_bytes_per_second",
            G,
            "PCIe receive throughput, bytes/s: the mean over the poll interval on Hopper and newer (GPM), a 20 ms "
            "sample taken every 5 s on older GPUs.",
            1024.0,
        ),
    ),
    Measurement(
        "pcie_replay",
        "count",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_PCIE_REPLAY_COUNTER=94)",
        _r("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", C, "Total number of PCIe retries."),
        _r(
            "nvidia_gpu_pcie_replays_total",
            C,
            "PCIe replays (link-level retries) since the driver was loaded.",
        ),
    ),
    Measurement(
        "ecc_sbe_volatile",
        "count",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_ECC_SBE_VOL_TOTAL=3)",
        _r("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", C, "Total number of single-bit volatile ECC errors."),
        _r(
            "nvidia_gpu_ecc_errors_total",
            C,
            "ECC errors since the driver was loaded, by type.",
            const_labels=_labels(type="correctable"),
        ),
    ),
    Measurement(
        "ecc_dbe_volatile",
        "count",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_ECC_DBE_VOL_TOTAL=4)",
        _r("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", C, "Total number of double-bit volatile ECC errors."),
        _r(
            "nvidia_gpu_ecc_errors_total",
            C,
            "ECC errors since the driver was loaded, by type.",
            const_labels=_labels(type="uncorrectable"),
        ),
    ),
    Measurement(
        "remapped_rows_correctable",
        "rows",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_REMAPPED_COR=142)",
        _r("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", C, "Number of remapped rows for correctable errors"),
        _r(
            "nvidia_gpu_remapped_rows_total",
            C,
            "Memory rows remapped, by the kind of error that caused it.",
            const_labels=_labels(type="correctable"),
        ),
    ),
    Measurement(
        "remapped_rows_uncorrectable",
        "rows",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_REMAPPED_UNC=143)",
        _r("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", C, "Number of remapped rows for uncorrectable errors"),
        _r(
            "nvidia_gpu_remapped_rows_total",
            C,
            "Memory rows remapped, by the kind of error that caused it.",
            const_labels=_labels(type="uncorrectable"),
        ),
    ),
    Measurement(
        "row_remap_pending",
        "bool",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_REMAPPED_PENDING=144)",
        _r("DCGM_FI_DEV_ROW_REMAP_PENDING", G, "Whether remapping of rows is pending (1) or not (0)."),
        _r("nvidia_gpu_row_remap_pending", G, "1 while a row remap waits for the next GPU reset."),
    ),
    Measurement(
        "row_remap_failure",
        "bool",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_REMAPPED_FAILURE=145)",
        _r("DCGM_FI_DEV_ROW_REMAP_FAILURE", G, "Whether remapping of rows has failed"),
        _r("nvidia_gpu_row_remap_failure", G, "1 once a row remap has failed: the GPU needs service."),
    ),
    Measurement(
        "last_xid",
        "xid",
        "nvmlEventSetWait_v2(nvmlEventTypeXidCriticalError)",
        _r("DCGM_FI_DEV_XID_ERRORS", G, "Value of the last XID error encountered.", xid_labels=True),
        _r("nvidia_gpu_last_xid", G, "The last XID error seen since the exporter started (0: none)."),
    ),
    Measurement(
        "xid_errors",
        "count",
        "nvmlEventSetWait_v2(nvmlEventTypeXidCriticalError)",
        vector=True,
        dcgm=None,
        prometheus=_r(
            "nvidia_gpu_xid_errors_total",
            C,
            "XID critical errors seen since the exporter started.",
            vector_label="xid",
        ),
    ),
    Measurement(
        "nvlink_tx",
        "KiB",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX=138)",
        dcgm=None,
        prometheus=_r(
            "nvidia_gpu_nvlink_bytes_total",
            C,
            "NVLink data bytes since the driver was loaded.",
            1024.0,
            const_labels=_labels(direction="transmit"),
        ),
    ),
    Measurement(
        "nvlink_rx",
        "KiB",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX=139)",
        dcgm=None,
        prometheus=_r(
            "nvidia_gpu_nvlink_bytes_total",
            C,
            "NVLink data bytes since the driver was loaded.",
            1024.0,
            const_labels=_labels(direction="receive"),
        ),
    ),
    Measurement(
        "nvlink_total",
        "KiB",
        "nvlink_tx + nvlink_rx",
        dcgm=_r(
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            C,
            "Total number of NVLink bandwidth counters for all lanes.",
        ),
        prometheus=None,
    ),
    Measurement(
        "gr_engine_active",
        "%",
        "nvmlGpmMetricsGet(NVML_GPM_METRIC_GRAPHICS_UTIL)",
        mig=True,
        dcgm=_r("DCGM_FI_PROF_GR_ENGINE_ACTIVE", G, "Ratio of time the graphics engine is active.", 0.01),
        prometheus=_r(
            "nvidia_gpu_graphics_engine_active_ratio",
            G,
            "Fraction of time the graphics/compute engine was active (GPM).",
            0.01,
        ),
    ),
    Measurement(
        "sm_active",
        "%",
        "nvmlGpmMetricsGet(NVML_GPM_METRIC_SM_UTIL)",
        mig=True,
        dcgm=_r("DCGM_FI_PROF_SM_ACTIVE", G, "The ratio of cycles an SM has at least 1 warp assigned.", 0.01),
        prometheus=_r(
            "nvidia_gpu_sm_active_ratio",
            G,
            "Fraction of cycles an SM had at least one warp assigned (GPM).",
            0.01,
        ),
    ),
    Measurement(
        "tensor_active",
        "%",
        "nvmlGpmMetricsGet(NVML_GPM_METRIC_ANY_TENSOR_UTIL)",
        mig=True,
        dcgm=_r("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", G, "Ratio of cycles the tensor (HMMA) pipe is active.", 0.01),
        prometheus=_r("nvidia_gpu_tensor_active_ratio", G, "Fraction of cycles a tensor pipe was active (GPM).", 0.01),
    ),
    Measurement(
        "dram_active",
        "%",
        "nvmlGpmMetricsGet(NVML_GPM_METRIC_DRAM_BW_UTIL)",
        mig=True,
        dcgm=_r("DCGM_FI_PROF_DRAM_ACTIVE", G, "Ratio of cycles the device memory interface is active.", 0.01),
        prometheus=_r(
            "nvidia_gpu_dram_active_ratio",
            G,
            "Fraction of cycles the device memory interface was active (GPM).",
            0.01,
        ),
    ),
)

BY_KEY: Mapping[str, Measurement] = MappingProxyType({m.key: m for m in MEASUREMENTS})

# dcgm-exporter's default counter set (etc/default-counters.csv) that we reproduce name for name.
DCGM_DEFAULT_SET: frozenset[str] = frozenset(
    {
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    }
)

# ---- label names, per dialect ------------------------------------------------------------------------------------
# The dcgm dialect matches this dcgm-exporter release (NVIDIA/dcgm-exporter tag; internal/pkg/rendermetrics and
# internal/pkg/collector): names, types, label names and order, `device` = nvidia<GPU index>, XID `err_code`/`err_msg`.
DCGM_EXPORTER_RELEASE = "4.5.3-4.8.2"
# Former names of dcgm fields, as older counters CSVs spell them -> the name the release uses
DCGM_FORMER_NAMES: Mapping[str, str] = MappingProxyType(
    {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}
)
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
#                                cuda_version, serial, vbios_version, mig_mode; and per MIG instance mig_uuid
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
SELF_CONNECTIONS_CLOSED = "gpu_pulse_http_connections_closed_total"  # {reason}: refused, evicted, header/idle timeout
SELF_UNAVAILABLE = "gpu_pulse_device_unavailable_info"  # {gpu, uuid, gpu_instance, measurement, reason} 1
SELF_PROCESS_VISIBILITY = "gpu_pulse_process_visibility"  # 1: other pods' GPU processes are seen, 0: they are not
SELF_NVML_UP = "gpu_pulse_nvml_up"  # 1 while NVML is usable; 0 while the driver is not (not loaded, version mismatch)
