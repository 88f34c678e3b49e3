"""The NVIDIA DRA driver (`gpu.nvidia.com`) of a simulated node, as the kubelet and the API server show it.

What the real driver does, from NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin:
- main.go: the driver name `gpu.nvidia.com`; driver.go: one pool per node, named after the node, published as
  ResourceSlices with `spec.nodeName` set.
- deviceinfo.go `GpuInfo.CanonicalName`: a whole GPU is the device `gpu-<minor>`; `GpuInfo.Attributes` gives it
  `type: gpu`, `uuid` (`GPU-...`), `productName` (nvmlDeviceGetName), `brand` and `architecture` (go-nvlib's
  `GetBrandAsString`, `GetArchitectureAsString`: "Nvidia", "Tesla"; "Hopper", "Ampere", "Ada Lovelace", "Volta"),
  `cudaComputeCapability` ("9.0"), `driverVersion` and `cudaDriverVersion` (versions: "12.4" from 12040), and the
  standard `resource.kubernetes.io/pciBusID` (nvlib.go, `deviceattribute.GetPCIBusIDAttribute`); a MIG device the
  same but `uuid` of its own, `parentUUID` and `profile` (mig.go `CommonAttributesMig`). The simulator leaves out
  `resource.kubernetes.io/pcieRoot` (read from the host's sysfs) and `addressingMode` (coherent-memory systems only).
- mig.go `ToCanonicalName`: a MIG device is `gpu-<parent minor>-mig-<profile without dots>-<profile id>-<placement
  start>`, with `type: mig`, `uuid` (`MIG-...`), `parentUUID` and `profile`. The simulator has no MIG profile ids or
  placements; it writes the GPU-instance id in place of the profile id and the compute-instance id in place of the
  placement start, which keeps names unique and in the same shape (nothing reads their parts: the exporter only looks
  them up in the slices).
- cdi.go `GetClaimDeviceName`: the CDI device of an allocated device is `k8s.gpu.nvidia.com/claim=<claim uid>-<device>`.
- Dynamic MIG (feature gate DynamicMIG, v25.12; partitions.go `MigSpec.PartGetDevice`, mig.go `CommonAttributesMig`):
  every MIG partition a GPU could hold is published before it exists, with `type: mig`, `parentUUID` and `profile` but
  no `uuid`; a claim's partition is created when the claim is prepared. The simulator publishes one device per profile
  and GPU-instance id of the model, named as above, and the scenario's MIG instances are the created ones.

The kubelet lists each container's claims in pod-resources v1 `dynamic_resources` (kubernetes/kubelet
pkg/apis/podresources/v1/api.proto): claim name and namespace, and per device the driver, pool, device name and CDI
devices. Names use a GPU's minor number (`minor_number`, nvmlDeviceGetMinorNumber), which need not be its index.
"""

from __future__ import annotations

from typing import Any

from exporter.kubelet.podresources import ClaimAllocation, ClaimDevice
from simulation.hardware import GPU_MODELS
from simulation.scenario import ClaimedDevice, Container, Gpu, Pod, ResourceClaim, Scenario

DRIVER = "gpu.nvidia.com"
CDI_KIND = "k8s.gpu.nvidia.com/claim"


def device_name(index: int, gpu: Gpu, mig: int | None) -> str:
    """The DRA device name of GPU `index` (or of its MIG device `mig`): named by the GPU's minor number."""
    minor = gpu.minor_number if gpu.minor_number is not None else index
    if mig is None:
        return f"gpu-{minor}"
    instance = next(m for m in gpu.mig or () if m.index == mig)
    return _mig_name(minor, instance.profile, instance.gpu_instance_id or 0, instance.compute_instance_id)


def _mig_name(minor: int, profile: str, gpu_instance: int, compute_instance: int) -> str:
    return f"gpu-{minor}-mig-{profile.replace('.', '')}-{gpu_instance}-{compute_instance}"


def _device(scenario: Scenario, claim: ResourceClaim, device: ClaimedDevice) -> ClaimDevice:
    name = device_name(device.gpu, scenario.gpus[device.gpu], device.mig)
    return ClaimDevice(DRIVER, scenario.node, name, (f"{CDI_KIND}={claim.uid}-{name}",))


