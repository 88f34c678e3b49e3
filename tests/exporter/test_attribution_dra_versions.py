"""DRA across Kubernetes releases and driver modes: a kubelet whose pod-resources leaves DRA devices out (the feature
gate is off before 1.34), dynamic MIG devices published without a UUID, and GPUs whose minor number is not their
index. Each runs the real collector and attributor on a simulated node."""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any

import pytest
import yaml

from exporter.attribution.resourceslices import slice_from_object
from exporter.snapshot import ShareMethod
from simulation.dra import resource_slices_of
from simulation.kubeapi.versions import resource_slice_as, served_versions
from simulation.loader import build_scenario, load_scenario
from simulation.node import static_slices_of
from simulation.scenario import Scenario
from tests.exporter.test_attribution_simulated import cycle, listed, simulated_node
from tests.support.waiting import holds_within

DRA = load_scenario("dra")
CLAIMING = {"llm-train-0", "infer-a", "infer-b", "batch-0", "notebook"}


def _dra(**update: Any) -> Scenario:
    return DRA.model_copy(update=update)


def _attribute(scenario: Scenario) -> Any:
    with simulated_node(scenario, slices=static_slices_of(scenario)) as (collector, attributor, _, clock):
        assert holds_within(lambda: listed(attributor), within=5.0)
        _, attribution = cycle(collector, attributor, clock)
        _, attribution = cycle(collector, attributor, clock)
    return attribution


