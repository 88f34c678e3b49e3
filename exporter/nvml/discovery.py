"""Finding the GPUs and their MIG instances once: handles (the first lookup initializes a GPU) and identities."""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from typing import Any

from exporter.catalogue import BRAND_NAMES, UNKNOWN_BRAND
from exporter.nvml.errors import Disposition, disposition, status_code
from exporter.nvml.profiles import profile_from_attributes, profile_from_name
from exporter.snapshot import GpuIdentity, MigIdentity

log = logging.getLogger("exporter.nvml")

MIG_ENABLED = 1  # NVML_DEVICE_MIG_ENABLE
ECC_ENABLED = 1  # NVML_FEATURE_ENABLED
INFOROM_OEM, INFOROM_ECC, INFOROM_POWER = 0, 1, 2  # nvmlInforomObject_t


@dataclass(frozen=True, slots=True)
class MigDevice:
    identity: MigIdentity
    handle: Any


@dataclass(frozen=True, slots=True)
class GpuDevice:
    identity: GpuIdentity
    handle: Any
    migs: tuple[MigDevice, ...] = ()
    ecc_enabled: bool = True  # nvmlDeviceGetEccMode's current mode; True where NVML will not say


@dataclass(frozen=True, slots=True)
class SystemVersions:
    driver: str
    cuda: str
    nvml: str = ""


def cuda_version_string(version: int) -> str:
    """NVML's CUDA driver version integer as "major.minor" (12040 -> "12.4")."""
    if version < 0:
        raise ValueError(f"not a CUDA driver version: {version}")
    return f"{version // 1000}.{version % 1000 // 10}"


def handle_address(handle: Any) -> int | None:
    """The pointer value of a device handle, to recognize the device an event names."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def as_flag(value: Any) -> bool:
    """A boolean out of what NVML bindings return: a ctypes c_uint in some pynvml versions, an int in others."""
    return bool(getattr(value, "value", value))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_uuid(nvml: Any, handle: Any) -> str:
    """The UUID of a GPU or MIG handle. Raises NVMLError."""
    return _text(nvml.nvmlDeviceGetUUID(handle))


def _optional(nvml: Any, call: str, handle: Any, *args: Any) -> str | None:
    """An identity detail some boards cannot give (serial, VBIOS, InfoROM versions): None when NVML refuses."""
    try:
        return _text(getattr(nvml, call)(handle, *args)) or None
    except nvml.NVMLError as exc:
        if disposition(status_code(exc)) is Disposition.LOST:
            raise
        return None


def _brand(nvml: Any, handle: Any) -> str | None:
    """nvmlDeviceGetBrand, named as DCGM names it (DCGM_FI_DEV_BRAND); None when NVML refuses."""
    try:
        brand = int(nvml.nvmlDeviceGetBrand(handle))
    except nvml.NVMLError as exc:
        if disposition(status_code(exc)) is Disposition.LOST:
            raise
        return None
    return BRAND_NAMES.get(brand, UNKNOWN_BRAND)


def _ecc_enabled(nvml: Any, handle: Any) -> bool:
    """Whether ECC is on now (nvmlDeviceGetEccMode's current mode); True for a board that will not say (the ECC
    counters then explain themselves)."""
    try:
        return int(nvml.nvmlDeviceGetEccMode(handle)[0]) == ECC_ENABLED
    except nvml.NVMLError as exc:
        if disposition(status_code(exc)) is Disposition.LOST:
            raise
        return True


def system_versions(nvml: Any) -> SystemVersions:
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
    except nvml.NVMLError:
        driver = ""
    try:
        cuda = cuda_version_string(int(nvml.nvmlSystemGetCudaDriverVersion_v2()))
    except (nvml.NVMLError, ValueError):
        cuda = ""
    try:
        version = _text(nvml.nvmlSystemGetNVMLVersion())
    except nvml.NVMLError:
        version = ""
    return SystemVersions(driver, cuda, version)


def gpu_count(nvml: Any) -> int:
    return int(nvml.nvmlDeviceGetCount())


def open_gpu(nvml: Any, index: int, versions: SystemVersions) -> GpuDevice:
    """The handle, identity and MIG instances of GPU `index`. Raises NVMLError when the GPU does not answer."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    model = _text(nvml.nvmlDeviceGetName(handle))
    pci_bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
    try:
        minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
    except nvml.NVMLError as exc:
        if disposition(status_code(exc)) is Disposition.LOST:
            raise
        minor = index
    try:
        mig_enabled = int(nvml.nvmlDeviceGetMigMode(handle)[0]) == MIG_ENABLED
    except nvml.NVMLError as exc:
        if disposition(status_code(exc)) is Disposition.LOST:
            raise
        mig_enabled = False
    identity = GpuIdentity(
        index=index,
        uuid=uuid,
        model=model,
        pci_bus_id=pci_bus_id,
        minor_number=minor,
        serial=_optional(nvml, "nvmlDeviceGetSerial", handle),
        driver_version=versions.driver,
        cuda_driver_version=versions.cuda,
        vbios_version=_optional(nvml, "nvmlDeviceGetVbiosVersion", handle),
        mig_enabled=mig_enabled,
        nvml_version=versions.nvml,
        brand=_brand(nvml, handle),
        inforom_image_version=_optional(nvml, "nvmlDeviceGetInforomImageVersion", handle),
        inforom_oem_version=_optional(nvml, "nvmlDeviceGetInforomVersion", handle, INFOROM_OEM),
        inforom_ecc_version=_optional(nvml, "nvmlDeviceGetInforomVersion", handle, INFOROM_ECC),
        inforom_power_version=_optional(nvml, "nvmlDeviceGetInforomVersion", handle, INFOROM_POWER),
    )
    migs = mig_devices(nvml, identity, handle) if mig_enabled else ()
    return GpuDevice(identity, handle, migs, _ecc_enabled(nvml, handle))


