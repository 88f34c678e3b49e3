"""nvmlDeviceGetFieldValues: counters and readings in one batch, each entry with its own status."""

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
SUPPORTED_FIELDS = frozenset(
    {
        FI_ECC_SBE_VOL_TOTAL,
        FI_ECC_DBE_VOL_TOTAL,
        FI_MEMORY_TEMP,
        FI_TOTAL_ENERGY_CONSUMPTION,
        FI_NVLINK_LINK_COUNT,
        FI_PCIE_REPLAY_COUNTER,
        FI_NVLINK_THROUGHPUT_DATA_TX,
        FI_NVLINK_THROUGHPUT_DATA_RX,
        FI_NVLINK_THROUGHPUT_RAW_TX,
        FI_NVLINK_THROUGHPUT_RAW_RX,
        FI_REMAPPED_COR,
        FI_REMAPPED_UNC,
        FI_REMAPPED_PENDING,
        FI_REMAPPED_FAILURE,
        FI_POWER_INSTANT,
    }
)
_NVLINK_THROUGHPUT = {
    FI_NVLINK_THROUGHPUT_DATA_TX: 1.0,
    FI_NVLINK_THROUGHPUT_DATA_RX: 0.96,
    FI_NVLINK_THROUGHPUT_RAW_TX: 1.08,
    FI_NVLINK_THROUGHPUT_RAW_RX: 0.96 * 1.08,
}


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
        for i in range(n):
            fv = values[i]
            fid = fv.fieldId
            fv.timestamp = stamp
            fv.latencyUsec = 0
            configured = gpu.field_errors.get(fid)
            if configured is not None:
                fv.nvmlReturn = configured
                continue
            if fid in (FI_MEMORY_TEMP, FI_POWER_INSTANT) and load is None:
                load = gpu.load(t)
            fv.nvmlReturn = self._fill(t, gpu, fv, fid, load)
        return cabi.SUCCESS

    @staticmethod
    def _fill(t: float, gpu: SimGpu, fv: Any, fid: int, load: float | None) -> int:
        c = gpu.spec.counters
        v = fv.value
        if fid in _NVLINK_THROUGHPUT:
            links = gpu.model.nvlink_links
            if links == 0:
                return cabi.NOT_SUPPORTED
            scope = fv.scopeId
            if scope != ALL_LINKS and scope >= links:
                return cabi.INVALID_ARGUMENT
            per_link = gpu.nvlink_kib(t) * _NVLINK_THROUGHPUT[fid]
            fv.valueType = ULONGLONG
            v.ullVal = int(per_link * (links if scope == ALL_LINKS else 1))
        elif fid == FI_ECC_SBE_VOL_TOTAL:
            fv.valueType = ULONGLONG
            v.ullVal = int(c.ecc_corrected_per_hour * max(t, 0.0) / 3600.0)
        elif fid == FI_ECC_DBE_VOL_TOTAL:
            fv.valueType = ULONGLONG
            v.ullVal = c.ecc_uncorrected
        elif fid == FI_MEMORY_TEMP:
            if not gpu.model.hbm:
                return cabi.NOT_SUPPORTED
            assert load is not None
            fv.valueType = UINT
            v.uiVal = gpu.memory_temperature_c(t, load)
        elif fid == FI_TOTAL_ENERGY_CONSUMPTION:
            fv.valueType = ULONGLONG
            v.ullVal = gpu.energy_mj(t)
        elif fid == FI_NVLINK_LINK_COUNT:
            if gpu.model.nvlink_links == 0:
                return cabi.NOT_SUPPORTED
            fv.valueType = UINT
            v.uiVal = gpu.model.nvlink_links
        elif fid == FI_PCIE_REPLAY_COUNTER:
            fv.valueType = ULONGLONG
            v.ullVal = pcie_replays(gpu, t)
        elif fid in (FI_REMAPPED_COR, FI_REMAPPED_UNC, FI_REMAPPED_PENDING, FI_REMAPPED_FAILURE):
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
