"""The NVIDIA DRA driver (`gpu.nvidia.com`) of a simulated node, as the kubelet and the API server show it.

What the real driver does, from NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin:
- main.go: the driver name `gpu.nvidia.com`; driver.go: one pool per node, named after the node, published as
  ResourceSlices with `spec.nodeName` set.
- deviceinfo.go `GpuInfo.CanonicalName`: a whole GPU is the device `gpu-<minor>`; its attributes include `type: gpu`,
  `uuid` (`GPU-...`), `productName`, `driverVersion` ...
- mig.go `ToCanonicalName`: a MIG device is `gpu-<parent minor>-mig-<profile without dots>-<profile id>-<placement
  start>`, with `type: mig`, `uuid` (`MIG-...`), `parentUUID` and `profile`. The simulator has no MIG profile ids or
  placements; it writes the GPU-instance id in place of the profile id and the compute-instance id in place of the
  placement start, which keeps names unique and in the same shape (nothing reads their parts: the exporter only looks
  them up in the slices).
- cdi.go `GetClaimDeviceName`: the CDI device of an allocated device is `k8s.gpu.nvidia.com/claim=<claim uid>-<device>`.

The kubelet lists each container's claims in pod-resources v1 `dynamic_resources` (kubernetes/kubelet
pkg/apis/podresources/v1/api.proto): claim name and namespace, and per device the driver, pool, device name and CDI
devices. The simulated node's minor numbers are its GPU indexes (simulation/nvml/calls/devices.py).
"""

from __future__ import annotations

from typing import Any

from exporter.kubelet.podresources import ClaimAllocation, ClaimDevice
from simulation.scenario import ClaimedDevice, Container, Gpu, Pod, ResourceClaim, Scenario

DRIVER = "gpu.nvidia.com"
CDI_KIND = "k8s.gpu.nvidia.com/claim"


def device_name(index: int, gpu: Gpu, mig: int | None) -> str:
    """The DRA device name of GPU `index` (or of its MIG device `mig`)."""
    if mig is None:
        return f"gpu-{index}"
    instance = next(m for m in gpu.mig or () if m.index == mig)
    profile = instance.profile.replace(".", "")
    return f"gpu-{index}-mig-{profile}-{instance.gpu_instance_id}-{instance.compute_instance_id}"


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


def _attributes(scenario: Scenario, gpu: Gpu, **values: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {key: {"string": value} for key, value in values.items()}
    attributes["productName"] = {"string": gpu.model}
    attributes["driverVersion"] = {"version": scenario.driver_version}  # a VersionValue upstream
    return attributes


def resource_slices_of(scenario: Scenario) -> tuple[dict[str, Any], ...]:
    """The ResourceSlice the driver publishes for the node (resource.k8s.io/v1, as JSON); none without claims."""
    if not scenario.claims:
        return ()
    devices: list[dict[str, Any]] = []
    for index, gpu in enumerate(scenario.gpus):
        if gpu.mig is None:
            attributes = _attributes(scenario, gpu, type="gpu", uuid=str(gpu.uuid))
            devices.append({"name": device_name(index, gpu, None), "attributes": attributes})
            continue
        for instance in gpu.mig:
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
