"""Plain frozen data for what the kubelet's pod-resources `List` returns, and conversion from/to the wire messages.

Only what attribution needs is kept: pods, their containers by name, and each container's devices per resource name.
CPU, memory and dynamic (DRA) resources are dropped on the way in.
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
class ContainerResources:
    name: str
    devices: tuple[ContainerDevices, ...] = ()


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
            )
            for container in pod.containers
        ),
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
            )
            for container in pod.containers
        ],
    )


def pods_to_message(pods: Iterable[PodResources]) -> api_pb2.ListPodResourcesResponse:
    return api_pb2.ListPodResourcesResponse(pod_resources=[pod_to_message(pod) for pod in pods])
