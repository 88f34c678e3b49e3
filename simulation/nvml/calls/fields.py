"""nvmlDeviceGetFieldValues: counters and readings in one batch, each entry with its own status.

Field ids and meanings: nvml.h (NVML_FI_*). What a generation refuses, each entry NOT_SUPPORTED as a real driver
answers it (see the checks in `_supported`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simulation.machine import Node, SimGpu, SimMig
from simulation.nvml import cabi
from simulation.nvml.cabi import as_int, target
from simulation.nvml.calls.telemetry import pcie_replays

DeviceCall = Callable[..., int]

# nvmlValueType_t
DOUBLE, UINT, ULONG, ULONGLONG, SLONGLONG = 0, 1, 2, 3, 4

FI_ECC_SBE_VOL_TOTAL = 3
FI_ECC_DBE_VOL_TOTAL = 4
FI_ECC_SBE_AGG_TOTAL = 5
FI_ECC_DBE_AGG_TOTAL = 6
FI_RETIRED_SBE = 29
FI_RETIRED_DBE = 30
FI_RETIRED_PENDING = 31
FI_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL = 38
FI_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = 45
FI_NVLINK_REPLAY_ERROR_COUNT_TOTAL = 52
FI_NVLINK_RECOVERY_ERROR_COUNT_TOTAL = 59
FI_PERF_POLICY_POWER = 74  # ... 79: POWER, THERMAL, SYNC_BOOST, BOARD_LIMIT, LOW_UTILIZATION, RELIABILITY (ns)
FI_PERF_POLICY_RELIABILITY = 79
FI_MEMORY_TEMP = 82
FI_TOTAL_ENERGY_CONSUMPTION = 83
FI_NVLINK_LINK_COUNT = 91
FI_PCIE_REPLAY_COUNTER = 94
FI_NVLINK_THROUGHPUT_DATA_TX = 138
FI_NVLINK_THROUGHPUT_DATA_RX = 139
FI_NVLINK_THROUGHPUT_RAW_TX = 140
FI_NVLINK_THROUGHPUT_RAW_RX = 141
FI_REMAPPED_COR = 142
FI_REMAPPED_UNC = 143
FI_REMAPPED_PENDING = 144
FI_REMAPPED_FAILURE = 145
FI_POWER_INSTANT = 186

ALL_LINKS = 0xFFFFFFFF  # scopeId asking for the sum over every NVLink
_ECC = frozenset({FI_ECC_SBE_VOL_TOTAL, FI_ECC_DBE_VOL_TOTAL, FI_ECC_SBE_AGG_TOTAL, FI_ECC_DBE_AGG_TOTAL})
_VOLATILE_ECC = frozenset({FI_ECC_SBE_VOL_TOTAL, FI_ECC_DBE_VOL_TOTAL})
_RETIRED = frozenset({FI_RETIRED_SBE, FI_RETIRED_DBE, FI_RETIRED_PENDING})
_REMAPPED = frozenset({FI_REMAPPED_COR, FI_REMAPPED_UNC, FI_REMAPPED_PENDING, FI_REMAPPED_FAILURE})
_NVLINK_ERRORS = {
    FI_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: 1.0,
    FI_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: 0.25,
    FI_NVLINK_REPLAY_ERROR_COUNT_TOTAL: 1.0,
    FI_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: 0.0,
}
_VIOLATIONS = range(FI_PERF_POLICY_POWER, FI_PERF_POLICY_RELIABILITY + 1)
SUPPORTED_FIELDS = frozenset(
    {
        *_ECC,
        *_RETIRED,
        *_NVLINK_ERRORS,
        *_VIOLATIONS,
        FI_MEMORY_TEMP,
        FI_TOTAL_ENERGY_CONSUMPTION,
        FI_NVLINK_LINK_COUNT,
        FI_PCIE_REPLAY_COUNTER,
        FI_NVLINK_THROUGHPUT_DATA_TX,
        FI_NVLINK_THROUGHPUT_DATA_RX,
        FI_NVLINK_THROUGHPUT_RAW_TX,
        FI_NVLINK_THROUGHPUT_RAW_RX,
        *_REMAPPED,
        FI_POWER_INSTANT,
    }
)
_NVLINK_THROUGHPUT = {
    FI_NVLINK_THROUGHPUT_DATA_TX: 1.0,
    FI_NVLINK_THROUGHPUT_DATA_RX: 0.96,
    FI_NVLINK_THROUGHPUT_RAW_TX: 1.08,
    FI_NVLINK_THROUGHPUT_RAW_RX: 0.96 * 1.08,
}


def _supported(gpu: SimGpu, fid: int) -> bool:
    """Whether this GPU's driver answers field `fid` at all (else the entry is NOT_SUPPORTED)."""
    model = gpu.model
    if fid in _ECC and not gpu.spec.ecc:
        return False  # nvml.h, nvmlDeviceGetTotalEccErrors: "Requires ECC Mode to be enabled"
    if fid in _VOLATILE_ECC and gpu.mig_enabled:
        # nvml.h, nvmlDeviceGetMemoryErrorCounter: on MIG-enabled GPUs "querying volatile errors using device
        # handles is currently not supported"
        return False
    if fid in _RETIRED:
        return model.page_retirement  # Ampere and newer remap rows: nvidia-smi -q shows Retired Pages N/A
    if fid in _REMAPPED:
        return model.row_remapping  # nvml.h, nvmlDeviceGetRemappedRows: "For Ampere or newer"
    if fid in _NVLINK_ERRORS or fid in _NVLINK_THROUGHPUT or fid == FI_NVLINK_LINK_COUNT:
        return model.nvlink_links > 0  # a PCIe board has no NVLink
    if fid == FI_MEMORY_TEMP:
        return model.hbm  # GDDR boards have no memory temperature sensor (nvidia-smi -q: N/A)
    return fid in SUPPORTED_FIELDS


