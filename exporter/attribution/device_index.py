"""Which of this cycle's GPUs and MIG instances an ID names: a kubelet device ID (exporter/kubelet/device_ids.py) or a
device a DRA driver allocated (driver, pool, device name).

A DRA device is found by the `uuid` attribute its ResourceSlice publishes. Without one:
- a `gpu.nvidia.com` device named `gpu-<minor>` is the GPU with that minor number (NVIDIA/k8s-dra-driver-gpu
  cmd/gpu-kubelet-plugin/deviceinfo.go `GpuInfo.CanonicalName`: the minor, not the index: the two differ where a GPU
  is missing or the driver enumerates in another order);
- a MIG device of the driver's dynamic MIG mode (feature gate DynamicMIG, NVIDIA/k8s-dra-driver-gpu v25.12) is an
  abstract partition until a claim is prepared, so its slice carries `parentUUID` and `profile` but no `uuid`
  (cmd/gpu-kubelet-plugin/partitions.go `MigSpec.PartGetDevice`, mig.go `CommonAttributesMig`). It is the MIG instance
  of that profile on that GPU when there is exactly one; with two or more the slice does not say which (its name
  holds the placement, which NVML gives only to privileged callers), so it is counted as ambiguous and matched to none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from exporter.attribution.resourceslices import NVIDIA_GPU_DRIVER, DraDevices
from exporter.kubelet.device_ids import DeviceKind, DeviceRef
from exporter.kubelet.podresources import ClaimDevice
from exporter.snapshot import DeviceReading, MigIdentity

_DRA_WHOLE_GPU = re.compile("gpu-(?P<minor>0|[1-9][0-9]{0,8})")


@dataclass(frozen=True, slots=True)
class DraMatch:
    """What a DRA device is: a GPU or MIG device (`gpu`), and which reading, when exactly one fits."""

    gpu: bool
    reading: DeviceReading | None = None
    ambiguous: bool = False  # a dynamic MIG device that fits several instances


def mig_identity(device: DeviceReading) -> MigIdentity:
    assert isinstance(device.identity, MigIdentity)
    return device.identity


@dataclass(slots=True)
class DeviceIndex:
    """This cycle's devices by UUID, minor number and MIG instance."""

    gpus: dict[str, DeviceReading] = field(default_factory=dict)
    migs: dict[str, DeviceReading] = field(default_factory=dict)
    by_minor: dict[int, DeviceReading] = field(default_factory=dict)
    mig_by_instance: dict[tuple[str, int], list[DeviceReading]] = field(default_factory=dict)

    @classmethod
    def of(cls, devices: Iterable[DeviceReading]) -> DeviceIndex:
        index = cls()
        for device in devices:
            ident = device.identity
            if isinstance(ident, MigIdentity):
                index.migs[ident.uuid.lower()] = device
                key = (ident.parent.uuid.lower(), ident.gpu_instance_id)
                index.mig_by_instance.setdefault(key, []).append(device)
            else:
                index.gpus[ident.uuid.lower()] = device
                index.by_minor[ident.minor_number] = device
        for readings in index.mig_by_instance.values():
            readings.sort(key=lambda d: mig_identity(d).compute_instance_id)
        return index

    def resolve(self, ref: DeviceRef) -> DeviceReading | None:
        if ref.kind is DeviceKind.GPU:
            return self.gpus.get(str(ref.uuid).lower())
        if ref.kind is DeviceKind.MIG:
            return self.migs.get(str(ref.uuid).lower())
        if ref.kind is DeviceKind.MIG_LEGACY:
            candidates = self.mig_by_instance.get((str(ref.uuid).lower(), int(ref.gpu_instance or 0)), [])
            return next((d for d in candidates if mig_identity(d).compute_instance_id == ref.compute_instance), None)
        gpu = self.by_minor.get(int(ref.minor or 0)) if ref.minor is not None else None
        if gpu is None or ref.gpu_instance is None:
            return gpu
        candidates = self.mig_by_instance.get((gpu.uuid.lower(), ref.gpu_instance), [])
        return candidates[0] if candidates else None

    def resolve_dra(self, device: ClaimDevice, dra: DraDevices | None) -> DraMatch:
        uuid = dra.uuid_of(device.driver, device.pool, device.device) if dra is not None else None
        if uuid is not None:
            key = uuid.lower()
            return DraMatch(True, self.gpus.get(key) or self.migs.get(key))
        spec = dra.mig_spec_of(device.driver, device.pool, device.device) if dra is not None else None
        if spec is not None:
            parent, profile = spec.parent_uuid.lower(), spec.profile
            fits = [
                d
                for d in self.migs.values()
                if mig_identity(d).parent.uuid.lower() == parent and mig_identity(d).profile == profile
            ]
            return DraMatch(True, fits[0] if len(fits) == 1 else None, ambiguous=len(fits) > 1)
        if device.driver != NVIDIA_GPU_DRIVER:
            return DraMatch(False)  # another driver's device (a NIC, an FPGA) with no UUID attribute: not ours
        if (m := _DRA_WHOLE_GPU.fullmatch(device.device)) is not None:
            return DraMatch(True, self.by_minor.get(int(m["minor"])))
        return DraMatch(True)
