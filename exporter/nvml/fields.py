"""Counters read in one `nvmlDeviceGetFieldValues` call per device, each entry checked on its own `nvmlReturn`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from exporter.nvml.errors import SUCCESS, Disposition
from exporter.nvml.faults import DeviceFaults

_ALL_LINKS = 0xFFFFFFFF  # scopeId UINT_MAX: NVLink throughput summed over all links (nvml.h)

# catalogue key -> (field id, scope id), field ids from nvml.h
FIELDS: Mapping[str, tuple[int, int]] = MappingProxyType(
    {
        "memory_temp": (82, 0),  # NVML_FI_DEV_MEMORY_TEMP, C
        "ecc_sbe_volatile": (3, 0),  # NVML_FI_DEV_ECC_SBE_VOL_TOTAL
        "ecc_dbe_volatile": (4, 0),  # NVML_FI_DEV_ECC_DBE_VOL_TOTAL
        "pcie_replay": (94, 0),  # NVML_FI_DEV_PCIE_REPLAY_COUNTER
        "remapped_rows_correctable": (142, 0),  # NVML_FI_DEV_REMAPPED_COR
        "remapped_rows_uncorrectable": (143, 0),  # NVML_FI_DEV_REMAPPED_UNC
        "row_remap_pending": (144, 0),  # NVML_FI_DEV_REMAPPED_PENDING
        "row_remap_failure": (145, 0),  # NVML_FI_DEV_REMAPPED_FAILURE
        "nvlink_tx": (138, _ALL_LINKS),  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, KiB
        "nvlink_rx": (139, _ALL_LINKS),  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, KiB
    }
)

# nvmlValueType_t -> the member of nvmlValue_t that holds the value
_VALUE_MEMBERS: Mapping[int, str] = MappingProxyType(
    {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
)

NVLINK_TOTAL = "nvlink_total"  # derived: nvlink_tx + nvlink_rx


def field_keys_for(enabled: frozenset[str]) -> tuple[str, ...]:
    """The field keys to read: the enabled ones, plus NVLink tx/rx when only their sum is enabled."""
    wanted = set(enabled)
    if NVLINK_TOTAL in enabled:
        wanted |= {"nvlink_tx", "nvlink_rx"}
    return tuple(key for key in FIELDS if key in wanted)


def field_value(entry: Any) -> float:
    """The value of one nvmlFieldValue_t entry, read from the union member its valueType names."""
    member = _VALUE_MEMBERS.get(int(entry.valueType))
    if member is None:
        raise ValueError(f"field {entry.fieldId}: unknown NVML value type {entry.valueType}")
    return float(getattr(entry.value, member))


class FieldBatch:
    """The field-value counters of one device. Fields the device cannot give leave the batch for good."""

    __slots__ = ("_ids", "_keys")

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys: tuple[str, ...] = ()
        self._ids: list[tuple[int, int]] = []
        self._set(tuple(keys))

    def _set(self, keys: tuple[str, ...]) -> None:
        self._keys = keys
        self._ids = [FIELDS[key] for key in keys]

    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys

    def read(self, nvml: Any, handle: Any, faults: DeviceFaults, into: dict[str, float]) -> None:
        """Read all fields in one call into `into`. A whole-call error, or a lost GPU, raises NVMLError."""
        if not self._keys:
            return
        entries = nvml.nvmlDeviceGetFieldValues(handle, self._ids)
        dropped: list[str] = []
        for key, entry in zip(self._keys, entries, strict=False):
            code = int(entry.nvmlReturn)
            if code == SUCCESS:
                into[key] = field_value(entry)
            else:
                kind = faults.record_code(key, code)
                if kind is Disposition.UNSUPPORTED:
                    dropped.append(key)
                elif kind is Disposition.LOST:
                    raise nvml.NVMLError(code)  # the same as the whole call failing: the GPU is gone
        if dropped:
            self._set(tuple(key for key in self._keys if key not in dropped))
