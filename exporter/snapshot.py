"""The plain data that flows from the sources (NVML, kubelet, proc tree) to exposition and `/pods`.

Everything here is frozen: a snapshot is built once per poll cycle and then only read, by any number of scrapes at once.
Values are kept in NVML's native units (the catalogue says which, per measurement); each dialect converts on rendering.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from toolkit.connections import ConnectionStats
from toolkit.pods_contract import InferenceFigures
from toolkit.process import ProcessFigures

EMPTY: Mapping[str, float] = MappingProxyType({})
EMPTY_REASONS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """What identifies one physical GPU; read once at discovery."""

    index: int
    uuid: str  # "GPU-8f6c..."
    model: str  # nvmlDeviceGetName, e.g. "NVIDIA H100 80GB HBM3"
    pci_bus_id: str  # "00000000:3B:00.0"
    minor_number: int  # the N of /dev/nvidia<N>
    serial: str | None = None
    driver_version: str = ""
    cuda_driver_version: str = ""  # "12.4"
    vbios_version: str | None = None
    mig_enabled: bool = False
    # dcgm-exporter's label fields (exporter.catalogue.identity); None where the GPU refuses the call
    nvml_version: str = ""
    brand: str | None = None
    inforom_image_version: str | None = None
    inforom_oem_version: str | None = None
    inforom_ecc_version: str | None = None
    inforom_power_version: str | None = None

    def label_value(self, key: str) -> str | None:
        """The value of a label field (its catalogue key names the attribute), None or "" when there is none."""
        value = getattr(self, key, None)
        return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class MigIdentity:
    """One MIG instance (a GPU instance with its compute instance) on a MIG-enabled GPU."""

    parent: GpuIdentity
    index: int  # the MIG device index on its parent, as probed
    uuid: str  # "MIG-..."
    gpu_instance_id: int
    compute_instance_id: int
    profile: str  # "1g.10gb", "3g.40gb", ...


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """One process running on a GPU or MIG instance, from NVML's running-process list and utilization samples."""

    pid: int
    used_memory_bytes: int | None  # None when NVML cannot say
    sm_util_percent: float | None = None  # mean of the samples seen in the last cycle; None: no sample
    memory_util_percent: float | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    mps_client: bool = False  # an MPS client: its work runs in the MPS server's context, so no sample names it


@dataclass(frozen=True, slots=True)
class StalledCall:
    """An NVML call on a GPU that has not returned within the collector's bound (a hung driver call)."""

    call: str  # what the reader was asking: a probe name ("power_usage"), "field_values", "running_processes" ...
    seconds: float  # how long it has been running


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """One cycle's readings of a GPU (identity is GpuIdentity) or MIG instance (identity is MigIdentity).

    `values` maps a catalogue measurement key to its value in the native NVML unit. `vectors` maps a catalogue key of
    a labelled measurement (clock-event reasons, ECC types, XIDs, NVLink directions) to {label value: value}.
    A measurement the device cannot give is absent from both, never zero.
    """

    identity: GpuIdentity | MigIdentity
    up: bool
    values: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    vectors: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    processes: tuple[ProcessUsage, ...] = ()
    # NVML errors seen on this device since start, by NVML error name ("GPU_IS_LOST", "NO_PERMISSION", ...)
    errors: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    stalled: StalledCall | None = None  # set (with up=False) while a call on this GPU hangs
    # catalogue key -> why this device cannot give it (gpm_needs_hopper, mig_enabled, not_supported, ...)
    unavailable: Mapping[str, str] = field(default_factory=lambda: EMPTY_REASONS)

    @property
    def uuid(self) -> str:
        return self.identity.uuid

    @property
    def is_mig(self) -> bool:
        return isinstance(self.identity, MigIdentity)

    @property
    def gpu(self) -> GpuIdentity:
        """The physical GPU (the parent, for a MIG instance)."""
        ident = self.identity
        return ident.parent if isinstance(ident, MigIdentity) else ident


