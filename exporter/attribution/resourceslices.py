"""DRA devices of this node by driver, pool and device name, from the node's ResourceSlice objects.

pod-resources names a DRA-allocated device only by the triplet driver/pool/device (kubernetes/kubelet
pkg/apis/podresources/v1/api.proto, `ClaimResource`); which GPU or MIG instance that is, is written in the device's
attributes in the ResourceSlices its driver publishes (resource.k8s.io/v1 `ResourceSlice`: `spec.driver`,
`spec.pool.{name,generation}`, `spec.nodeName`, `spec.devices[].name`, `spec.devices[].attributes` whose values are
one-of `string`/`int`/`bool`/`version`; resource.k8s.io/v1beta1 nests the attributes under `devices[].basic`).

The NVIDIA DRA driver (NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go and mig.go) publishes under the
driver `gpu.nvidia.com`, one pool named after the node, and gives every device a `type` (`gpu`, `mig`, `vfio`) and a
`uuid` attribute (`GPU-...` or `MIG-...`; MIG devices also `parentUUID` and `profile`). Attribute names without a
domain are in the driver's domain, so `uuid` and `gpu.nvidia.com/uuid` are the same attribute. With the driver's
dynamic MIG (partitions.go), a MIG device is published before it exists: `parentUUID` and `profile`, no `uuid`; the
index keeps those (`mig_spec_of`), and device_index.py decides which instance such a device is.

Only the newest generation of a pool counts: a driver that republishes its pool bumps `spec.pool.generation`, and
slices of older generations are outdated until they are deleted (as the scheduler treats them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
UUID_ATTRIBUTE = "uuid"
PARENT_ATTRIBUTE = "parentUUID"
PROFILE_ATTRIBUTE = "profile"

DeviceKey = tuple[str, str, str]  # (driver, pool, device)


@dataclass(frozen=True, slots=True)
class MigSpec:
    """A MIG device published without a UUID (dynamic MIG): the GPU it is carved from, and its profile."""

    parent_uuid: str
    profile: str  # "3g.40gb"


class DraDevices(Protocol):
    """The look-ups attribution makes: the GPU or MIG UUID of a DRA device when its slice says one, else the parent
    and profile of a MIG device published without one."""

    def uuid_of(self, driver: str, pool: str, device: str) -> str | None: ...

    def mig_spec_of(self, driver: str, pool: str, device: str) -> MigSpec | None: ...


@dataclass(frozen=True, slots=True)
class SliceDevices:
    """The devices one ResourceSlice publishes."""

    name: str  # the slice's metadata.name
    driver: str
    pool: str
    generation: int
    uuids: Mapping[str, str]  # device name -> uuid attribute (devices without one are left out)
    mig_specs: Mapping[str, MigSpec] = field(default_factory=dict)  # device name -> MIG device without a uuid


class ResourceSliceIndex:
    """Device UUIDs from a set of ResourceSlices; immutable (a watch replaces it). A DraDevices."""

    def __init__(self, slices: Iterable[SliceDevices] = ()) -> None:
        self.slices: Mapping[str, SliceDevices] = MappingProxyType({s.name: s for s in slices})
        newest: dict[tuple[str, str], int] = {}
        for entry in self.slices.values():
            pool = (entry.driver, entry.pool)
            newest[pool] = max(newest.get(pool, entry.generation), entry.generation)
        found: dict[DeviceKey, str] = {}
        specs: dict[DeviceKey, MigSpec] = {}
        for entry in sorted(self.slices.values(), key=lambda s: s.name):
            if entry.generation != newest[(entry.driver, entry.pool)]:
                continue
            for device, uuid in entry.uuids.items():
                found.setdefault((entry.driver, entry.pool, device), uuid)
            for device, spec in entry.mig_specs.items():
                specs.setdefault((entry.driver, entry.pool, device), spec)
        self._uuids: Mapping[DeviceKey, str] = MappingProxyType(found)
        self._specs: Mapping[DeviceKey, MigSpec] = MappingProxyType(specs)

    def __len__(self) -> int:
        return len(self._uuids) + len(self._specs)

    def uuid_of(self, driver: str, pool: str, device: str) -> str | None:
        return self._uuids.get((driver, pool, device))

    def mig_spec_of(self, driver: str, pool: str, device: str) -> MigSpec | None:
        return self._specs.get((driver, pool, device))

    def replaced(self, entry: SliceDevices) -> ResourceSliceIndex:
        return ResourceSliceIndex({**self.slices, entry.name: entry}.values())

    def without(self, name: str) -> ResourceSliceIndex:
        return ResourceSliceIndex(s for s in self.slices.values() if s.name != name)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _string_attribute(attributes: Mapping[str, Any], driver: str, name: str) -> str | None:
    for key in (name, f"{driver}/{name}"):
        value = _mapping(attributes.get(key)).get("string")
        if isinstance(value, str) and value:
            return value
    return None


def slice_from_object(obj: object) -> SliceDevices | None:
    """The devices of one ResourceSlice as the API sends it (JSON, v1 or v1beta1); None when it names no pool."""
    metadata = _mapping(_mapping(obj).get("metadata"))
    spec = _mapping(_mapping(obj).get("spec"))
    pool = _mapping(spec.get("pool"))
    name, driver, pool_name = metadata.get("name"), spec.get("driver"), pool.get("name")
    if not (isinstance(name, str) and isinstance(driver, str) and isinstance(pool_name, str) and name):
        return None
    generation = pool.get("generation")
    uuids: dict[str, str] = {}
    mig_specs: dict[str, MigSpec] = {}
    devices = spec.get("devices")
    for device in devices if isinstance(devices, list) else ():
        device_name = _mapping(device).get("name")  # v1: devices[].attributes; v1beta1: devices[].basic.attributes
        if not isinstance(device_name, str):
            continue
        fields = _mapping(device)
        attributes = _mapping(fields.get("attributes") or _mapping(fields.get("basic")).get("attributes"))
        uuid = _string_attribute(attributes, driver, UUID_ATTRIBUTE)
        if uuid is not None:
            uuids[device_name] = uuid
            continue
        parent = _string_attribute(attributes, driver, PARENT_ATTRIBUTE)
        profile = _string_attribute(attributes, driver, PROFILE_ATTRIBUTE)
        if parent is not None and profile is not None:
            mig_specs[device_name] = MigSpec(parent, profile)
    return SliceDevices(
        name=name,
        driver=driver,
        pool=pool_name,
        generation=generation if isinstance(generation, int) and not isinstance(generation, bool) else 0,
        uuids=MappingProxyType(uuids),
        mig_specs=MappingProxyType(mig_specs),
    )
