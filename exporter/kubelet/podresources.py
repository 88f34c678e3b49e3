"""Plain frozen data for what the kubelet's pod-resources `List` returns, and conversion from/to the wire messages.

Only what attribution needs is kept: pods, their containers by name, each container's devices per resource name (the
device plugins' extended resources) and its dynamic resources (DRA: per ResourceClaim, the driver, pool and device of
each allocated device with its CDI device names). CPU and memory are dropped on the way in.

The DRA messages follow kubernetes/kubelet pkg/apis/podresources/v1/api.proto: `DynamicResource{claim_name=2,
claim_namespace=3, claim_resources=4}` (field 1, class_name, retired in 1.31) and `ClaimResource{cdi_devices=1,
driver_name=2, pool_name=3, device_name=4, optional share_id=5}`; the driver/pool/device triplet names the device in
the node's ResourceSlices, and `share_id` is set when the device was allocated as one share of its capacity.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from exporter.kubelet.proto import api_pb2


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    resource_name: str  # "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", ...
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One device a DRA driver allocated for a claim: `driver`/`pool`/`device` name it in the ResourceSlices."""

    driver: str  # "gpu.nvidia.com"
    pool: str  # the NVIDIA DRA driver names its pool after the node
    device: str  # "gpu-0", "gpu-0-mig-1g10gb-19-0", ...
    cdi_devices: tuple[str, ...] = ()  # "k8s.gpu.nvidia.com/claim=<claim uid>-gpu-0"
    share_id: str | None = None  # one share of a device with consumable capacity


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """A ResourceClaim as one container uses it, with the devices allocated for it."""

    claim_namespace: str
    claim_name: str
    devices: tuple[ClaimDevice, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.claim_namespace, self.claim_name)


@dataclass(frozen=True, slots=True)
class ContainerResources:
    name: str
    devices: tuple[ContainerDevices, ...] = ()
    claims: tuple[ClaimAllocation, ...] = ()


@dataclass(frozen=True, slots=True)
class PodResources:
    namespace: str
    name: str
    containers: tuple[ContainerResources, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def pods_from_message(message: api_pb2.ListPodResourcesResponse) -> tuple[PodResources, ...]:
    """Convert a List reply into plain data, keeping pods and containers in the order the kubelet listed them."""
    return tuple(pod_from_message(pod) for pod in message.pod_resources)


def pod_from_message(pod: api_pb2.PodResources) -> PodResources:
    return PodResources(
        namespace=pod.namespace,
        name=pod.name,
        containers=tuple(
            ContainerResources(
                name=container.name,
                devices=tuple(
                    ContainerDevices(devices.resource_name, tuple(devices.device_ids))
                    for devices in container.devices
                    if devices.device_ids
                ),
                claims=tuple(_claim_from_message(dynamic) for dynamic in container.dynamic_resources),
            )
            for container in pod.containers
        ),
    )


def _claim_from_message(dynamic: api_pb2.DynamicResource) -> ClaimAllocation:
    return ClaimAllocation(
        claim_namespace=dynamic.claim_namespace,
        claim_name=dynamic.claim_name,
        devices=tuple(
            ClaimDevice(
                driver=resource.driver_name,
                pool=resource.pool_name,
                device=resource.device_name,
                cdi_devices=tuple(cdi.name for cdi in resource.cdi_devices),
                share_id=resource.share_id if resource.HasField("share_id") else None,
            )
            for resource in dynamic.claim_resources
            if resource.device_name
        ),
    )


def _claim_to_message(claim: ClaimAllocation) -> api_pb2.DynamicResource:
    return api_pb2.DynamicResource(
        claim_name=claim.claim_name,
        claim_namespace=claim.claim_namespace,
        claim_resources=[
            api_pb2.ClaimResource(
                cdi_devices=[api_pb2.CDIDevice(name=name) for name in device.cdi_devices],
                driver_name=device.driver,
                pool_name=device.pool,
                device_name=device.device,
                share_id=device.share_id,
            )
            for device in claim.devices
        ],
    )


def pod_to_message(pod: PodResources) -> api_pb2.PodResources:
    return api_pb2.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            api_pb2.ContainerResources(
                name=container.name,
                devices=[
                    api_pb2.ContainerDevices(resource_name=d.resource_name, device_ids=list(d.device_ids))
                    for d in container.devices
                ],
                dynamic_resources=[_claim_to_message(claim) for claim in container.claims],
            )
            for container in pod.containers
        ],
    )


def pods_to_message(pods: Iterable[PodResources]) -> api_pb2.ListPodResourcesResponse:
    return api_pb2.ListPodResourcesResponse(pod_resources=[pod_to_message(pod) for pod in pods])
