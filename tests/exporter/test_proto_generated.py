"""The committed pod-resources stubs are exactly what the pinned grpcio-tools makes of our api.proto, and api.proto
keeps upstream's wire names and numbers (kubernetes/kubelet pkg/apis/podresources/v1/api.proto)."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.kubelet.proto import api_pb2, generate

pytest.importorskip("grpc_tools", reason="grpcio-tools (a test extra) generates the stubs")


def test_regenerated_stubs_match_the_committed_files(tmp_path: Path) -> None:
    written = generate.generate(tmp_path)
    for path in written:
        committed = generate.PROTO_DIR / path.name
        assert path.read_bytes() == committed.read_bytes(), (
            f"{committed.name} is stale: run python -m exporter.kubelet.proto.generate"
        )


def test_generator_refuses_another_grpcio_tools(tmp_path: Path) -> None:
    with pytest.raises(generate.GeneratorError, match=r"grpcio-tools 1\.85\.1 is required .* found 1\.60\.0"):
        generate.generate(tmp_path, tools_version="1.60.0")
    assert not (tmp_path / "exporter").exists()


# (message, field, number, repeated) from k8s.io/kubelet/pkg/apis/podresources/v1/api.proto
UPSTREAM_FIELDS = [
    ("ListPodResourcesResponse", "pod_resources", 1, True),
    ("PodResources", "name", 1, False),
    ("PodResources", "namespace", 2, False),
    ("PodResources", "containers", 3, True),
    ("ContainerResources", "name", 1, False),
    ("ContainerResources", "devices", 2, True),
    ("ContainerResources", "cpu_ids", 3, True),
    ("ContainerResources", "memory", 4, True),
    ("ContainerResources", "dynamic_resources", 5, True),
    ("ContainerDevices", "resource_name", 1, False),
    ("ContainerDevices", "device_ids", 2, True),
    ("ContainerDevices", "topology", 3, False),
    ("TopologyInfo", "nodes", 1, True),
    ("NUMANode", "ID", 1, False),
    ("ContainerMemory", "memory_type", 1, False),
    ("ContainerMemory", "size", 2, False),
    ("ContainerMemory", "topology", 3, False),
    ("AllocatableResourcesResponse", "devices", 1, True),
    ("AllocatableResourcesResponse", "cpu_ids", 2, True),
    ("AllocatableResourcesResponse", "memory", 3, True),
    ("DynamicResource", "claim_name", 2, False),
    ("DynamicResource", "claim_namespace", 3, False),
    ("DynamicResource", "claim_resources", 4, True),
    ("ClaimResource", "cdi_devices", 1, True),
    ("ClaimResource", "driver_name", 2, False),
    ("ClaimResource", "pool_name", 3, False),
    ("ClaimResource", "device_name", 4, False),
    ("CDIDevice", "name", 1, False),
    ("GetPodResourcesRequest", "pod_name", 1, False),
    ("GetPodResourcesRequest", "pod_namespace", 2, False),
    ("GetPodResourcesResponse", "pod_resources", 1, False),
]


@pytest.mark.parametrize(("message", "name", "number", "repeated"), UPSTREAM_FIELDS)
def test_wire_names_and_numbers(message: str, name: str, number: int, repeated: bool) -> None:
    descriptor = api_pb2.DESCRIPTOR.message_types_by_name[message]
    field = descriptor.fields_by_name[name]
    assert field.number == number
    assert field.is_repeated is repeated


def test_service_methods() -> None:
    assert api_pb2.DESCRIPTOR.package == "v1"
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    methods = {m.name: (m.input_type.name, m.output_type.name) for m in service.methods}
    assert methods == {
        "List": ("ListPodResourcesRequest", "ListPodResourcesResponse"),
        "GetAllocatableResources": ("AllocatableResourcesRequest", "AllocatableResourcesResponse"),
        "Get": ("GetPodResourcesRequest", "GetPodResourcesResponse"),
    }
    assert "class_name" not in api_pb2.DESCRIPTOR.message_types_by_name["DynamicResource"].fields_by_name