def claims_of(scenario: Scenario, pod: Pod, container: Container) -> tuple[ClaimAllocation, ...]:
    """The container's claims as pod-resources lists them."""
    by_ref = {claim.ref: claim for claim in scenario.claims}
    allocations = []
    for name in container.claims:
        claim = by_ref[f"{pod.namespace}/{name}"]
        devices = tuple(_device(scenario, claim, device) for device in claim.devices)
        allocations.append(ClaimAllocation(claim.namespace, claim.name, devices))
    return tuple(allocations)


# go-nvlib pkg/nvlib/device/device.go GetArchitectureAsString, GetBrandAsString
_ARCHITECTURES = {"volta": "Volta", "ampere": "Ampere", "ada": "Ada Lovelace", "hopper": "Hopper"}
_BRANDS = {2: "Tesla", 14: "Nvidia"}
# nvmlDeviceGetCudaComputeCapability by chip (CUDA C++ Programming Guide, compute capabilities table)
_COMPUTE_CAPABILITIES = {"GV100": "7.0", "GA100": "8.0", "GA102": "8.6", "AD104": "8.9", "GH100": "9.0"}


def _semver(version: str) -> str:
    """A version as the driver's semver.MustParse(...).String() writes it: three numbers ("12.4" -> "12.4.0")."""
    parts = [str(int(p)) for p in version.split(".")]
    return ".".join([*parts, "0", "0"][:3])


def _attributes(scenario: Scenario, gpu: Gpu, **values: str) -> dict[str, Any]:
    model = GPU_MODELS[gpu.model]
    cuda = scenario.cuda_driver_version
    attributes: dict[str, Any] = {key: {"string": value} for key, value in values.items()}
    attributes["productName"] = {"string": model.name}
    attributes["brand"] = {"string": _BRANDS[model.brand]}
    attributes["architecture"] = {"string": _ARCHITECTURES[model.architecture]}
    attributes["cudaComputeCapability"] = {"version": _semver(_COMPUTE_CAPABILITIES[model.chip])}
    attributes["driverVersion"] = {"version": _semver(scenario.driver_version)}
    attributes["cudaDriverVersion"] = {"version": _semver(f"{cuda // 1000}.{cuda % 1000 // 10}")}
    attributes["resource.kubernetes.io/pciBusID"] = {"string": _pci_bus_id(str(gpu.pci_bus_id))}
    return attributes


def _pci_bus_id(nvml_bus_id: str) -> str:
    """The standard attribute's form, "0000:18:00.0" (a 4-digit domain), of NVML's "00000000:18:00.0"."""
    domain, rest = nvml_bus_id.lower().split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


def _partitions(scenario: Scenario, index: int, gpu: Gpu) -> list[dict[str, Any]]:
    """Every MIG partition of a MIG-capable GPU, published without a uuid (dynamic MIG)."""
    model = GPU_MODELS[gpu.model]
    minor = gpu.minor_number if gpu.minor_number is not None else index
    names = {
        _mig_name(minor, profile.name, gi, 0): profile.name
        for profile in model.mig_profiles.values()
        for gi in profile.gpu_instance_ids
    }
    names.update({device_name(index, gpu, m.index): m.profile for m in gpu.mig or ()})  # the created ones
    return [
        {"name": name, "attributes": _attributes(scenario, gpu, type="mig", parentUUID=str(gpu.uuid), profile=profile)}
        for name, profile in sorted(names.items())
    ]


def resource_slices_of(scenario: Scenario) -> tuple[dict[str, Any], ...]:
    """The ResourceSlice the driver publishes for the node (resource.k8s.io/v1, as JSON); none without claims."""
    if not scenario.claims:
        return ()
    devices: list[dict[str, Any]] = []
    for index, gpu in enumerate(scenario.gpus):
        if gpu.mig is None or scenario.dra_dynamic_mig:  # dynamic MIG: the whole GPU is a device too
            attributes = _attributes(scenario, gpu, type="gpu", uuid=str(gpu.uuid))
            devices.append({"name": device_name(index, gpu, None), "attributes": attributes})
        if scenario.dra_dynamic_mig:
            devices += _partitions(scenario, index, gpu)
            continue
        for instance in gpu.mig or ():
            attributes = _attributes(
                scenario, gpu, type="mig", uuid=str(instance.uuid), parentUUID=str(gpu.uuid), profile=instance.profile
            )
            devices.append({"name": device_name(index, gpu, instance.index), "attributes": attributes})
    return (
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{scenario.node}-{DRIVER}-gpus"},
            "spec": {
                "driver": DRIVER,
                "nodeName": scenario.node,
                "pool": {"name": scenario.node, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        },
    )
