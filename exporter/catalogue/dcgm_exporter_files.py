"""dcgm-exporter's counters files, line by line: the fields each lists, with the type and help text it gives them,
and whether the line is enabled or commented out.

Facts from NVIDIA/dcgm-exporter etc/default-counters.csv, etc/dcp-metrics-included.csv and
etc/1.x-compatibility-metrics.csv at tag 4.5.3-4.8.2 (commit 691c92762eb5), the release the dcgm dialect matches.
gpu-pulse's migration table (docs/migration.md) covers every field of these files, and a test writes each file back in
dcgm-exporter's format from this table (every line enabled) and runs the exporter with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class CounterLine:
    name: str  # the field, as the file spells it
    type: str  # gauge, counter or label
    help: str
    enabled: bool  # False: the line is commented out in the file


L = CounterLine
ON, OFF = True, False

# etc/default-counters.csv
DEFAULT_COUNTERS: tuple[CounterLine, ...] = (
    L("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", ON),
    L("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", ON),
    L("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", ON),
    L("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", ON),
    L("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", ON),
    L("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", ON),
    L("DCGM_FI_PROF_PCIE_TX_BYTES", "counter", "Total number of bytes transmitted through PCIe TX via NVML.", OFF),
    L("DCGM_FI_PROF_PCIE_RX_BYTES", "counter", "Total number of bytes received through PCIe RX via NVML.", OFF),
    L("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", ON),
    L("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", ON),
    L("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", ON),
    L("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", ON),
    L("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", ON),
    L("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", ON),
    L("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in ns).", OFF),
    L("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in ns).", OFF),
    L("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "counter", "Throttling duration due to sync-boost constraints (in ns).", OFF),
    L(
        "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
        "counter",
        "Throttling duration due to board limit constraints (in ns).",
        OFF,
    ),
    L("DCGM_FI_DEV_LOW_UTIL_VIOLATION", "counter", "Throttling duration due to low utilization (in ns).", OFF),
    L(
        "DCGM_FI_DEV_RELIABILITY_VIOLATION",
        "counter",
        "Throttling duration due to reliability constraints (in ns).",
        OFF,
    ),
    L("DCGM_EXP_CLOCK_EVENTS_COUNT", "counter", "reported clock events", OFF),
    L("DCGM_EXP_XID_ERRORS_COUNT", "counter", "reported XIDs during last window", OFF),
    L("DCGM_EXP_GPU_HEALTH_STATUS", "counter", "DCGM reported health status", OFF),
    L("DCGM_EXP_P2P_STATUS", "counter", "P2P NvLink status", OFF),
    L("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", ON),
    L("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", ON),
    L("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", ON),
    L("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors.", OFF),
    L("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors.", OFF),
    L("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Total number of single-bit persistent ECC errors.", OFF),
    L("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Total number of double-bit persistent ECC errors.", OFF),
    L("DCGM_FI_DEV_RETIRED_SBE", "counter", "Total number of retired pages due to single-bit errors.", OFF),
    L("DCGM_FI_DEV_RETIRED_DBE", "counter", "Total number of retired pages due to double-bit errors.", OFF),
    L("DCGM_FI_DEV_RETIRED_PENDING", "counter", "Total number of pages pending retirement.", OFF),
    L(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
        OFF,
    ),
    L("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink data CRC errors.", OFF),
    L("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries.", OFF),
    L("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink recovery errors.", OFF),
    L("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes.", ON),
    L(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0",
        "counter",
        "The number of bytes of active NVLink rx or tx data including both header and payload.",
        OFF,
    ),
    L("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", ON),
    L("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors", ON),
    L("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors", ON),
    L("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", ON),
    L("DCGM_FI_DRIVER_VERSION", "label", "Driver Version", ON),
    L("DCGM_FI_NVML_VERSION", "label", "NVML Version", OFF),
    L("DCGM_FI_DEV_BRAND", "label", "Device Brand", OFF),
    L("DCGM_FI_DEV_SERIAL", "label", "Device Serial Number", OFF),
    L("DCGM_FI_DEV_OEM_INFOROM_VER", "label", "OEM inforom version", OFF),
    L("DCGM_FI_DEV_ECC_INFOROM_VER", "label", "ECC inforom version", OFF),
    L("DCGM_FI_DEV_POWER_INFOROM_VER", "label", "Power management object inforom version", OFF),
    L("DCGM_FI_DEV_INFOROM_IMAGE_VER", "label", "Inforom image version", OFF),
    L("DCGM_FI_DEV_VBIOS_VERSION", "label", "VBIOS version of the device", OFF),
    L("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", ON),
    L("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.", OFF),
    L("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "The ratio of number of warps resident on an SM.", OFF),
    L("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", ON),
    L(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        ON,
    ),
    L("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "Ratio of cycles the fp64 pipes are active.", OFF),
    L("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "Ratio of cycles the fp32 pipes are active.", OFF),
    L("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "Ratio of cycles the fp16 pipes are active.", OFF),
    L(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads "
        "- in bytes per second.",
        ON,
    ),
    L(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - "
        "in bytes per second.",
        ON,
    ),
)

# etc/dcp-metrics-included.csv
DCP_METRICS_INCLUDED: tuple[CounterLine, ...] = (
    L("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", ON),
    L("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", ON),
    L("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", ON),
    L("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", ON),
    L("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", ON),
    L("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", ON),
    L("DCGM_FI_PROF_PCIE_TX_BYTES", "counter", "Total number of bytes transmitted through PCIe TX via NVML.", OFF),
    L("DCGM_FI_PROF_PCIE_RX_BYTES", "counter", "Total number of bytes received through PCIe RX via NVML.", OFF),
    L("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", ON),
    L("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", ON),
    L("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", ON),
    L("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", ON),
    L("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", ON),
    L("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", ON),
    L("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in ns).", OFF),
    L("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in ns).", OFF),
    L("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "counter", "Throttling duration due to sync-boost constraints (in ns).", OFF),
    L(
        "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
        "counter",
        "Throttling duration due to board limit constraints (in ns).",
        OFF,
    ),
    L("DCGM_FI_DEV_LOW_UTIL_VIOLATION", "counter", "Throttling duration due to low utilization (in ns).", OFF),
    L(
        "DCGM_FI_DEV_RELIABILITY_VIOLATION",
        "counter",
        "Throttling duration due to reliability constraints (in ns).",
        OFF,
    ),
    L("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", ON),
    L("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", ON),
    L("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", ON),
    L("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors.", OFF),
    L("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors.", OFF),
    L("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Total number of single-bit persistent ECC errors.", OFF),
    L("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Total number of double-bit persistent ECC errors.", OFF),
    L("DCGM_FI_DEV_RETIRED_SBE", "counter", "Total number of retired pages due to single-bit errors.", OFF),
    L("DCGM_FI_DEV_RETIRED_DBE", "counter", "Total number of retired pages due to double-bit errors.", OFF),
    L("DCGM_FI_DEV_RETIRED_PENDING", "counter", "Total number of pages pending retirement.", OFF),
    L(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
        OFF,
    ),
    L("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink data CRC errors.", OFF),
    L("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries.", OFF),
    L("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink recovery errors.", OFF),
    L("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes.", ON),
    L(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0",
        "counter",
        "The number of bytes of active NVLink rx or tx data including both header and payload.",
        OFF,
    ),
    L("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", ON),
    L("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors", ON),
    L("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors", ON),
    L("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", ON),
    L("DCGM_FI_DRIVER_VERSION", "label", "Driver Version", ON),
    L("DCGM_FI_NVML_VERSION", "label", "NVML Version", OFF),
    L("DCGM_FI_DEV_BRAND", "label", "Device Brand", OFF),
    L("DCGM_FI_DEV_SERIAL", "label", "Device Serial Number", OFF),
    L("DCGM_FI_DEV_OEM_INFOROM_VER", "label", "OEM inforom version", OFF),
    L("DCGM_FI_DEV_ECC_INFOROM_VER", "label", "ECC inforom version", OFF),
    L("DCGM_FI_DEV_POWER_INFOROM_VER", "label", "Power management object inforom version", OFF),
    L("DCGM_FI_DEV_INFOROM_IMAGE_VER", "label", "Inforom image version", OFF),
    L("DCGM_FI_DEV_VBIOS_VERSION", "label", "VBIOS version of the device", OFF),
    L("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", ON),
    L("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.", OFF),
    L("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "The ratio of number of warps resident on an SM.", OFF),
    L("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", ON),
    L(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        ON,
    ),
    L("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "Ratio of cycles the fp64 pipes are active.", OFF),
    L("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "Ratio of cycles the fp32 pipes are active.", OFF),
    L("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "Ratio of cycles the fp16 pipes are active.", OFF),
    L(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads "
        "- in bytes per second.",
        ON,
    ),
    L(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - "
        "in bytes per second.",
        ON,
    ),
)

# etc/1.x-compatibility-metrics.csv
COMPATIBILITY_1X: tuple[CounterLine, ...] = (
    L("dcgm_sm_clock", "gauge", "SM clock frequency (in MHz).", ON),
    L("dcgm_memory_clock", "gauge", "Memory clock frequency (in MHz).", ON),
    L("dcgm_memory_temp", "gauge", "Memory temperature (in C).", ON),
    L("dcgm_gpu_temp", "gauge", "GPU temperature (in C).", ON),
    L("dcgm_power_usage", "gauge", "Power draw (in W).", ON),
    L("dcgm_total_energy_consumption", "counter", "Total energy consumption since boot (in mJ).", ON),
    L("dcgm_fi_prof_pcie_tx_bytes", "counter", "Total number of bytes transmitted through PCIe TX via NVML.", ON),
    L("dcgm_fi_prof_pcie_rx_bytes", "counter", "Total number of bytes received through PCIe RX via NVML.", ON),
    L("dcgm_pcie_replay_counter", "counter", "Total number of PCIe retries.", ON),
    L("dcgm_gpu_utilization", "gauge", "GPU utilization (in %).", ON),
    L("dcgm_mem_copy_utilization", "gauge", "Memory utilization (in %).", ON),
    L("dcgm_enc_utilization", "gauge", "Encoder utilization (in %).", ON),
    L("dcgm_dec_utilization", "gauge", "Decoder utilization (in %).", ON),
    L("dcgm_xid_errors", "gauge", "Value of the last XID error encountered.", ON),
    L("dcgm_power_violation", "counter", "Throttling duration due to power constraints (in ns).", OFF),
    L("dcgm_thermal_violation", "counter", "Throttling duration due to thermal constraints (in ns).", OFF),
    L("dcgm_sync_boost_violation", "counter", "Throttling duration due to sync-boost constraints (in ns).", OFF),
    L("dcgm_board_limit_violation", "counter", "Throttling duration due to board limit constraints (in ns).", OFF),
    L("dcgm_low_util_violation", "counter", "Throttling duration due to low utilization (in ns).", OFF),
    L("dcgm_reliability_violation", "counter", "Throttling duration due to reliability constraints (in ns).", OFF),
    L("dcgm_fb_free", "gauge", "Framebuffer memory free (in MiB).", ON),
    L("dcgm_fb_used", "gauge", "Framebuffer memory used (in MiB).", ON),
    L("dcgm_ecc_sbe_volatile_total", "counter", "Total number of single-bit volatile ECC errors.", OFF),
    L("dcgm_ecc_dbe_volatile_total", "counter", "Total number of double-bit volatile ECC errors.", OFF),
    L("dcgm_ecc_sbe_aggregate_total", "counter", "Total number of single-bit persistent ECC errors.", OFF),
    L("dcgm_ecc_dbe_aggregate_total", "counter", "Total number of double-bit persistent ECC errors.", OFF),
    L("dcgm_retired_pages_sbe", "counter", "Total number of retired pages due to single-bit errors.", OFF),
    L("dcgm_retired_pages_dbe", "counter", "Total number of retired pages due to double-bit errors.", OFF),
    L("dcgm_retired_pages_pending", "counter", "Total number of pages pending retirement.", OFF),
    L("dcgm_nvlink_flit_crc_error_count_total", "counter", "Total number of NVLink flow-control CRC errors.", OFF),
    L("dcgm_nvlink_data_crc_error_count_total", "counter", "Total number of NVLink data CRC errors.", OFF),
    L("dcgm_nvlink_replay_error_count_total", "counter", "Total number of NVLink retries.", OFF),
    L("dcgm_nvlink_recovery_error_count_total", "counter", "Total number of NVLink recovery errors.", OFF),
    L("dcgm_nvlink_bandwidth_total", "counter", "Total number of NVLink bandwidth counters for all lanes", ON),
    L("dcgm_fi_prof_gr_engine_active", "gauge", "Ratio of time the graphics engine is active (in %).", ON),
    L("dcgm_fi_prof_sm_active", "gauge", "The ratio of cycles an SM has at least 1 warp assigned (in %).", OFF),
    L("dcgm_fi_prof_sm_occupancy", "gauge", "The ratio of number of warps resident on an SM (in %).", OFF),
    L("dcgm_fi_prof_pipe_tensor_active", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active (in %).", ON),
    L(
        "dcgm_fi_prof_dram_active",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data (in %).",
        ON,
    ),
    L(
        "dcgm_fi_prof_pcie_tx_bytes",
        "counter",
        "The number of bytes of active pcie tx data including both header and payload.",
        ON,
    ),
    L(
        "dcgm_fi_prof_pcie_rx_bytes",
        "counter",
        "The number of bytes of active pcie rx data including both header and payload.",
        ON,
    ),
)

FILES: Mapping[str, tuple[CounterLine, ...]] = MappingProxyType(
    {
        "default-counters.csv": DEFAULT_COUNTERS,
        "dcp-metrics-included.csv": DCP_METRICS_INCLUDED,
        "1.x-compatibility-metrics.csv": COMPATIBILITY_1X,
    }
)


def as_csv(lines: tuple[CounterLine, ...], *, all_enabled: bool = False) -> str:
    """The file in dcgm-exporter's format (`FIELD, type, help`, `#` for a commented line); `all_enabled`: every line
    uncommented."""
    header = (
        "# Format\n"
        "# If line starts with a '#' it is considered a comment\n"
        "# DCGM FIELD, Prometheus metric type, help message\n"
    )
    body = "".join(
        f"{'' if all_enabled or line.enabled else '# '}{line.name}, {line.type}, {line.help}\n" for line in lines
    )
    return header + body
