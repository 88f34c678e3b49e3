"""The whole pod side on a simulated node: the real NVML collector on the real pynvml over the simulator, the fake
kubelet serving the scenario's pods over gRPC, a fake proc tree in every cgroup layout, and the attributor."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pynvml
import pytest

from exporter.attribution.assemble import build_pod_side
from exporter.attribution.attributor import KubeletPodAttributor
from exporter.collection import Attribution, DeviceCollection
from exporter.nvml import NvmlCollector
from exporter.snapshot import DeviceReading, ShareMethod
from simulation import Simulator, install
from simulation.kubelet import SimulatedPodSide, start_simulated_pod_side
from simulation.loader import load_scenario
from simulation.node import pid_namespace_of, static_directory_of
from simulation.proctree import CgroupLayout, ContainerRuntime
from simulation.scenario import Scenario
from tests.support.clocks import ManualClock
from tests.support.pidspaces import sidecar_exporter
from tests.support.waiting import holds_within

START = 1_750_000_000.0


@contextmanager
def simulated_node(
    name: str | Scenario,
    layout: CgroupLayout | str = CgroupLayout.V2_SYSTEMD,
    runtime: ContainerRuntime | str = ContainerRuntime.CONTAINERD,
    **pod_side: object,
) -> Iterator[tuple[NvmlCollector, KubeletPodAttributor, SimulatedPodSide, ManualClock]]:
    clock = ManualClock(START)
    scenario = load_scenario(name) if isinstance(name, str) else name
    side = start_simulated_pod_side(scenario, layout=layout, runtime=runtime)
    options: dict[str, object] = {"kubelet_interval": 0.2, "directory": static_directory_of(scenario)}
    options.update(pod_side)
    attributor = build_pod_side(
        node_name=scenario.node,
        kubelet_socket=side.socket_path,
        proc_root=side.proc_root,
        **options,  # type: ignore[arg-type]
    )
    with install(Simulator(scenario, clock=clock)):
        collector = NvmlCollector(pynvml, clock=clock, wall_clock=clock, pid_namespace=pid_namespace_of(scenario))
        collector.start()
        attributor.start()
        try:
            yield collector, attributor, side, clock
        finally:
            attributor.close()
            collector.close()
            side.stop()


def cycle(
    collector: NvmlCollector, attributor: KubeletPodAttributor, clock: ManualClock
) -> tuple[DeviceCollection, Attribution]:
    clock.now += 1.0
    collection = collector.collect()
    return collection, attributor.attribute(collection)


def listed(attributor: KubeletPodAttributor) -> bool:
    return attributor.client.state.up


def by_uuid(collection: DeviceCollection) -> dict[str, DeviceReading]:
    return {d.uuid: d for d in collection.devices}


@pytest.mark.parametrize(
    ("layout", "runtime"),
    [
        (CgroupLayout.V2_SYSTEMD, ContainerRuntime.CONTAINERD),
        (CgroupLayout.V2_CGROUPFS, ContainerRuntime.CRIO),
        (CgroupLayout.V1_SYSTEMD, ContainerRuntime.DOCKER),
        (CgroupLayout.V1_CGROUPFS, ContainerRuntime.CONTAINERD),
    ],
)
def test_time_slicing_four_pods_per_gpu(layout: CgroupLayout, runtime: ContainerRuntime) -> None:
    with simulated_node("shared", layout, runtime) as (collector, attributor, side, clock):
        assert holds_within(lambda: listed(attributor), within=5.0)
        for _ in range(3):
            collection, attribution = cycle(collector, attributor, clock)
        devices = by_uuid(collection)
        expected = {(p.namespace, p.name) for p in side.kubelet.pods}
        assert {(u.pod.namespace, u.pod.name) for u in attribution.pods} == expected, "every sharing pod is there"
        assert attribution.kubelet_up is True
        for gpu_uuid in {u.device_uuid for u in attribution.pods}:
            uses = [u for u in attribution.pods if u.device_uuid == gpu_uuid]
            device = devices[gpu_uuid]
            assert len(uses) == 4
            assert all(u.share is ShareMethod.PROCESS and u.sharing_pods == 4 for u in uses)
            total = sum(u.utilization_percent or 0.0 for u in uses)
            assert abs(total - device.values["gpu_util"]) <= 1.0, "the pods' shares add up to the GPU's utilization"
            owned = {p.pid: p for p in device.processes}
            for use in uses:
                pod = next(p for p in side.kubelet.pods if p.name == use.pod.name)
                assert use.pod.container == next(c.name for c in pod.containers if c.devices), "by name, not position"
                scenario_pod = next(
                    sp
                    for sp in load_scenario("shared").pods
                    if sp.name == use.pod.name and sp.namespace == use.pod.namespace
                )
                pids = [pid for c in scenario_pod.containers for pid in c.pids if pid in owned]
                own_sm = sum(owned[pid].sm_util_percent or 0.0 for pid in pids)
                own_memory = sum(owned[pid].used_memory_bytes or 0 for pid in pids)
                assert use.memory_used_bytes == own_memory
                assert abs((use.utilization_percent or 0.0) - own_sm) <= 1.0, "a pod's share comes from its processes"
                assert use.pod.uid == scenario_pod.uid


def test_whole_gpus_with_labels() -> None:
    with simulated_node("h100x8", pod_labels="app") as (collector, attributor, _side, clock):
        assert holds_within(lambda: listed(attributor), within=5.0)
        collection, attribution = cycle(collector, attributor, clock)
        devices = by_uuid(collection)
        assert attribution.pods
        for use in attribution.pods:
            assert use.share is ShareMethod.EXCLUSIVE
            assert use.utilization_percent == devices[use.device_uuid].values["gpu_util"]
            assert use.power_milliwatts == devices[use.device_uuid].values["power_usage"]
            assert set(use.pod.labels) <= {"app"}
        pretrain = [u for u in attribution.pods if u.pod.name == "llm-pretrain-0"]
        assert len(pretrain) == 4 and dict(pretrain[0].pod.labels) == {"app": "llm-pretrain"}


def test_mig_mixed_and_single_strategy() -> None:
    with simulated_node("a100-mig") as (collector, attributor, side, clock):
        assert holds_within(lambda: listed(attributor), within=5.0)
        collection, attribution = cycle(collector, attributor, clock)
        devices = by_uuid(collection)
        names = {u.pod.name: u for u in attribution.pods}
        assert set(names) == {p.name for p in side.kubelet.pods}
        for use in attribution.pods:
            device = devices[use.device_uuid]
            assert device.is_mig and use.share is ShareMethod.MIG
            assert use.memory_used_bytes == int(device.values["fb_used"])
        assert names["finetune-0"].device_uuid != names["sweep-a"].device_uuid


def test_kubelet_restart_keeps_then_restores_pods() -> None:
    with simulated_node("h100x8", kubelet_interval=0.25, max_mapping_age=0.6) as (collector, attributor, side, clock):
        assert holds_within(lambda: listed(attributor), within=5.0)
        assert cycle(collector, attributor, clock)[1].pods
        side.kubelet.stop()
        assert holds_within(lambda: not listed(attributor), within=5.0)
        kept = cycle(collector, attributor, clock)[1]
        assert kept.kubelet_up is False
        assert holds_within(lambda: not cycle(collector, attributor, clock)[1].pods, within=5.0), "stale: pods dropped"
        dropped = cycle(collector, attributor, clock)[1]
        assert dropped.mapping_age_seconds is not None and dropped.mapping_age_seconds > 0.6
        assert {s.name: s.success for s in dropped.statuses}["kubelet"] is False
        side.kubelet.start()
        assert holds_within(lambda: bool(cycle(collector, attributor, clock)[1].pods), within=2 * 0.25 + 0.5)


def test_attribute_never_waits_for_a_hanging_kubelet() -> None:
    with simulated_node("shared", kubelet_interval=0.2) as (collector, attributor, side, clock):
        assert holds_within(lambda: listed(attributor), within=5.0)
        clock.now += 1.0
        collection = collector.collect()
        with side.kubelet.hanging():
            assert holds_within(lambda: side.kubelet.list_calls >= 3 and not listed(attributor), within=10.0)
            results: list[Attribution] = []
            worker = threading.Thread(
                target=lambda: results.extend(attributor.attribute(collection) for _ in range(50))
            )
            worker.start()
            worker.join(timeout=5.0)
            assert not worker.is_alive(), "attribute() blocked on the kubelet"
        assert len(results) == 50 and all(len(r.pods) == 8 for r in results)


def test_without_the_pod_directory_shared_gpus_are_unattributed() -> None:
    with simulated_node("shared", directory=None) as (collector, attributor, _side, clock):
        assert holds_within(lambda: listed(attributor), within=5.0)
        _, attribution = cycle(collector, attributor, clock)
        assert len(attribution.pods) == 8
        assert all(u.share is ShareMethod.UNATTRIBUTED and u.utilization_percent is None for u in attribution.pods)
        assert {s.name for s in attribution.statuses} == {"kubelet", "pod_mapping"}


def test_configuration_errors_are_one_line(tmp_path: Path) -> None:
    cases = [
        ({"kubelet_interval": 0}, "--kubelet-interval"),
        ({"resource_names": "nvidia.com/gpu,gpu"}, "--resource-names"),
        ({"pod_labels": "app("}, "--pod-labels"),
        ({"kubeconfig": tmp_path / "missing"}, "--kubeconfig"),
        ({"kubernetes": True}, "--kubernetes"),  # no service account here
    ]
    for options, flag in cases:
        with pytest.raises(ValueError) as error:
            build_pod_side(node_name="n", kubelet_socket=tmp_path / "k.sock", **options)  # type: ignore[arg-type]
        assert str(error.value).startswith(flag) and "\n" not in str(error.value)


def test_extra_resource_names_from_the_flag(tmp_path: Path) -> None:
    attributor = build_pod_side(
        node_name="n", kubelet_socket=tmp_path / "k.sock", resource_names="example.com/gpu, example.com/h100"
    )
    assert "example.com/h100" in attributor.resource_names and "nvidia.com/gpu" in attributor.resource_names
    assert attributor.pods is None and attributor.max_mapping_age == 60.0


def test_a_fixed_pod_directory_reports_no_pod_watch() -> None:
    """The simulated node's pods come from a fixed directory: no watch runs, so no `podwatch` success is claimed."""
    with simulated_node("shared") as (collector, attributor, _, clock):
        _, attribution = cycle(collector, attributor, clock)
        assert "podwatch" not in {s.name for s in attribution.statuses}


