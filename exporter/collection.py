"""What a device collector hands the poll loop: the seam between `nvml` (the source) and the loop/exposition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from exporter.snapshot import CollectorStatus, DeviceReading, NvmlState, PodDeviceUse, ProcessVisibility


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """One point of a device's sample buffer: wall-clock time, GPU utilization (%), framebuffer used (bytes)."""

    at: float
    utilization_percent: float | None
    memory_used_bytes: float | None


@dataclass(frozen=True, slots=True)
class DeviceCollection:
    """One cycle's output of a device collector."""

    taken_at: float  # wall-clock seconds
    devices: tuple[DeviceReading, ...]  # GPUs first (by index), each GPU's MIG instances right after it
    statuses: tuple[CollectorStatus, ...]  # one per sub-collector: "nvml", "processes", "fields", "xid", "gpm"
    # why NVML's process lists leave out other pods' processes (the caller's PID namespace); None: they do not
    processes_hidden: str | None = None
    nvml: NvmlState | None = None  # whether NVML is usable at all (None: the collector does not say)


class DeviceCollector(Protocol):
    """The poll loop's view of the NVML side. All methods block; the loop calls them from a worker thread."""

    def start(self) -> None:
        """Initialize NVML and discover devices. Never raises for want of NVML: `collect()` tries again."""

    def collect(self) -> DeviceCollection:
        """Read every device once. Never raises for a device fault: a failing GPU shows as up=False."""
        ...

    def rediscover(self) -> None:
        """Forget cached handles and enumerate devices again (SIGHUP, or after a GPU was lost)."""

    def history(self, uuid: str, seconds: float) -> tuple[HistoryPoint, ...]:
        """The device's (GPU or MIG instance) sample buffer over the last `seconds`, oldest first."""
        ...

    def close(self) -> None:
        """Stop background threads (XID listener) and shut NVML down."""


@dataclass(frozen=True, slots=True)
class Attribution:
    """One cycle's answer of the pod side: who uses which device, and how healthy the kubelet link is."""

    pods: tuple[PodDeviceUse, ...]
    kubelet_up: bool | None  # None: attribution is not configured
    mapping_age_seconds: float | None  # age of the pod-resources mapping in use
    statuses: tuple[CollectorStatus, ...] = ()  # "kubelet", "processes", "podwatch"
    process_visibility: ProcessVisibility | None = None  # whether other pods' GPU processes can be seen at all
    kubelet_error: str | None = None  # while kubelet_up is False: why (the socket is missing, the List failed)


class PodAttributor(Protocol):
    """The poll loop's view of the pod side (kubelet pod-resources, proc tree, pod watch). Blocking, worker thread."""

    def start(self) -> None:
        """Start background timers (the kubelet List loop, the pod watch). Never raises for an absent kubelet."""

    def attribute(self, collection: DeviceCollection) -> Attribution:
        """Map this cycle's devices and processes to pods. Uses only cached kubelet state: never calls the kubelet."""
        ...

    def close(self) -> None:
        """Stop background timers."""