class FieldCalls:
    def __init__(self, node: Node) -> None:
        self.node = node

    def calls(self) -> dict[str, DeviceCall]:
        return {"nvmlDeviceGetFieldValues": self.field_values}

    def field_values(self, t: float, gpu: SimGpu, mig: SimMig | None, count: Any, values_ref: Any) -> int:
        n = as_int(count)
        values = target(values_ref)
        if n < 0 or values is None:
            return cabi.INVALID_ARGUMENT
        stamp = int((self.node.t0 + t) * 1e6)
        load: float | None = None
        untyped = self.node.scenario.untyped_fields
        for i in range(n):
            fv = values[i]
            fid = fv.fieldId
            fv.timestamp = stamp
            fv.latencyUsec = 0
            configured = gpu.field_errors.get(fid)
            if configured is not None:
                fv.nvmlReturn = configured
                continue
            if not _supported(gpu, fid):
                fv.nvmlReturn = cabi.NOT_SUPPORTED
                continue
            if fid in (FI_MEMORY_TEMP, FI_POWER_INSTANT) and load is None:
                load = gpu.load(t)
            given = fv.valueType
            fv.nvmlReturn = self._fill(t, gpu, fv, fid, load)
            if fid in untyped:  # the value is written, its type left as the caller had it (Scenario.untyped_fields)
                fv.valueType = given
        return cabi.SUCCESS

    @staticmethod
    def _fill(t: float, gpu: SimGpu, fv: Any, fid: int, load: float | None) -> int:
        c = gpu.spec.counters
        v = fv.value
        fv.valueType = ULONGLONG
        links = gpu.model.nvlink_links
        if fid in _NVLINK_THROUGHPUT:
            scope = fv.scopeId
            if scope != ALL_LINKS and scope >= links:
                return cabi.INVALID_ARGUMENT
            per_link = gpu.nvlink_kib(t) * _NVLINK_THROUGHPUT[fid]
            v.ullVal = int(per_link * (links if scope == ALL_LINKS else 1))
        elif fid in _NVLINK_ERRORS:
            v.ullVal = int(c.nvlink_crc_errors_per_hour * _NVLINK_ERRORS[fid] * gpu.since_load(t) / 3600.0)
        elif fid in _VIOLATIONS:
            v.ullVal = gpu.violation_ns(t, fid - FI_PERF_POLICY_POWER)
        elif fid == FI_ECC_SBE_VOL_TOTAL:
            v.ullVal = int(c.ecc_corrected_per_hour * gpu.since_load(t) / 3600.0)
        elif fid == FI_ECC_DBE_VOL_TOTAL:
            v.ullVal = 0 if gpu.reloaded else c.ecc_uncorrected
        elif fid == FI_ECC_SBE_AGG_TOTAL:  # aggregate: persists across driver loads (nvmlEccCounterType_t)
            v.ullVal = c.ecc_lifetime_corrected + int(c.ecc_corrected_per_hour * max(t, 0.0) / 3600.0)
        elif fid == FI_ECC_DBE_AGG_TOTAL:
            v.ullVal = c.ecc_lifetime_uncorrected + c.ecc_uncorrected
        elif fid in _RETIRED:
            v.ullVal = {
                FI_RETIRED_SBE: c.retired_pages_sbe,
                FI_RETIRED_DBE: c.retired_pages_dbe,
                FI_RETIRED_PENDING: int(c.retired_pages_pending),
            }[fid]
        elif fid == FI_MEMORY_TEMP:
            assert load is not None
            fv.valueType = UINT
            v.uiVal = gpu.memory_temperature_c(t, load)
        elif fid == FI_TOTAL_ENERGY_CONSUMPTION:
            v.ullVal = gpu.energy_mj(t)
        elif fid == FI_NVLINK_LINK_COUNT:
            fv.valueType = UINT
            v.uiVal = links
        elif fid == FI_PCIE_REPLAY_COUNTER:
            v.ullVal = pcie_replays(gpu, t)
        elif fid in _REMAPPED:
            fv.valueType = UINT
            v.uiVal = {
                FI_REMAPPED_COR: c.remapped_correctable,
                FI_REMAPPED_UNC: c.remapped_uncorrectable,
                FI_REMAPPED_PENDING: int(c.remap_pending),
                FI_REMAPPED_FAILURE: int(c.remap_failure),
            }[fid]
        elif fid == FI_POWER_INSTANT:
            assert load is not None
            fv.valueType = UINT
            v.uiVal = int(gpu.power_mw(load) * (1.0 + 0.02 * ((t * 7.3) % 1.0 - 0.5)))
        else:
            return cabi.NOT_SUPPORTED
        return cabi.SUCCESS
