"""Counters read in one `nvmlDeviceGetFieldValues` call per device, each entry checked on its own `nvmlReturn`."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from exporter.nvml.errors import SUCCESS, Disposition, disposition, status_code
from exporter.nvml.faults import DeviceFaults

ALL_LINKS = 0xFFFFFFFF  # scopeId UINT_MAX: NVLink throughput summed over all links (nvml.h)
NVLINK_TX, NVLINK_RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / _RX, KiB; scopeId: a link, or ALL_LINKS
NVLINK_LINK_COUNT = 91  # NVML_FI_DEV_NVLINK_LINK_COUNT
MAX_LINKS = 18  # the links DCGM has per-link fields for (DCGM_FI_DEV_NVLINK_THROUGHPUT_L0..L17)

# catalogue key -> (field id, scope id), field ids from nvml.h
FIELDS: Mapping[str, tuple[int, int]] = MappingProxyType(
    {
        "memory_temp": (82, 0),  # NVML_FI_DEV_MEMORY_TEMP, C
        "ecc_sbe_volatile": (3, 0),  # NVML_FI_DEV_ECC_SBE_VOL_TOTAL
        "ecc_dbe_volatile": (4, 0),  # NVML_FI_DEV_ECC_DBE_VOL_TOTAL
        "ecc_sbe_aggregate": (5, 0),  # NVML_FI_DEV_ECC_SBE_AGG_TOTAL
        "ecc_dbe_aggregate": (6, 0),  # NVML_FI_DEV_ECC_DBE_AGG_TOTAL
        "retired_pages_sbe": (29, 0),  # NVML_FI_DEV_RETIRED_SBE
        "retired_pages_dbe": (30, 0),  # NVML_FI_DEV_RETIRED_DBE
        "retired_pages_pending": (31, 0),  # NVML_FI_DEV_RETIRED_PENDING, 1 = yes
        "nvlink_crc_flit_errors": (38, 0),  # NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL
        "nvlink_crc_data_errors": (45, 0),  # NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL
        "nvlink_replay_errors": (52, 0),  # NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL
        "nvlink_recovery_errors": (59, 0),  # NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL
        "power_violation": (74, 0),  # NVML_FI_DEV_PERF_POLICY_POWER, ns
        "thermal_violation": (75, 0),  # NVML_FI_DEV_PERF_POLICY_THERMAL, ns
        "sync_boost_violation": (76, 0),  # NVML_FI_DEV_PERF_POLICY_SYNC_BOOST, ns
        "board_limit_violation": (77, 0),  # NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT, ns
        "low_util_violation": (78, 0),  # NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION, ns
        "reliability_violation": (79, 0),  # NVML_FI_DEV_PERF_POLICY_RELIABILITY, ns
        "pcie_replay": (94, 0),  # NVML_FI_DEV_PCIE_REPLAY_COUNTER
        "remapped_rows_correctable": (142, 0),  # NVML_FI_DEV_REMAPPED_COR
        "remapped_rows_uncorrectable": (143, 0),  # NVML_FI_DEV_REMAPPED_UNC
        "row_remap_pending": (144, 0),  # NVML_FI_DEV_REMAPPED_PENDING
        "row_remap_failure": (145, 0),  # NVML_FI_DEV_REMAPPED_FAILURE
        "nvlink_tx": (NVLINK_TX, ALL_LINKS),
        "nvlink_rx": (NVLINK_RX, ALL_LINKS),
    }
)

# nvmlValueType_t -> the member of nvmlValue_t that holds the value
_VALUE_MEMBERS: Mapping[int, str] = MappingProxyType(
    {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
)
_UINT, _ULONGLONG = 1, 3  # NVML_VALUE_TYPE_UNSIGNED_INT, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
# Fields read from the member their field id says, whatever `valueType` says, as DCGM reads them: NVML leaves the type
# of some unset, and the caller's zero-filled array (pynvml's) then says DOUBLE, so 7 ECC errors would read 3.5e-323.
# - ECC (NVML_FI_DEV_ECC_CURRENT=1 .. NVML_FI_DEV_ECC_DBE_AGG_CBU=28): NVIDIA/DCGM dcgmlib/src/DcgmCacheManager.cpp,
#   "WAR for NVML Bug 2032468. Force the valueType to unsigned long long for ECC fields, because NVML isn't setting
#   them and it's defaulting to a double";
# - memory temperature (NVML_FI_DEV_MEMORY_TEMP=82): the same file reads `value.uiVal`, "Ignore value.valueType, WaR for
#   nvml setting type as double ... See nvbugs/4300930 affecting r545".
READ_AS: Mapping[int, int] = MappingProxyType({**dict.fromkeys(range(1, 29), _ULONGLONG), 82: _UINT})
# nvmlFieldValue_t (nvml.h): fieldId, scopeId, timestamp, latencyUsec, valueType, nvmlReturn, and the 8-byte value
# union, each member at its natural alignment, so standard sizes without padding; the members of the union by type
_ENTRY = struct.Struct("=IIqqII8s")
_VALUE_LAYOUTS: Mapping[int, struct.Struct] = MappingProxyType(
    {
        0: struct.Struct("=d"),
        1: struct.Struct("=I"),
        2: struct.Struct("=Q" if ctypes.sizeof(ctypes.c_ulong) == 8 else "=I"),  # unsigned long: 8 bytes on LP64
        3: struct.Struct("=Q"),
        4: struct.Struct("=q"),
        5: struct.Struct("=i"),
        6: struct.Struct("=H"),
    }
)

NVLINK_TOTAL = "nvlink_total"  # derived: the rate of nvlink_tx + nvlink_rx
LINK_RATE_PREFIX = "nvlink_bandwidth_l"  # derived: nvlink_bandwidth_l<n>, the rate of link n's tx + rx
LINK_VECTORS = ("nvlink_link_tx", "nvlink_link_rx")  # per-link counters, keyed by link


def link_entry(direction: str, link: int) -> str:
    """The batch key of one link's counter: `nvlink_link_tx:3`."""
    return f"nvlink_link_{direction}:{link}"


