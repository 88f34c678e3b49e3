"""DRA: pod-resources `dynamic_resources` -> GPUs and MIG instances through this node's ResourceSlices, shared claims
split like time-slicing, and the claim on the series (dcgm-exporter's `dra_*` labels)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.attribution.attribute import attribute
from exporter.attribution.cgroup import CgroupOwner
from exporter.attribution.directory import StaticPodDirectory
from exporter.attribution.resourceslices import ResourceSliceIndex, slice_from_object
from exporter.catalogue import Dialect
from exporter.exposition.render import render_exposition
from exporter.kubelet.podresources import (
    ClaimAllocation,
    ClaimDevice,
    ContainerResources,
    PodResources,
    pods_from_message,
    pods_to_message,
)
from exporter.kubelet.proto import api_pb2
from exporter.snapshot import DeviceReading, DraClaim, ProcessUsage, ShareMethod, Snapshot
from tests.exporter.test_attribution import GIB, gpu, mig, reading
from toolkit.pods import Pod

NODE = "gpu-node-1"
DRIVER = "gpu.nvidia.com"


def resource_slice(
    name: str, devices: dict[str, dict[str, str]], *, generation: int = 1, v1beta1: bool = False
) -> dict[str, Any]:
    """A ResourceSlice as the NVIDIA DRA driver publishes it (pool named after the node), as JSON."""
    listed = []
    for device, attributes in devices.items():
        attrs = {key: {"string": value} for key, value in attributes.items()}
        listed.append(
            {"name": device, "basic": {"attributes": attrs}} if v1beta1 else {"name": device, "attributes": attrs}
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": generation, "resourceSliceCount": 1},
            "devices": listed,
        },
    }


def slices(*objects: dict[str, Any]) -> ResourceSliceIndex:
    return ResourceSliceIndex(entry for obj in objects if (entry := slice_from_object(obj)) is not None)


def claimed(
    namespace: str, name: str, container: str, claim: str, *devices: str, share_id: str | None = None
) -> PodResources:
    allocation = ClaimAllocation(
        namespace,
        claim,
        tuple(
            ClaimDevice(DRIVER, NODE, d, (f"k8s.gpu.nvidia.com/claim={uuid.UUID(int=7)}-{d}",), share_id)
            for d in devices
        ),
    )
    return PodResources(namespace, name, (ContainerResources(container, (), (allocation,)),))


def test_the_pod_resources_dra_fields_survive_the_wire() -> None:
    pods = (claimed("ml", "train", "main", "gpu-claim", "gpu-0", "gpu-1", share_id="share-a"),)
    wire = pods_to_message(pods).SerializeToString()
    assert pods_from_message(api_pb2.ListPodResourcesResponse.FromString(wire)) == pods


def test_a_claim_device_named_in_a_slice_is_that_gpu_with_the_claim_on_the_row() -> None:
    g0, g1 = gpu(0), gpu(1)
    index = slices(resource_slice("s1", {"gpu-0": {"type": "gpu", "uuid": g1.uuid}}))  # names need not follow minors
    result = attribute([reading(g0), reading(g1, util=70)], [claimed("ml", "train", "main", "c1", "gpu-0")], dra=index)
    (use,) = result.uses
    assert use.device_uuid == g1.uuid and use.share is ShareMethod.EXCLUSIVE and use.utilization_percent == 70
    assert use.claim == DraClaim("ml", "c1", DRIVER, NODE, "gpu-0")


def test_a_mig_device_needs_its_slice_and_becomes_a_mig_row() -> None:
    parent = gpu(0)
    instance = mig(parent, 0, 1)
    devices = [reading(parent), reading(instance, util=None, extra={"gr_engine_active": 40.0})]
    name = "gpu-0-mig-1g10gb-19-0"
    pods = [claimed("ml", "infer", "main", "c1", name)]
    assert attribute(devices, pods).uses == ()
    assert attribute(devices, pods).unmatched_device_ids == 1
    attrs = {"type": "mig", "uuid": instance.uuid, "parentUUID": parent.uuid, "profile": "1g.10gb"}
    (use,) = attribute(devices, pods, dra=slices(resource_slice("s", {name: attrs}))).uses
    assert (use.device_uuid, use.share, use.utilization_percent) == (instance.uuid, ShareMethod.MIG, 40.0)


def test_without_slices_a_whole_gpu_is_found_by_the_drivers_minor_number_name() -> None:
    g0, g1 = gpu(0), gpu(1)
    (use,) = attribute([reading(g0), reading(g1)], [claimed("ml", "train", "main", "c1", "gpu-1")]).uses
    assert use.device_uuid == g1.uuid


def test_other_drivers_devices_are_not_gpus_and_unknown_gpu_devices_are_counted() -> None:
    g0 = gpu(0)
    nic = PodResources(
        "ml",
        "net",
        (
            ContainerResources(
                "main", (), (ClaimAllocation("ml", "nic", (ClaimDevice("sriov.example.com", NODE, "vf-0"),)),)
            ),
        ),
    )
    result = attribute([reading(g0)], [nic, claimed("ml", "gone", "main", "c2", "gpu-7")])
    assert result.uses == () and result.unmatched_device_ids == 1


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    g0, g1 = gpu(0), gpu(1)
    old = resource_slice("old", {"gpu-0": {"uuid": g0.uuid}}, generation=1)
    new = resource_slice("new", {"gpu-0": {"uuid": g1.uuid}}, generation=2)
    assert slices(old, new).uuid_of(DRIVER, NODE, "gpu-0") == g1.uuid
    assert slices(old).uuid_of(DRIVER, NODE, "gpu-0") == g0.uuid


def test_v1beta1_slices_and_qualified_attribute_names_are_read() -> None:
    g0 = gpu(0)
    beta = resource_slice("b", {"gpu-0": {"gpu.nvidia.com/uuid": g0.uuid}}, v1beta1=True)
    assert slices(beta).uuid_of(DRIVER, NODE, "gpu-0") == g0.uuid


@given(
    st.recursive(
        st.none() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=8), c),
        max_leaves=20,
    )
)
def test_slice_parsing_never_raises_on_any_json(obj: object) -> None:
    slice_from_object(obj)
    slice_from_object({"metadata": {"name": "x"}, "spec": {"driver": "d", "pool": {"name": "p"}, "devices": obj}})


def _shared_claim(
    sm: Sequence[float],
) -> tuple[list[DeviceReading], list[PodResources], dict[int, CgroupOwner], StaticPodDirectory]:
    g0 = gpu(0)
    processes = [ProcessUsage(1000 + i, GIB * (i + 1), sm[i]) for i in range(len(sm))]
    devices = [reading(g0, util=60.0, power_mw=200_000, processes=processes)]
    pods, owners, metas = [], {}, []
    for i in range(len(sm)):
        uid = str(uuid.UUID(int=500 + i))
        pods.append(claimed("team", f"pod-{i}", "app", "shared-gpu", "gpu-0"))
        owners[1000 + i] = CgroupOwner(uid, f"{i:064x}")
        metas.append(Pod("team", f"pod-{i}", uid=uid, phase="Running", containers={f"{i:064x}": "app"}))
    return devices, pods, owners, StaticPodDirectory(metas)


def test_a_claim_shared_by_pods_is_split_by_process_like_time_slicing() -> None:
    devices, pods, owners, directory = _shared_claim([30, 10])
    result = attribute(devices, pods, owner_of=owners.get, directory=directory)
    assert result.conflicts == 0
    uses = sorted(result.uses, key=lambda u: u.pod.name)
    assert [u.share for u in uses] == [ShareMethod.PROCESS, ShareMethod.PROCESS]
    assert [u.utilization_percent for u in uses] == pytest.approx([45.0, 15.0])
    assert [u.memory_used_bytes for u in uses] == [GIB, 2 * GIB]
    assert all(u.sharing_pods == 2 and u.claim is not None and u.claim.name == "shared-gpu" for u in uses)


def test_a_shared_claim_without_processes_is_unattributed_never_the_whole_figure() -> None:
    devices, pods, _owners, _directory = _shared_claim([30, 10])
    uses = attribute(devices, pods).uses
    assert {u.share for u in uses} == {ShareMethod.UNATTRIBUTED}
    assert all(u.utilization_percent is None for u in uses)


def test_a_device_allocated_as_a_share_is_shared_even_for_one_pod() -> None:
    g0 = gpu(0)
    (use,) = attribute([reading(g0)], [claimed("ml", "a", "main", "c", "gpu-0", share_id="s-1")]).uses
    assert use.share is ShareMethod.UNATTRIBUTED


def _dra_snapshot() -> Snapshot:
    g0 = gpu(0)
    result = attribute([reading(g0)], [claimed("ml", "train", "main", "c1", "gpu-0")])
    return Snapshot(taken_at=1.0, node=NODE, devices=(reading(g0),), pods=result.uses)


def test_dcgm_series_of_a_claimed_device_carry_dcgm_exporters_dra_labels() -> None:
    text = render_exposition(_dra_snapshot(), Dialect.DCGM).decode()
    line = next(x for x in text.splitlines() if x.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    for pair in (
        'pod="train"',
        'dra_claim_name="c1"',
        'dra_claim_namespace="ml"',
        f'dra_driver_name="{DRIVER}"',
        f'dra_pool_name="{NODE}"',
        'dra_device_name="gpu-0"',
    ):
        assert pair in line


def test_per_pod_series_of_a_claimed_device_carry_the_claim() -> None:
    text = render_exposition(_dra_snapshot(), Dialect.PROMETHEUS).decode()
    line = next(x for x in text.splitlines() if x.startswith("gpu_pulse_pod_gpu_utilization_ratio{"))
    assert 'dra_claim_name="c1"' in line and 'dra_claim_namespace="ml"' in line


def test_the_slice_watch_shows_in_the_attributors_self_health(tmp_path: Path) -> None:
    from exporter.attribution.attributor import KubeletPodAttributor, StaticResourceSlices
    from exporter.collection import DeviceCollection
    from exporter.kubelet.client import PodResourcesClient

    slices = StaticResourceSlices(ResourceSliceIndex())
    attributor = KubeletPodAttributor(PodResourcesClient(tmp_path / "kubelet.sock"), slices=slices)
    attribution = attributor.attribute(DeviceCollection(taken_at=1.0, devices=(), statuses=()))
    (status,) = [s for s in attribution.statuses if s.name == "resourceslices"]
    assert status.success and status.errors_total == 0