@pytest.mark.parametrize(
    ("version", "gates", "lists"),
    [
        ("1.33", {}, False),
        ("1.33", {"KubeletPodResourcesDynamicResources": True}, True),
        ("1.34", {}, True),
        ("1.34", {"KubeletPodResourcesDynamicResources": False}, False),
    ],
    ids=["1.33", "1.33-gate-on", "1.34", "1.34-gate-off"],
)
def test_a_kubelet_that_lists_no_dra_devices_is_said_plainly(
    version: str, gates: dict[str, bool], lists: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="exporter.attribution.kubelet_dra"):
        attribution = _attribute(_dra(kubernetes_version=version, kubelet_feature_gates=gates))
    (status,) = [s for s in attribution.statuses if s.name == "kubelet_dra"]
    pods = {u.pod.name for u in attribution.pods}
    if lists:
        assert status.success and status.errors_total == 0
        assert pods == CLAIMING
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    else:
        assert not status.success and status.errors_total == len(CLAIMING)
        assert pods == set(), "the GPUs are reported without pods: the kubelet named none"
        (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert "KubeletPodResourcesDynamicResources" in warning.getMessage()
        assert "1.34" in warning.getMessage()


def test_without_pods_using_claims_there_is_no_kubelet_dra_status() -> None:
    attribution = _attribute(load_scenario("shared").model_copy(update={"kubernetes_version": "1.30"}))
    assert "kubelet_dra" not in {s.name for s in attribution.statuses}


def _minors(*minors: int) -> Scenario:
    gpus = tuple(g.model_copy(update={"minor_number": m}) for g, m in zip(DRA.gpus, minors, strict=True))
    return _dra(gpus=gpus)


@pytest.mark.parametrize("with_slices", [True, False], ids=["slices", "device-names-only"])
def test_a_gpus_minor_number_not_its_index_still_finds_the_claimed_gpu(with_slices: bool) -> None:
    """The DRA driver names a whole GPU `gpu-<minor>`; here GPU 0 is /dev/nvidia2, GPU 2 is /dev/nvidia0. Without the
    slices the exporter goes by that name: by the minor number NVML reports, never by the index."""
    scenario = _minors(2, 5, 0, 7)
    options: dict[str, Any] = {"slices": static_slices_of(scenario)} if with_slices else {}
    with simulated_node(scenario, **options) as (collector, attributor, _, clock):
        assert holds_within(lambda: listed(attributor), within=5.0)
        collection, attribution = cycle(collector, attributor, clock)
    minors = {d.gpu.index: d.gpu.minor_number for d in collection.devices if not d.is_mig}
    assert minors == {0: 2, 1: 5, 2: 0, 3: 7}
    by_pod = {u.pod.name: u.device_uuid for u in attribution.pods}
    assert by_pod["llm-train-0"] == str(scenario.gpus[0].uuid)
    assert by_pod["batch-0"] == str(scenario.gpus[2].uuid)
    assert by_pod["infer-a"] == by_pod["infer-b"] == str(scenario.gpus[1].uuid)
    assert ("notebook" in by_pod) == with_slices, "a MIG device needs its slice"


def test_the_simulator_names_dra_devices_by_minor_number() -> None:
    scenario = _minors(2, 5, 0, 7)
    (obj,) = resource_slices_of(scenario)
    names = {d["name"]: d["attributes"].get("uuid", {}).get("string") for d in obj["spec"]["devices"]}
    assert names["gpu-2"] == scenario.gpus[0].uuid and names["gpu-0"] == scenario.gpus[2].uuid
    assert all(not name.startswith("gpu-3") for name in names), "no GPU has minor 3"


def _dynamic(mig: list[dict[str, Any]]) -> Scenario:
    """The DRA scenario under the driver's dynamic MIG, with these instances created on GPU 3 (the notebook's claim
    holds the first)."""
    data = yaml.safe_load(resources.files("simulation.scenarios").joinpath("dra.yaml").read_text("utf-8"))
    data["dra_dynamic_mig"] = True
    data["gpus"][3]["mig"] = mig
    return build_scenario(data)


def test_a_dynamic_mig_device_without_a_uuid_is_found_by_its_parent_and_profile() -> None:
    scenario = _dynamic([{"profile": "3g.40gb"}, {"profile": "2g.20gb"}, {"profile": "2g.20gb"}])
    (obj,) = resource_slices_of(scenario)
    migs = [d for d in obj["spec"]["devices"] if d["attributes"]["type"]["string"] == "mig"]
    assert migs and all("uuid" not in d["attributes"] for d in migs), "dynamic MIG publishes no uuid"
    attribution = _attribute(scenario)
    (notebook,) = [u for u in attribution.pods if u.pod.name == "notebook"]
    assert notebook.share is ShareMethod.MIG
    assert notebook.device_uuid == str(scenario.gpus[3].mig[0].uuid)  # type: ignore[index]


def test_a_dynamic_mig_device_that_fits_two_instances_is_left_out_and_said(caplog: pytest.LogCaptureFixture) -> None:
    """Two 3g.40gb instances on the GPU: the slice does not say which one the claim got; no guess."""
    scenario = _dynamic([{"profile": "3g.40gb"}, {"profile": "3g.40gb"}])
    with caplog.at_level(logging.WARNING, logger="exporter.attribution.attributor"):
        attribution = _attribute(scenario)
    assert "notebook" not in {u.pod.name for u in attribution.pods}
    assert {u.pod.name for u in attribution.pods} == CLAIMING - {"notebook"}
    assert any("dynamic MIG" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static-mig", "dynamic-mig"])
def test_every_version_of_a_resource_slice_reads_the_same(version: str, dynamic: bool) -> None:
    scenario = _dynamic([{"profile": "3g.40gb"}, {"profile": "2g.20gb"}]) if dynamic else DRA
    (stored,) = resource_slices_of(scenario)
    written = resource_slice_as(stored, version)
    assert written["apiVersion"] == f"resource.k8s.io/{version}"
    if version == "v1beta1":
        assert all("basic" in d and "attributes" not in d for d in written["spec"]["devices"])
    assert slice_from_object(written) == slice_from_object(stored)
    read = slice_from_object(stored)
    assert read is not None
    assert bool(read.mig_specs) == dynamic, "a device without a uuid is kept by its parent and profile"
    if dynamic:
        # every MIG-capable GPU publishes its partitions, created or not
        assert {spec.parent_uuid for spec in read.mig_specs.values()} == {str(g.uuid) for g in scenario.gpus}


def test_the_versions_each_release_serves() -> None:
    assert served_versions(31) == ()
    assert served_versions(32) == ("v1beta1",)
    assert served_versions(33) == ("v1beta2", "v1beta1")
    assert served_versions(34) == ("v1", "v1beta2", "v1beta1")
    with pytest.raises(ValueError, match="no version"):
        resource_slice_as(resource_slices_of(DRA)[0], "v2")


def test_simulated_slice_devices_carry_the_drivers_attributes() -> None:
    """NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin deviceinfo.go `GpuInfo.Attributes` and mig.go
    `CommonAttributesMig`: type, uuid, productName, brand, architecture, cudaComputeCapability, driverVersion and
    cudaDriverVersion (the three versions as semver), and the standard PCI bus id; a MIG device adds parentUUID and
    profile. The exporter still finds every device by them."""
    (obj,) = resource_slices_of(DRA)
    devices = {d["name"]: d["attributes"] for d in obj["spec"]["devices"]}
    common = {"type", "productName", "brand", "architecture", "cudaComputeCapability", "driverVersion"}
    common |= {"cudaDriverVersion", "resource.kubernetes.io/pciBusID"}
    gpu0 = devices["gpu-0"]
    assert common | {"uuid"} == gpu0.keys()
    assert gpu0["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert gpu0["brand"] == {"string": "Nvidia"} and gpu0["architecture"] == {"string": "Hopper"}
    assert gpu0["cudaComputeCapability"] == {"version": "9.0.0"}
    assert gpu0["driverVersion"] == {"version": "550.54.15"} and gpu0["cudaDriverVersion"] == {"version": "12.4.0"}
    assert gpu0["resource.kubernetes.io/pciBusID"]["string"].count(":") == 2
    migs = [a for a in devices.values() if a["type"] == {"string": "mig"}]
    assert migs and all(common | {"uuid", "parentUUID", "profile"} == a.keys() for a in migs)
    found = slice_from_object(obj)
    assert found is not None and found.uuids["gpu-0"] == gpu0["uuid"]["string"]