def mig_devices(nvml: Any, parent: GpuIdentity, handle: Any) -> tuple[MigDevice, ...]:
    """Every MIG instance of a MIG-enabled GPU, probing each possible index (NOT_FOUND: an empty slot)."""
    try:
        slots = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    except nvml.NVMLError as exc:
        if disposition(status_code(exc)) is Disposition.LOST:
            raise
        log.warning("GPU %d: MIG is enabled but its instances cannot be listed: %s", parent.index, exc)
        return ()
    found: list[MigDevice] = []
    for slot in range(slots):
        try:
            mig_handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError as exc:
            kind = disposition(status_code(exc))
            if kind is Disposition.LOST:
                raise
            if kind is not Disposition.EMPTY:
                log.warning("GPU %d: MIG slot %d cannot be read: %s", parent.index, slot, exc)
            continue
        mig = _open_mig(nvml, parent, slot, mig_handle)
        if mig is not None:
            found.append(mig)
    return tuple(found)


def _open_mig(nvml: Any, parent: GpuIdentity, slot: int, handle: Any) -> MigDevice | None:
    try:
        if not as_flag(nvml.nvmlDeviceIsMigDeviceHandle(handle)):
            log.warning("GPU %d: MIG slot %d returned a handle that is not a MIG device", parent.index, slot)
            return None
    except nvml.NVMLError as exc:
        if disposition(status_code(exc)) is Disposition.LOST:
            raise  # any other refusal: trust the slot, it came from nvmlDeviceGetMigDeviceHandleByIndex
    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    gpu_instance = int(nvml.nvmlDeviceGetGpuInstanceId(handle))
    compute_instance = int(nvml.nvmlDeviceGetComputeInstanceId(handle))
    identity = MigIdentity(
        parent=parent,
        index=slot,
        uuid=uuid,
        gpu_instance_id=gpu_instance,
        compute_instance_id=compute_instance,
        profile=_mig_profile(nvml, parent, slot, handle),
    )
    return MigDevice(identity, handle)


def _mig_profile(nvml: Any, parent: GpuIdentity, slot: int, handle: Any) -> str:
    try:
        profile = profile_from_name(_text(nvml.nvmlDeviceGetName(handle)))
    except nvml.NVMLError:
        profile = None
    if profile is not None:
        return profile
    try:
        attrs = nvml.nvmlDeviceGetAttributes_v2(handle)
        return profile_from_attributes(
            int(attrs.gpuInstanceSliceCount), int(attrs.computeInstanceSliceCount), int(attrs.memorySizeMB)
        )
    except (nvml.NVMLError, ValueError) as exc:
        log.warning("GPU %d: MIG slot %d has no readable profile: %s", parent.index, slot, exc)
        return ""