def wants_links(enabled: frozenset[str]) -> bool:
    """Whether any per-link NVLink figure is enabled."""
    return any(key.startswith(LINK_RATE_PREFIX) for key in enabled) or bool(enabled & frozenset(LINK_VECTORS))


def links_missing(enabled: frozenset[str], links: int) -> list[str]:
    """The enabled per-link keys a GPU with `links` NVLinks cannot give (links it does not have; all on a PCIe
    board, where NVML answers the link count NOT_SUPPORTED)."""
    missing = [f"{LINK_RATE_PREFIX}{n}" for n in range(min(links, MAX_LINKS), MAX_LINKS)]
    if links == 0:
        missing += LINK_VECTORS
    return [key for key in missing if key in enabled]


def field_entries(enabled: frozenset[str], links: int = 0) -> tuple[tuple[str, int, int], ...]:
    """The (key, field id, scope id) entries to read: the enabled fields, NVLink tx/rx when only their rate is
    enabled, and each of `links` links' tx and rx when a per-link figure is enabled."""
    wanted = set(enabled)
    if NVLINK_TOTAL in enabled:
        wanted |= {"nvlink_tx", "nvlink_rx"}
    entries = [(key, *FIELDS[key]) for key in FIELDS if key in wanted]
    if wants_links(enabled):
        for link in range(min(links, MAX_LINKS)):
            entries.append((link_entry("tx", link), NVLINK_TX, link))
            entries.append((link_entry("rx", link), NVLINK_RX, link))
    return tuple(entries)


