"""NVML device calls about identity and MIG: names, UUIDs, PCI, MIG mode and MIG devices."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simulation.hardware import MAX_MIG_DEVICES
from simulation.machine import Node, SimGpu, SimMig
from simulation.nvml import cabi
from simulation.nvml.cabi import as_int, set_pointer, target, write_string

DeviceCall = Callable[..., int]
NOT_AVAILABLE = 0xFFFFFFFF


class DeviceCalls:
    def __init__(self, node: Node) -> None:
        self.node = node

    def calls(self) -> dict[str, DeviceCall]:
        return {
            "nvmlDeviceGetIndex": self.index,
            "nvmlDeviceGetName": self.name,
            "nvmlDeviceGetUUID": self.uuid,
            "nvmlDeviceGetSerial": self.serial,
            "nvmlDeviceGetVbiosVersion": self.vbios_version,
            "nvmlDeviceGetPciInfo_v3": self.pci_info,
            "nvmlDeviceGetMinorNumber": self.minor_number,
            "nvmlDeviceGetMigMode": self.mig_mode,
            "nvmlDeviceGetMaxMigDeviceCount": self.max_mig_device_count,
            "nvmlDeviceGetMigDeviceHandleByIndex": self.mig_device_handle_by_index,
            "nvmlDeviceIsMigDeviceHandle": self.is_mig_device_handle,
            "nvmlDeviceGetDeviceHandleFromMigDeviceHandle": self.device_handle_from_mig_device_handle,
            "nvmlDeviceGetGpuInstanceId": self.gpu_instance_id,
            "nvmlDeviceGetComputeInstanceId": self.compute_instance_id,
            "nvmlDeviceGetAttributes_v2": self.attributes,
            "nvmlDeviceGetBrand": self.brand,
            "nvmlDeviceGetInforomVersion": self.inforom_version,
            "nvmlDeviceGetInforomImageVersion": self.inforom_image_version,
            "nvmlDeviceGetEccMode": self.ecc_mode,
            "nvmlDeviceGetGridLicensableFeatures_v4": self.grid_licensable_features,
        }

    # calls that also answer for a MIG device handle (the others say NOT_SUPPORTED for one)
    MIG_HANDLE_CALLS = frozenset(
        {
            "nvmlDeviceGetName",
            "nvmlDeviceGetUUID",
            "nvmlDeviceGetPciInfo_v3",
            "nvmlDeviceIsMigDeviceHandle",
            "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
            "nvmlDeviceGetGpuInstanceId",
            "nvmlDeviceGetComputeInstanceId",
            "nvmlDeviceGetAttributes_v2",
        }
    )

    # --- identity --------------------------------------------------------------------------------------------

    def index(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        target(out).value = self.node.enumerated().index(gpu)  # NVML's index: among the GPUs bound to the driver
        return cabi.SUCCESS

    def name(self, t: float, gpu: SimGpu, mig: SimMig | None, buf: Any, length: Any) -> int:
        return write_string(buf, length, gpu.model.name if mig is None else mig.name)

    def uuid(self, t: float, gpu: SimGpu, mig: SimMig | None, buf: Any, length: Any) -> int:
        return write_string(buf, length, gpu.uuid if mig is None else mig.uuid)

    def serial(self, t: float, gpu: SimGpu, mig: SimMig | None, buf: Any, length: Any) -> int:
        return write_string(buf, length, gpu.serial)

    def vbios_version(self, t: float, gpu: SimGpu, mig: SimMig | None, buf: Any, length: Any) -> int:
        return write_string(buf, length, gpu.model.vbios_version)

    def pci_info(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        info = target(out)
        domain_s, bus_s, rest = gpu.pci_bus_id.split(":")
        device_s = rest.split(".")[0]
        domain, bus, device = int(domain_s, 16), int(bus_s, 16), int(device_s, 16)
        info.busIdLegacy = f"{domain:04X}:{bus:02X}:{device:02X}.0".encode()
        info.busId = gpu.pci_bus_id.encode()
        info.domain = domain
        info.bus = bus
        info.device = device
        info.pciDeviceId = gpu.model.pci_device_id
        info.pciSubSystemId = gpu.model.pci_subsystem_id
        return cabi.SUCCESS

    def minor_number(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        target(out).value = gpu.spec.minor_number if gpu.spec.minor_number is not None else gpu.index
        return cabi.SUCCESS

    def brand(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        target(out).value = gpu.model.brand
        return cabi.SUCCESS

    def inforom_version(self, t: float, gpu: SimGpu, mig: SimMig | None, obj: Any, buf: Any, length: Any) -> int:
        """nvmlInforomObject_t: OEM 0, ECC 1, POWER 2; a board without the object says NOT_SUPPORTED."""
        which = as_int(obj)
        if not 0 <= which <= 2:
            return cabi.INVALID_ARGUMENT
        version = gpu.model.inforom[1 + which]
        if version is None:
            return cabi.NOT_SUPPORTED
        return write_string(buf, length, version)

    def inforom_image_version(self, t: float, gpu: SimGpu, mig: SimMig | None, buf: Any, length: Any) -> int:
        return write_string(buf, length, gpu.model.inforom[0])

    def ecc_mode(self, t: float, gpu: SimGpu, mig: SimMig | None, current: Any, pending: Any) -> int:
        mode = 1 if gpu.spec.ecc else 0  # NVML_FEATURE_ENABLED / DISABLED
        target(current).value = mode
        target(pending).value = mode
        return cabi.SUCCESS

    def grid_licensable_features(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        """Bare metal and passthrough: no vGPU software licensing (isGridLicenseSupported 0), which DCGM publishes as
        DCGM_FI_DEV_VGPU_LICENSE_STATUS 0 (real dcgm-exporter output on bare-metal T4, A100, RTX 4000 Ada shows 0)."""
        features = target(out)
        features.isGridLicenseSupported = 0
        features.licensableFeaturesCount = 0
        return cabi.SUCCESS

    # --- MIG -------------------------------------------------------------------------------------------------

    def mig_mode(self, t: float, gpu: SimGpu, mig: SimMig | None, current: Any, pending: Any) -> int:
        """nvml.h (nvmlDeviceGetMigMode): the pending mode is "the target mode following the next activation
        trigger": it differs from the current one while a mode change waits for the GPU to be idle."""
        if not gpu.model.mig_capable:
            return cabi.NOT_SUPPORTED
        mode = 1 if gpu.mig_enabled else 0
        target(current).value = mode
        target(pending).value = mode if gpu.pending_mig is None else int(gpu.pending_mig)
        return cabi.SUCCESS

    def max_mig_device_count(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        # nvml.h: "Returns zero if MIG is not supported or enabled" (and lists no NOT_SUPPORTED)
        target(out).value = MAX_MIG_DEVICES if gpu.mig_enabled else 0
        return cabi.SUCCESS

    def mig_device_handle_by_index(self, t: float, gpu: SimGpu, mig: SimMig | None, index: Any, out: Any) -> int:
        if not gpu.model.mig_capable:
            return cabi.NOT_SUPPORTED
        i = as_int(index)
        if gpu.migs is None or not 0 <= i < MAX_MIG_DEVICES:
            return cabi.INVALID_ARGUMENT
        if i not in gpu.migs:
            return cabi.NOT_FOUND
        set_pointer(out, cabi.device_handle(gpu.index, i, gpu.epoch))
        return cabi.SUCCESS

    def is_mig_device_handle(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        target(out).value = 0 if mig is None else 1
        return cabi.SUCCESS

    def device_handle_from_mig_device_handle(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        if mig is None:
            return cabi.INVALID_ARGUMENT
        set_pointer(out, cabi.device_handle(gpu.index, epoch=gpu.epoch))
        return cabi.SUCCESS

    def gpu_instance_id(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        if mig is None:
            return cabi.NOT_SUPPORTED if gpu.model.mig_capable else cabi.INVALID_ARGUMENT
        target(out).value = mig.gpu_instance_id
        return cabi.SUCCESS

    def compute_instance_id(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        if mig is None:
            return cabi.NOT_SUPPORTED if gpu.model.mig_capable else cabi.INVALID_ARGUMENT
        target(out).value = mig.compute_instance_id
        return cabi.SUCCESS

    def attributes(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        a = target(out)
        model = gpu.model
        if mig is None:
            a.multiprocessorCount = model.multiprocessors
            a.sharedCopyEngineCount = 8 if model.mig_capable else 2
            a.sharedDecoderCount = 7 if model.mig_capable else 4
            a.sharedEncoderCount = 0
            a.sharedJpegCount = 7 if model.mig_capable else 4
            a.sharedOfaCount = 1
            a.gpuInstanceSliceCount = MAX_MIG_DEVICES if model.mig_capable else 0
            a.computeInstanceSliceCount = MAX_MIG_DEVICES if model.mig_capable else 0
            a.memorySizeMB = model.memory_total_mib
        else:
            p = mig.profile
            a.multiprocessorCount = p.multiprocessors
            a.sharedCopyEngineCount = p.copy_engines
            a.sharedDecoderCount = p.decoders
            a.sharedEncoderCount = 0
            a.sharedJpegCount = p.jpegs
            a.sharedOfaCount = p.ofas
            a.gpuInstanceSliceCount = p.slices
            a.computeInstanceSliceCount = p.slices
            a.memorySizeMB = p.memory_mib
        return cabi.SUCCESS
