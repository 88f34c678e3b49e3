"""The ResourceSlice watch through the real `kubernetes` client against the Kubernetes API stand-in: only this node's
slices (field selector spec.nodeName), changes followed, 410 Gone answered by a fresh list; and the simulated DRA node
end to end: its kubelet's dynamic_resources and its slices give every claimed GPU to its pod."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pynvml
import pytest
from kubernetes import client as k8s

from exporter.attribution.attribute import attribute
from exporter.attribution.resourceslices import slice_from_object
from exporter.attribution.slicewatch import ResourceSliceWatch
from exporter.kubelet.podresources import pods_from_message
from exporter.kubelet.proto import api_pb2, api_pb2_grpc
from exporter.nvml.collector import NvmlCollector
from exporter.snapshot import DeviceReading, ShareMethod
from simulation import Simulator
from simulation.dra import resource_slices_of
from simulation.kubeapi import SelectorError, field_predicate
from simulation.kubeapi.versions import served_versions
from simulation.kubelet import start_simulated_pod_side
from simulation.loader import load_scenario
from simulation.node import start_simulated_node
from tests.exporter.test_attribution_podwatch import _ApiServer
from tests.support.waiting import holds_within
from toolkit.backoff import Backoff

SCENARIO = load_scenario("dra")
NODE = SCENARIO.node


@pytest.fixture
def api() -> Iterator[_ApiServer]:
    server = _ApiServer()
    yield server
    server.close()


def _watch_on(url: str, node: str = NODE) -> ResourceSliceWatch:
    configuration = k8s.Configuration(host=url)
    return ResourceSliceWatch(
        k8s.ApiClient(configuration), node, watch_timeout_seconds=30, request_timeout=5.0, backoff=Backoff(0.05, 0.2)
    )


@pytest.fixture
def watch_factory(api: _ApiServer) -> Iterator[Callable[..., ResourceSliceWatch]]:
    made: list[ResourceSliceWatch] = []

    def make(node: str = NODE) -> ResourceSliceWatch:
        watch = _watch_on(api.url, node)
        made.append(watch)
        return watch

    yield make
    for watch in made:
        watch.close()


def _slice_on(node: str, name: str) -> dict[str, Any]:
    (obj,) = resource_slices_of(SCENARIO)
    obj = copy.deepcopy(obj)
    obj["metadata"]["name"] = name
    obj["spec"]["nodeName"] = obj["spec"]["pool"]["name"] = node
    return obj


def test_lists_only_this_nodes_slices_and_follows_changes(
    api: _ApiServer, watch_factory: Callable[..., ResourceSliceWatch]
) -> None:
    mine = _slice_on(NODE, "mine")
    api.server.put_resource_slice(mine)
    api.server.put_resource_slice(_slice_on("other-node", "theirs"))
    watch = watch_factory()
    watch.start()
    assert holds_within(lambda: watch.status.synced)
    gpu0 = str(SCENARIO.gpus[0].uuid)
    assert watch.uuid_of("gpu.nvidia.com", NODE, "gpu-0") == gpu0
    assert watch.uuid_of("gpu.nvidia.com", "other-node", "gpu-0") is None
    assert set(watch.index.slices) == {"mine"}

    republished = copy.deepcopy(mine)
    republished["spec"]["devices"][0]["attributes"]["uuid"] = {"string": "GPU-00000000-0000-0000-0000-000000000001"}
    api.server.put_resource_slice(republished)
    assert holds_within(
        lambda: (
            watch.uuid_of("gpu.nvidia.com", NODE, "gpu-0")
            == republished["spec"]["devices"][0]["attributes"]["uuid"]["string"]
        )
    )
    api.server.delete_object("resourceslices", "", "mine")
    assert holds_within(lambda: watch.uuid_of("gpu.nvidia.com", NODE, "gpu-0") is None)
    assert watch.status.errors_total == 0


@pytest.mark.parametrize(
    ("minor", "version"), [(32, "v1beta1"), (33, "v1beta2"), (34, "v1")], ids=["1.32", "1.33", "1.34"]
)
def test_the_newest_served_version_of_resource_k8s_io_is_read(minor: int, version: str) -> None:
    """resource.k8s.io/v1 exists from Kubernetes 1.34; 1.33 serves v1beta2 (and v1beta1), 1.32 v1beta1, whose devices
    nest their attributes under `basic`. The watch finds the newest one served and reads its slices."""
    server = _ApiServer(resource_api_versions=served_versions(minor))
    try:
        server.server.put_resource_slice(_slice_on(NODE, "mine"))
        watch = _watch_on(server.url)
        watch.start()
        try:
            assert holds_within(lambda: watch.status.synced)
            assert watch.status.api_version == version
            assert watch.uuid_of("gpu.nvidia.com", NODE, "gpu-0") == str(SCENARIO.gpus[0].uuid)
            server.server.put_resource_slice(_slice_on(NODE, "later"))  # followed by a watch of that version
            assert holds_within(lambda: "later" in watch.index.slices)
            assert watch.status.errors_total == 0, "a 404 of a version the cluster lacks is no error"
        finally:
            watch.close()
        assert server.server.request_count("list", "resourceslices") == 1, "one list of the served version"
    finally:
        server.close()


def test_a_cluster_without_dra_is_an_error_the_watch_keeps_retrying() -> None:
    server = _ApiServer(resource_api_versions=())
    try:
        watch = _watch_on(server.url)
        watch.start()
        try:
            assert holds_within(lambda: watch.status.errors_total >= 1)
            assert not watch.status.synced and watch.status.api_version is None
            assert "404" in (watch.status.last_error or "")
        finally:
            watch.close()
    finally:
        server.close()


def test_an_expired_watch_is_answered_by_a_fresh_list(
    api: _ApiServer, watch_factory: Callable[..., ResourceSliceWatch]
) -> None:
    watch = watch_factory()
    watch.start()
    assert holds_within(lambda: watch.status.synced)
    api.stop()
    api.server.put_resource_slice(_slice_on(NODE, "during-outage"))
    api.server.compact()
    api.restart()
    assert holds_within(lambda: watch.uuid_of("gpu.nvidia.com", NODE, "gpu-1") == str(SCENARIO.gpus[1].uuid))
    assert api.server.request_count("list", "resourceslices") >= 2


def test_the_stand_in_refuses_field_selectors_kube_apiserver_does_not_support() -> None:
    with pytest.raises(SelectorError, match=r"field label not supported: spec\.pool\.name"):
        field_predicate("spec.pool.name=x", frozenset({"spec.nodeName"}))


def test_the_simulated_kubelet_lists_claims_in_dynamic_resources() -> None:
    side = start_simulated_pod_side(SCENARIO)
    try:
        with grpc.insecure_channel(f"unix://{side.socket_path}") as channel:
            reply = api_pb2_grpc.PodResourcesListerStub(channel).List(api_pb2.ListPodResourcesRequest(), timeout=5)
    finally:
        side.stop()
    dynamic = {
        p.name: p.containers[0].dynamic_resources[0] for p in reply.pod_resources if p.containers[0].dynamic_resources
    }
    assert dynamic["infer-a"].claim_name == dynamic["infer-b"].claim_name == "shared-inference-gpu"
    (resource,) = dynamic["notebook"].claim_resources
    assert (resource.driver_name, resource.pool_name) == ("gpu.nvidia.com", NODE)
    assert resource.device_name.startswith("gpu-3-mig-3g40gb-")
    assert resource.cdi_devices[0].name.startswith("k8s.gpu.nvidia.com/claim=")


def test_the_simulated_dra_node_gives_every_claimed_device_to_its_pod() -> None:
    node = start_simulated_node(SCENARIO)
    try:
        assert node.pod_side is not None and node.slices is not None
        simulator: Simulator = node.simulator
        with grpc.insecure_channel(f"unix://{node.pod_side.socket_path}") as channel:
            reply = api_pb2_grpc.PodResourcesListerStub(channel).List(api_pb2.ListPodResourcesRequest(), timeout=5)
        pods = pods_from_message(reply)
        devices = _readings(simulator)
        result = attribute(devices, pods, dra=node.slices)
    finally:
        node.stop()
    by_pod = {u.pod.name: u for u in result.uses}
    assert set(by_pod) == {"llm-train-0", "infer-a", "infer-b", "batch-0", "notebook"}
    assert by_pod["llm-train-0"].share is ShareMethod.EXCLUSIVE
    assert by_pod["notebook"].share is ShareMethod.MIG
    assert by_pod["notebook"].device_uuid == str(SCENARIO.gpus[3].mig[0].uuid)  # type: ignore[index]
    assert by_pod["infer-a"].sharing_pods == 2 and by_pod["infer-a"].claim is not None
    assert result.unmatched_device_ids == 0


def _readings(simulator: Simulator) -> list[DeviceReading]:
    collector = NvmlCollector(pynvml)
    collector.start()
    try:
        return list(collector.collect().devices)
    finally:
        collector.close()


def test_slices_of_the_scenario_parse() -> None:
    (obj,) = resource_slices_of(SCENARIO)
    parsed = slice_from_object(obj)
    assert parsed is not None and len(parsed.uuids) == 5  # 3 whole GPUs and 2 MIG devices


def test_a_container_naming_a_claim_of_another_namespace_is_refused() -> None:
    from simulation.loader import ScenarioError, build_scenario

    text = SCENARIO.model_dump(mode="json")
    text["pods"][0]["containers"][0]["claims"] = ["shared-inference-gpu"]  # a claim of namespace serve, pod in ml
    with pytest.raises(ScenarioError, match="no ResourceClaim 'shared-inference-gpu' in namespace 'ml'"):
        build_scenario(text)
