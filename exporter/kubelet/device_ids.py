"""Device IDs as the kubelet's pod-resources API reports them, and the resource names that carry NVIDIA GPUs.

The NVIDIA device plugin (and GKE's own plugin) hands out these IDs; the kubelet passes them through unchanged:

    GPU-<uuid>                      a whole GPU
    MIG-<uuid>                      a MIG instance (mixed strategy under nvidia.com/mig-*, single under nvidia.com/gpu)
    MIG-GPU-<uuid>/<gi>/<ci>        a MIG instance as R450-era drivers named it: parent GPU, GPU and compute instance
    <any of the above>::<n>         replica n of a time-sliced or MPS-shared device
    nvidia<N>                       GKE: the GPU whose /dev/nvidia<N> minor number is N
    nvidia<N>/gi<M>                 GKE: GPU instance M on that GPU (MIG)
    nvidia<N>/vgpu<K>               GKE: share K of a time-shared GPU
    nvidia<N>/gi<M>/vgpu<K>         GKE: share K of a time-shared MIG instance

`parse_device_id` turns one string into a `DeviceRef`; `DeviceRef.device_id` gives the string back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

_HEX = "[0-9a-fA-F]"
_UUID = f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
_NUM = "(?:0|[1-9][0-9]{0,8})"  # a decimal index without leading zeros, small enough for any real node

_GPU = re.compile(f"GPU-(?P<uuid>{_UUID})")
_MIG = re.compile(f"MIG-(?P<uuid>{_UUID})")
_MIG_LEGACY = re.compile(f"MIG-GPU-(?P<uuid>{_UUID})/(?P<gi>{_NUM})/(?P<ci>{_NUM})")
_GKE = re.compile(f"nvidia(?P<minor>{_NUM})(?:/gi(?P<gi>{_NUM}))?(?:/vgpu(?P<vgpu>{_NUM}))?")
_REPLICA = re.compile(f"(?P<base>.+)::(?P<replica>{_NUM})")

DEFAULT_RESOURCE_NAMES: frozenset[str] = frozenset({"nvidia.com/gpu", "nvidia.com/gpu.shared"})
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
SHARED_RESOURCE_SUFFIX = ".shared"


class DeviceIdError(ValueError):
    """A pod-resources device ID in none of the known formats."""


class DeviceKind(StrEnum):
    GPU = "gpu"  # GPU-<uuid>
    MIG = "mig"  # MIG-<uuid>
    MIG_LEGACY = "mig-legacy"  # MIG-GPU-<uuid>/<gi>/<ci>
    GKE = "gke"  # nvidia<N>[/gi<M>][/vgpu<K>]


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """One parsed device ID. Which fields are set depends on `kind`; `replica`/`vgpu` mark a shared device."""

    kind: DeviceKind
    uuid: str | None = None  # GPU uuid (GPU, MIG_LEGACY) or MIG uuid (MIG), with its "GPU-"/"MIG-" prefix
    minor: int | None = None  # GKE: the N of /dev/nvidia<N>
    gpu_instance: int | None = None  # MIG_LEGACY, GKE /gi<M>
    compute_instance: int | None = None  # MIG_LEGACY
    vgpu: int | None = None  # GKE /vgpu<K>
    replica: int | None = None  # the n of a "::n" suffix

    @property
    def shared(self) -> bool:
        """Whether the ID names one share of a device that other pods may hold too."""
        return self.replica is not None or self.vgpu is not None

    @property
    def is_mig(self) -> bool:
        return self.kind in (DeviceKind.MIG, DeviceKind.MIG_LEGACY) or self.gpu_instance is not None

    @property
    def device_id(self) -> str:
        """The ID in the form the device plugin writes it."""
        if self.kind is DeviceKind.GPU or self.kind is DeviceKind.MIG:
            base = str(self.uuid)
        elif self.kind is DeviceKind.MIG_LEGACY:
            base = f"MIG-{self.uuid}/{self.gpu_instance}/{self.compute_instance}"
        else:
            base = f"nvidia{self.minor}"
            if self.gpu_instance is not None:
                base += f"/gi{self.gpu_instance}"
            if self.vgpu is not None:
                base += f"/vgpu{self.vgpu}"
        return base if self.replica is None else f"{base}::{self.replica}"


def parse_device_id(text: str) -> DeviceRef:
    """Parse one device ID; raise DeviceIdError (a ValueError) when it is in none of the known formats."""
    replica: int | None = None
    base = text
    if (m := _REPLICA.fullmatch(text)) is not None:
        base, replica = m["base"], int(m["replica"])
    if (m := _GPU.fullmatch(base)) is not None:
        return DeviceRef(DeviceKind.GPU, uuid=f"GPU-{m['uuid']}", replica=replica)
    if (m := _MIG_LEGACY.fullmatch(base)) is not None:
        return DeviceRef(
            DeviceKind.MIG_LEGACY,
            uuid=f"GPU-{m['uuid']}",
            gpu_instance=int(m["gi"]),
            compute_instance=int(m["ci"]),
            replica=replica,
        )
    if (m := _MIG.fullmatch(base)) is not None:
        return DeviceRef(DeviceKind.MIG, uuid=f"MIG-{m['uuid']}", replica=replica)
    if (m := _GKE.fullmatch(base)) is not None:
        return DeviceRef(
            DeviceKind.GKE,
            minor=int(m["minor"]),
            gpu_instance=None if m["gi"] is None else int(m["gi"]),
            vgpu=None if m["vgpu"] is None else int(m["vgpu"]),
            replica=replica,
        )
    shown = text if len(text) <= 80 else text[:77] + "..."
    raise DeviceIdError(
        f"unknown device ID {shown!r}: expected GPU-<uuid>, MIG-<uuid>, MIG-GPU-<uuid>/<gi>/<ci> or "
        "nvidia<N>[/gi<M>][/vgpu<K>], optionally followed by ::<replica>"
    )


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """Which extended-resource names carry NVIDIA GPUs: the defaults, every nvidia.com/mig-*, and extra names."""

    extra: frozenset[str] = frozenset()

    @classmethod
    def of(cls, extra: Iterable[str] = ()) -> ResourceNames:
        names = frozenset(name.strip() for name in extra if name.strip())
        for name in names:
            if "/" not in name:
                raise ValueError(f"resource name {name!r} has no domain: expected e.g. example.com/gpu")
        return cls(names)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        return name in DEFAULT_RESOURCE_NAMES or name.startswith(MIG_RESOURCE_PREFIX) or name in self.extra

    def shared(self, name: str) -> bool:
        """Whether the resource is a shared one by name (nvidia.com/gpu.shared and any extra name ending .shared)."""
        return name.endswith(SHARED_RESOURCE_SUFFIX)
