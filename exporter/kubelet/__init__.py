"""The kubelet's pod-resources API v1: the generated stubs (proto/), a client that lists on its own timer, the plain
data it returns, and the device IDs found in it."""

from exporter.kubelet.client import KubeletCallError, KubeletState, PodResourcesClient
from exporter.kubelet.device_ids import DeviceIdError, DeviceRef, ResourceNames, parse_device_id
from exporter.kubelet.podresources import ContainerDevices, ContainerResources, PodResources

__all__ = [
    "ContainerDevices",
    "ContainerResources",
    "DeviceIdError",
    "DeviceRef",
    "KubeletCallError",
    "KubeletState",
    "PodResources",
    "PodResourcesClient",
    "ResourceNames",
    "parse_device_id",
]