class ShareMethod(StrEnum):
    """How a pod's share of a device was obtained: the `share` label on per-pod series."""

    EXCLUSIVE = "exclusive"  # the pod holds the whole GPU
    MIG = "mig"  # the pod holds a MIG instance
    PROCESS = "process"  # shared GPU, split by NVML per-process samples mapped to this pod
    UNATTRIBUTED = "unattributed"  # shared GPU, no per-process utilization tied to this pod (MPS: its memory only)


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    container: str
    uid: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)  # only those allowed by --pod-labels


@dataclass(frozen=True, slots=True)
class DraClaim:
    """The ResourceClaim (Dynamic Resource Allocation) through which a pod holds a device, and the device's DRA name."""

    namespace: str
    name: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class PodDeviceUse:
    """One (pod, container, device) edge with the pod's share of that device in this cycle.

    `device_uuid` is a GPU UUID or a MIG UUID; it matches a DeviceReading.uuid in the same snapshot.
    Figures are None when they are not known (e.g. UNATTRIBUTED share of a shared GPU).
    """

    pod: PodRef
    device_uuid: str
    share: ShareMethod
    utilization_percent: float | None  # this pod's part of the device's utilization, 0-100
    memory_used_bytes: int | None  # this pod's framebuffer use on the device
    power_milliwatts: float | None = None  # this pod's part of the device's power draw
    energy_millijoules: float | None = None  # this pod's part of the device's energy since the exporter started
    sharing_pods: int = 1  # how many pods hold this device
    claim: DraClaim | None = None  # set when the device was allocated through a DRA ResourceClaim


@dataclass(frozen=True, slots=True)
class CollectorStatus:
    """Self-health of one collector (nvml, kubelet, processes, xid, gpm ...) in this cycle."""

    name: str
    success: bool
    duration_seconds: float
    errors_total: float = 0.0  # monotonic since start


@dataclass(frozen=True, slots=True)
class ProcessVisibility:
    """Whether the exporter sees other pods' GPU processes: True, False, or None (nothing to judge by yet)."""

    visible: bool | None
    reason: str


@dataclass(frozen=True, slots=True)
class NvmlState:
    """Whether NVML can be used at all: up, or down with the NVML error's name and a sentence naming the fix."""

    up: bool
    error: str = ""  # while down: DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH, LIBRARY_NOT_FOUND, ...
    reason: str = ""


@dataclass(frozen=True, slots=True)
class PodInference:
    """What the exporter publishes of one pod's serving engine (exporter.engines): the `/pods` contract's figures, and
    the exporter's own totals of the engine's request and generated-token counters (they never fall, whatever the
    engine does: an engine restart is not a reset for Prometheus to guess)."""

    figures: InferenceFigures
    requests_total: float | None = None
    generated_tokens_total: float | None = None


@dataclass(frozen=True, slots=True)
class EngineReadStats:
    """The engine reader's self-metrics, since it started."""

    reads_total: int = 0
    failures_total: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))  # by kind
    bytes_total: int = 0
    seconds_total: float = 0.0
    endpoints: int = 0  # pods with an engine endpoint read in the last cycle
    cycle_seconds: float = 0.0  # the last cycle's duration


NO_INFERENCE: Mapping[tuple[str, str], PodInference] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one poll cycle produced. `taken_at` is wall-clock seconds (the sample time)."""

    taken_at: float
    node: str
    devices: tuple[DeviceReading, ...]
    pods: tuple[PodDeviceUse, ...] = ()
    collectors: tuple[CollectorStatus, ...] = ()
    kubelet_up: bool | None = None  # None: pod attribution is not configured
    kubelet_mapping_age_seconds: float | None = None
    connections: ConnectionStats | None = None  # the HTTP server's, when it serves (toolkit.connections)
    process: ProcessFigures | None = None  # the exporter process's CPU, memory and descriptors (toolkit.process)
    process_visibility: ProcessVisibility | None = None  # None: pod attribution is not configured
    kubelet_error: str | None = None  # while kubelet_up is False: why, for /readyz
    nvml: NvmlState | None = None  # None: the collector does not say (a stand-in in tests)
    # (namespace, pod) -> its engine's figures; pods without an engine endpoint are absent (exporter.engines)
    inference: Mapping[tuple[str, str], PodInference] = field(default_factory=lambda: NO_INFERENCE)
    engine_reads: EngineReadStats | None = None  # None: engines are not read (--engines off)