# ---- what the exporter can see of other pods' processes ----------------------------------------------------------


def _shared(**update: object) -> Scenario:
    return load_scenario("shared").model_copy(update=update)


@pytest.mark.parametrize(
    ("driver", "why"),
    [("550.54.15", "lists only the processes of that namespace"), ("535.104.05", "not in the host's PID namespace")],
    ids=["driver-translates-pids", "driver-gives-host-pids"],
)
def test_an_exporter_outside_the_host_pid_namespace_says_so_and_invents_no_shares(
    driver: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    scenario = _shared(exporter_pid_namespace="container", driver_version=driver)
    with (
        caplog.at_level(logging.INFO, logger="exporter.attribution.attributor"),
        simulated_node(scenario) as (collector, attributor, _, clock),
    ):
        assert holds_within(lambda: listed(attributor), within=5.0)
        for _ in range(3):
            _, attribution = cycle(collector, attributor, clock)
    assert attribution.pods
    assert all(u.share is ShareMethod.UNATTRIBUTED and u.utilization_percent is None for u in attribution.pods)
    visibility = attribution.process_visibility
    assert visibility is not None and visibility.visible is False
    assert why in visibility.reason
    warnings = [r for r in caplog.records if "not visible" in r.getMessage()]
    assert len(warnings) == 1, "logged once per change of state, not every cycle"


def test_an_exporter_in_the_host_pid_namespace_sees_the_processes() -> None:
    with simulated_node(_shared()) as (collector, attributor, _, clock):
        assert holds_within(lambda: listed(attributor), within=5.0)
        _, attribution = cycle(collector, attributor, clock)
    assert attribution.process_visibility is not None and attribution.process_visibility.visible is True


def test_mps_clients_get_their_memory_but_no_invented_utilization(caplog: pytest.LogCaptureFixture) -> None:
    """Under MPS the pods' processes are listed by nvmlDeviceGetMPSComputeRunningProcesses only, and the utilization
    samples name the MPS server: each pod's memory is known, its part of the utilization is not (never 0 %)."""
    base = load_scenario("shared")
    gpus = (base.gpus[0].model_copy(update={"mps_server_pid": 4242}), *base.gpus[1:])
    scenario = base.model_copy(update={"gpus": gpus})
    with (
        caplog.at_level(logging.INFO, logger="exporter.attribution.attributor"),
        simulated_node(scenario) as (collector, attributor, _, clock),
    ):
        assert holds_within(lambda: listed(attributor), within=5.0)
        for _ in range(4):
            collection, attribution = cycle(collector, attributor, clock)
    mps_gpu = collection.devices[0]
    assert {p.pid for p in mps_gpu.processes} == {p.pid for p in base.processes if p.gpu == 0} | {4242}
    assert mps_gpu.values["gpu_util"] > 0
    on_mps = [u for u in attribution.pods if u.device_uuid == mps_gpu.uuid]
    assert on_mps and all(u.share is ShareMethod.UNATTRIBUTED for u in on_mps)
    assert all(u.utilization_percent is None and u.power_milliwatts is None for u in on_mps)
    memory = {u.pod.name: u.memory_used_bytes for u in on_mps}
    expected: dict[str, int] = {}
    for process in base.processes:
        owner = base.pod_of_pid(process.pid)
        if process.gpu == 0 and owner is not None:
            expected[owner[0].name] = expected.get(owner[0].name, 0) + int(process.memory_mib * 1024 * 1024)
    assert memory == expected
    # the other GPU, without MPS, keeps its per-process shares
    plain = [u for u in attribution.pods if u.device_uuid == collection.devices[1].uuid]
    assert plain and all(u.share is ShareMethod.PROCESS for u in plain)
    assert sum(1 for r in caplog.records if "MPS clients" in r.getMessage()) == 1


def test_a_sidecar_exporter_never_credits_another_pods_samples_to_its_own_pod() -> None:
    """The exporter shares its PID namespace with a GPU process (host PID 5001, PID 7 there); another pod's process has
    host PID 7. A translating driver lists the first as 7, while the samples say 7 for the second: matching them by
    number would credit the other pod's 70 % to the sidecar's pod. The exporter matches nothing and says why."""
    scenario = sidecar_exporter("550.54.15")
    with simulated_node(scenario) as (collector, attributor, _, clock):
        assert holds_within(lambda: listed(attributor), within=5.0)
        for _ in range(3):
            collection, attribution = cycle(collector, attributor, clock)
    assert [p.pid for p in collection.devices[0].processes] == [7]
    assert {u.pod.name for u in attribution.pods} == {"with-exporter", "other"}
    for use in attribution.pods:
        assert use.share is ShareMethod.UNATTRIBUTED
        assert use.utilization_percent is None and use.memory_used_bytes is None and use.power_milliwatts is None
    visibility = attribution.process_visibility
    assert visibility is not None and visibility.visible is False and "hostPID" in visibility.reason


def test_with_a_driver_that_lists_host_pids_a_sidecar_exporter_matches_samples() -> None:
    """The same node under a driver that does not translate: lists and samples both carry host PIDs and agree."""
    scenario = sidecar_exporter("535.104.05", with_pods=False)
    clock = ManualClock(START)
    with install(Simulator(scenario, clock=clock)):
        collector = NvmlCollector(pynvml, clock=clock, wall_clock=clock, pid_namespace=pid_namespace_of(scenario))
        collector.start()
        try:
            for _ in range(3):
                clock.now += 1.0
                collection = collector.collect()
        finally:
            collector.close()
    assert collection.processes_hidden is None
    assert {p.pid: p.sm_util_percent for p in collection.devices[0].processes} == {5001: 20.0, 7: 70.0}