def field_value(entry: Any) -> float:
    """The value of one nvmlFieldValue_t entry, read from the union member its valueType names (or, for the fields
    NVML may leave untyped, the member its field id says: READ_AS)."""
    member = _VALUE_MEMBERS.get(READ_AS.get(int(entry.fieldId), int(entry.valueType)))
    if member is None:
        raise ValueError(f"field {entry.fieldId}: unknown NVML value type {entry.valueType}")
    return float(getattr(entry.value, member))


def decoded_entries(entries: Any) -> Iterator[tuple[int, float, int]]:
    """(nvmlReturn, value, timestamp) of each entry of a field-values answer. pynvml answers a ctypes array, read here
    from its memory in one pass: its structures answer every attribute through Python code, which made this decoding
    most of the exporter's own cost of a batch (docs/decisions/2026-11-28-exporter-reader-plan.md). Anything else
    (a stand-in's list) is read attribute by attribute. Each value is read as its valueType says, except the fields
    NVML may leave untyped (READ_AS). Raises ValueError for a value type NVML does not define."""
    try:
        rows = _ENTRY.iter_unpack(entries)
    except TypeError:  # not a buffer
        for entry in entries:
            code = int(entry.nvmlReturn)
            yield code, (field_value(entry) if code == SUCCESS else 0.0), int(entry.timestamp)
        return
    for field, _, timestamp, _, value_type, code, raw in rows:
        if code != SUCCESS:
            yield code, 0.0, timestamp
            continue
        layout = _VALUE_LAYOUTS.get(READ_AS.get(field, value_type))
        if layout is None:
            raise ValueError(f"field {field}: unknown NVML value type {value_type}")
        yield code, float(layout.unpack_from(raw)[0]), timestamp


def link_count(nvml: Any, handle: Any) -> int:
    """How many NVLinks the GPU has (0 when it has none, or NVML will not say). A lost GPU raises NVMLError."""
    try:
        (entry,) = nvml.nvmlDeviceGetFieldValues(handle, [(NVLINK_LINK_COUNT, 0)])
    except nvml.NVMLError as exc:
        if disposition(status_code(exc)) is Disposition.LOST:
            raise
        return 0
    if int(entry.nvmlReturn) != SUCCESS:
        return 0
    return int(field_value(entry))


class FieldBatch:
    """The field-value counters of one device. Fields the device cannot give leave the batch for good; a per-link
    entry the device refuses takes its link's other direction with it."""

    __slots__ = ("_ids", "_keys")

    def __init__(self, entries: Iterable[tuple[str, int, int]]) -> None:
        self._keys: tuple[str, ...] = ()
        self._ids: list[tuple[int, int]] = []
        self._set(tuple(entries))

    def _set(self, entries: tuple[tuple[str, int, int], ...]) -> None:
        self._keys = tuple(key for key, _, _ in entries)
        self._ids = [(field, scope) for _, field, scope in entries]

    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys

    def read(
        self, nvml: Any, handle: Any, faults: DeviceFaults, into: dict[str, float], stamps: dict[str, int]
    ) -> None:
        """Read all fields in one call into `into`, and each value's NVML timestamp (microseconds) into `stamps`. A
        whole-call error, or a lost GPU, raises NVMLError."""
        if not self._keys:
            return
        entries = nvml.nvmlDeviceGetFieldValues(handle, self._ids)
        dropped: list[str] = []
        for key, (code, value, timestamp) in zip(self._keys, decoded_entries(entries), strict=False):
            if code == SUCCESS:
                into[key] = value
                stamps[key] = timestamp
            else:
                kind = faults.record_code(key.partition(":")[0], code)
                if kind is Disposition.UNSUPPORTED:
                    dropped.append(key)
                elif kind is Disposition.LOST:
                    raise nvml.NVMLError(code)  # the same as the whole call failing: the GPU is gone
        if dropped:
            gone = set(dropped)
            kept = [(k, f, s) for k, (f, s) in zip(self._keys, self._ids, strict=True) if k not in gone]
            self._set(tuple(kept))
