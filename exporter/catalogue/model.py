"""The shape of a catalogue row: a measurement, how each dialect publishes it, and what a GPU needs to give it."""

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


class Need(StrEnum):
    """What a GPU must have for NVML to give a measurement; `docs/migration.md` says which generations have it."""

    HOPPER = "hopper"  # GPU Performance Monitoring: nvml.h, nvmlGpmSampleGet "For Hopper or newer"
    NVLINK = "nvlink"  # NVLink field values answer NOT_SUPPORTED on PCIe boards
    HBM = "hbm"  # NVML_FI_DEV_MEMORY_TEMP is NOT_SUPPORTED on GDDR boards
    PAGE_RETIREMENT = "page_retirement"  # Volta and Turing; Ampere and newer remap rows (nvidia-smi -q: "N/A")
    ROW_REMAPPING = "row_remapping"  # nvml.h, nvmlDeviceGetRemappedRows: "For Ampere or newer"
    ECC = "ecc"  # nvml.h, nvmlDeviceGetTotalEccErrors: "Requires ECC Mode to be enabled"
    NO_MIG = "no_mig"  # not on a MIG-enabled GPU's own handle (nvml.h says which calls)


# Which GPUs have each need, for docs/migration.md
NEED_TEXT: Mapping[Need, str] = MappingProxyType(
    {
        Need.HOPPER: "Hopper and newer (H100, H200)",
        Need.NVLINK: "GPUs with NVLink (SXM boards: V100, A100, H100, H200), not PCIe boards such as A10 and L4",
        Need.HBM: "HBM boards (V100, A100, H100, H200), not GDDR boards such as A10 and L4",
        Need.PAGE_RETIREMENT: "Volta and Turing (V100, T4): Ampere and newer remap rows instead of retiring pages",
        Need.ROW_REMAPPING: "Ampere and newer (A100, A10, L4, H100, H200)",
        Need.ECC: "ECC mode on",
        Need.NO_MIG: "MIG off",
    }
)


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
    # DCGM field ids (dcgm_fields.h) a counters CSV selects it by; the first is the one its dcgm rendering publishes
    dcgm_fields: tuple[int, ...] = ()
    needs: frozenset[Need] = frozenset()  # what a GPU must have to give it
    default: bool = True  # read when no --collectors file says otherwise
    # where dcgm-exporter's figure is not NVML's as is (a unit, a rate, a per-link figure): what it does, and that we
    # do the same
    dcgm_computes: str = ""

    def rendering(self, dialect: Dialect) -> Rendering | None:
        return self.dcgm if dialect is Dialect.DCGM else self.prometheus


@dataclass(frozen=True, slots=True)
class LabelField:
    """A dcgm-exporter field of type `label`: a string read once per GPU, put on every series of the GPU in the dcgm
    dialect (named as the counters CSV spells it, dcgm-exporter's rendermetrics) and on an info series in the
    prometheus dialect."""

    key: str  # the GpuIdentity attribute that holds it, also its catalogue key
    dcgm_field: int
    dcgm_name: str
    source: str  # the NVML call
    prometheus_label: str  # the label of the prometheus dialect's info series that carries it
    needs: frozenset[Need] = frozenset()


@dataclass(frozen=True, slots=True)
class DcgmFamily:
    """A dcgm dialect family as a counters CSV asks for it: the measurement, the name as the file spells it, the type
    and help the file gives (dcgm-exporter publishes a field under its CSV line's name, type and help)."""

    key: str
    name: str
    type: MetricType
    help: str


def rendering(name: str, type_: MetricType, help_: str, scale: float = 1.0, **kw: object) -> Rendering:
    return Rendering(name, type_, help_, scale, **kw)  # type: ignore[arg-type]


def constant_labels(**kv: str) -> Mapping[str, str]:
    return MappingProxyType(dict(kv))
