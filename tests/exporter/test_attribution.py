"""`attribute()`: whole GPUs, MIG (mixed, single, legacy and GKE IDs), time-sliced GPUs split by process, sidecars,
stale entries of terminated pods, and the rule that no pod's figure is another pod's."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.attribution.attribute import AttributionResult, attribute
from exporter.attribution.cgroup import CgroupOwner
from exporter.attribution.directory import StaticPodDirectory
from exporter.attribution.energy import EnergyLedger
from exporter.attribution.labels import PodLabelPolicy
from exporter.kubelet.device_ids import ResourceNames
from exporter.kubelet.podresources import ContainerDevices, ContainerResources, PodResources
from exporter.snapshot import DeviceReading, GpuIdentity, MigIdentity, PodDeviceUse, ProcessUsage, ShareMethod
from toolkit.pods import Pod

GIB = 1024**3


def _uuid(prefix: str, n: int) -> str:
    return f"{prefix}-{uuid.UUID(int=n)}"


def gpu(index: int) -> GpuIdentity:
    return GpuIdentity(index, _uuid("GPU", 1000 + index), "NVIDIA H100 80GB HBM3", f"0000:{index:02X}:00.0", index)


def reading(
    ident: GpuIdentity | MigIdentity,
    *,
    util: float | None = 50.0,
    power_mw: float | None = 300_000.0,
    used: int = 10 * GIB,
    processes: Sequence[ProcessUsage] = (),
    extra: Mapping[str, float] | None = None,
) -> DeviceReading:
    values: dict[str, float] = {"fb_used": used, "fb_total": 80 * GIB}
    if util is not None:
        values["gpu_util"] = util
    if power_mw is not None:
        values["power_usage"] = power_mw
    values.update(extra or {})
    return DeviceReading(ident, True, values, processes=tuple(processes))


def mig(parent: GpuIdentity, index: int, gi: int, profile: str = "1g.10gb") -> MigIdentity:
    return MigIdentity(parent, index, _uuid("MIG", 2000 + parent.index * 10 + index), gi, 0, profile)


def pod(namespace: str, name: str, *containers: tuple[str, str, Sequence[str]]) -> PodResources:
    return PodResources(
        namespace,
        name,
        tuple(
            ContainerResources(c, (ContainerDevices(resource, tuple(ids)),) if ids else ())
            for c, resource, ids in containers
        ),
    )


def uses_by_pod(result: AttributionResult) -> dict[tuple[str, str, str], PodDeviceUse]:
    return {(u.pod.namespace, u.pod.name, u.device_uuid): u for u in result.uses}


# ---- whole GPUs ----
def test_whole_gpus_go_to_their_pod_with_the_devices_figures() -> None:
    g0, g1 = gpu(0), gpu(1)
    devices = [reading(g0, util=80, power_mw=400_000, used=30 * GIB), reading(g1, util=10)]
    pods = [
        pod("ml", "trainer", ("main", "nvidia.com/gpu", [g0.uuid])),
        pod("ml", "idle", ("main", "nvidia.com/gpu", [g1.uuid])),
        pod("web", "frontend", ("main", "cpu", [])),
    ]
    result = attribute(devices, pods)
    by_pod = uses_by_pod(result)
    assert set(by_pod) == {("ml", "trainer", g0.uuid), ("ml", "idle", g1.uuid)}
    trainer = by_pod[("ml", "trainer", g0.uuid)]
    assert trainer.share is ShareMethod.EXCLUSIVE
    assert trainer.utilization_percent == 80
    assert trainer.memory_used_bytes == 30 * GIB
    assert trainer.power_milliwatts == 400_000
    assert trainer.pod.container == "main"
    assert trainer.sharing_pods == 1
    assert result.conflicts == 0


def test_one_pod_with_several_gpus_and_uppercase_ids() -> None:
    g0, g1 = gpu(0), gpu(1)
    result = attribute(
        [reading(g0), reading(g1)], [pod("ml", "big", ("main", "nvidia.com/gpu", [g0.uuid.upper(), g1.uuid]))]
    )
    assert sorted(u.device_uuid for u in result.uses) == sorted([g0.uuid, g1.uuid])


# ---- MIG ----
def test_mig_mixed_and_single_strategy() -> None:
    g0 = gpu(0)
    m0, m1 = mig(g0, 0, gi=7), mig(g0, 1, gi=8)
    devices = [
        reading(g0, util=None, power_mw=250_000),
        reading(m0, util=None, power_mw=None, used=3 * GIB, extra={"gr_engine_active": 42.0}),
        reading(m1, util=None, power_mw=None, used=5 * GIB),
    ]
    pods = [
        pod("ml", "mixed", ("main", "nvidia.com/mig-1g.10gb", [m0.uuid])),
        pod("ml", "single", ("main", "nvidia.com/gpu", [m1.uuid])),
    ]
    by_pod = uses_by_pod(attribute(devices, pods))
    mixed, single = by_pod[("ml", "mixed", m0.uuid)], by_pod[("ml", "single", m1.uuid)]
    assert mixed.share is ShareMethod.MIG and single.share is ShareMethod.MIG
    assert mixed.memory_used_bytes == 3 * GIB and single.memory_used_bytes == 5 * GIB
    assert mixed.utilization_percent == 42.0  # GPM activity of the instance
    assert single.utilization_percent is None  # no GPM: unknown, not the parent's figure
    assert mixed.power_milliwatts is None  # NVML has no per-instance power


def test_legacy_mig_and_gke_ids() -> None:
    g0, g1 = gpu(0), gpu(1)
    m0 = mig(g1, 0, gi=3)
    devices = [reading(g0), reading(g1, util=None), reading(m0, util=None, used=GIB)]
    pods = [
        pod("a", "gke-whole", ("c", "nvidia.com/gpu", ["nvidia0"])),
        pod("a", "legacy", ("c", "nvidia.com/mig-1g.10gb", [f"MIG-{g1.uuid}/3/0"])),
    ]
    by_pod = uses_by_pod(attribute(devices, pods))
    assert by_pod[("a", "gke-whole", g0.uuid)].share is ShareMethod.EXCLUSIVE
    assert by_pod[("a", "legacy", m0.uuid)].share is ShareMethod.MIG
    gke_mig = uses_by_pod(attribute(devices, [pod("a", "gke-mig", ("c", "nvidia.com/gpu", ["nvidia1/gi3"]))]))
    assert set(gke_mig) == {("a", "gke-mig", m0.uuid)}


def test_unknown_and_foreign_ids_are_counted_not_fatal() -> None:
    g0 = gpu(0)
    pods = [
        pod("a", "p", ("c", "nvidia.com/gpu", ["not-a-device", _uuid("GPU", 9999), g0.uuid])),
        pod("a", "fpga", ("c", "example.com/fpga", ["GPU-garbage"])),
    ]
    result = attribute([reading(g0)], pods)
    assert [u.pod.name for u in result.uses] == ["p"]
    assert result.unknown_device_ids == 1
    assert result.unmatched_device_ids == 1


def test_extra_resource_names() -> None:
    g0 = gpu(0)
    pods = [pod("a", "p", ("c", "example.com/h100", [g0.uuid]))]
    assert attribute([reading(g0)], pods).uses == ()
    names = ResourceNames.of(["example.com/h100"])
    assert [u.pod.name for u in attribute([reading(g0)], pods, resource_names=names).uses] == ["p"]


# ---- shared GPUs ----
def _container_id(n: int) -> str:
    return f"{n:064x}"


def shared_setup(
    sm: Sequence[float | None], memory: Sequence[int | None], device_util: float | None = 60.0
) -> tuple[list[DeviceReading], list[PodResources], dict[int, CgroupOwner], StaticPodDirectory, GpuIdentity]:
    """One GPU, len(sm) pods with one replica and one process each."""
    g0 = gpu(0)
    processes = [ProcessUsage(1000 + i, memory[i], sm[i]) for i in range(len(sm))]
    devices = [reading(g0, util=device_util, power_mw=200_000, processes=processes)]
    pods, owners, metas = [], {}, []
    for i in range(len(sm)):
        uid = str(uuid.UUID(int=500 + i))
        pods.append(pod("team", f"pod-{i}", ("sidecar", "", []), ("app", "nvidia.com/gpu", [f"{g0.uuid}::{i}"])))
        owners[1000 + i] = CgroupOwner(uid, _container_id(i))
        metas.append(
            Pod("team", f"pod-{i}", uid, labels={"app": "x"}, phase="Running", containers={_container_id(i): "app"})
        )
    return devices, pods, owners, StaticPodDirectory(metas), g0


def test_time_slicing_with_four_pods_splits_by_process() -> None:
    devices, pods, owners, directory, _g0 = shared_setup([30, 15, 10, 5], [8 * GIB, 4 * GIB, 2 * GIB, GIB])
    result = attribute(devices, pods, owner_of=owners.get, directory=directory)
    uses = sorted(result.uses, key=lambda u: u.pod.name)
    assert [u.pod.name for u in uses] == ["pod-0", "pod-1", "pod-2", "pod-3"]
    assert all(u.share is ShareMethod.PROCESS and u.sharing_pods == 4 for u in uses)
    assert all(u.pod.container == "app" for u in uses), "matched by container name, not position"
    assert [u.memory_used_bytes for u in uses] == [8 * GIB, 4 * GIB, 2 * GIB, GIB]
    assert sum(u.utilization_percent or 0 for u in uses) == pytest.approx(60.0)
    assert [round(u.utilization_percent or 0, 6) for u in uses] == [30.0, 15.0, 10.0, 5.0]
    assert sum(u.power_milliwatts or 0 for u in uses) == pytest.approx(200_000)
    assert uses[0].pod.uid == str(uuid.UUID(int=500))


def test_time_slicing_without_the_pod_watch_is_unattributed() -> None:
    devices, pods, owners, _directory, _ = shared_setup([30, 15, 10, 5], [GIB] * 4)
    for result in (attribute(devices, pods), attribute(devices, pods, owner_of=owners.get)):
        assert len(result.uses) == 4
        for use in result.uses:
            assert use.share is ShareMethod.UNATTRIBUTED
            assert use.utilization_percent is None and use.memory_used_bytes is None and use.power_milliwatts is None
            assert use.sharing_pods == 4


def test_processes_outside_the_sharing_pods_are_not_charged_to_them() -> None:
    devices, pods, owners, directory, _g0 = shared_setup([30, 10, 20], [GIB, GIB, GIB])
    del owners[1002]  # pod-2's process: a host process now (no pod cgroup)
    result = attribute(devices, pods, owner_of=owners.get, directory=directory)
    by_name = {u.pod.name: u for u in result.uses}
    assert by_name["pod-2"].utilization_percent == 0 and by_name["pod-2"].memory_used_bytes == 0
    assert by_name["pod-0"].utilization_percent == pytest.approx(30.0)
    assert result.unattributed_processes == 1


def test_a_busy_gpu_whose_processes_cannot_be_tied_to_pods_is_unattributed_not_zero() -> None:
    devices, pods, _owners, directory, g0 = shared_setup([30, 10], [GIB, GIB])
    for owner_of in ({}.get, {1000: CgroupOwner(str(uuid.UUID(int=9)))}.get):  # no /proc, or only unknown pods
        uses = attribute(devices, pods, owner_of=owner_of, directory=directory).uses
        assert [u.share for u in uses] == [ShareMethod.UNATTRIBUTED] * 2
        assert all(u.utilization_percent is None for u in uses)
    no_process_list = [reading(g0, util=70.0)]
    uses = attribute(no_process_list, pods, owner_of=_owners.get, directory=directory).uses
    assert [u.share for u in uses] == [ShareMethod.UNATTRIBUTED] * 2
    idle = [reading(g0, util=0.0)]
    uses = attribute(idle, pods, owner_of=_owners.get, directory=directory).uses
    assert [(u.share, u.utilization_percent, u.memory_used_bytes) for u in uses] == [(ShareMethod.PROCESS, 0.0, 0)] * 2


def test_an_idle_shared_gpu_splits_power_equally() -> None:
    devices, pods, owners, directory, _ = shared_setup([None, None], [GIB, 2 * GIB], device_util=0.0)
    uses = attribute(devices, pods, owner_of=owners.get, directory=directory).uses
    assert [u.utilization_percent for u in uses] == [0.0, 0.0]
    assert [u.power_milliwatts for u in uses] == [100_000, 100_000]


def test_a_pod_holding_two_replicas_of_one_gpu_is_one_row() -> None:
    g0 = gpu(0)
    pods = [pod("a", "p", ("c", "nvidia.com/gpu", [f"{g0.uuid}::0", f"{g0.uuid}::3"]))]
    result = attribute([reading(g0)], pods)
    assert len(result.uses) == 1


def test_gpu_shared_resource_name_marks_the_device_shared() -> None:
    g0 = gpu(0)
    pods = [
        pod("a", "p", ("c", "nvidia.com/gpu.shared", [g0.uuid])),
        pod("a", "q", ("c", "nvidia.com/gpu.shared", [g0.uuid])),
    ]
    result = attribute([reading(g0)], pods)
    assert {u.pod.name for u in result.uses} == {"p", "q"}
    assert result.conflicts == 0


@given(
    sm=st.lists(st.none() | st.floats(min_value=0, max_value=100), min_size=1, max_size=12),
    device_util=st.none() | st.floats(min_value=0, max_value=100),
    foreign=st.integers(min_value=0, max_value=3),
)
def test_every_sharing_pod_is_present_and_shares_add_up(
    sm: list[float | None], device_util: float | None, foreign: int
) -> None:
    devices, pods, owners, directory, g0 = shared_setup(sm, [GIB] * len(sm), device_util)
    stray = [ProcessUsage(9000 + k, GIB, 5.0) for k in range(foreign)]
    devices = [reading(g0, util=device_util, power_mw=100_000, processes=[*devices[0].processes, *stray])]
    result = attribute(devices, pods, owner_of=owners.get, directory=directory)
    assert sorted(u.pod.name for u in result.uses) == sorted(f"pod-{i}" for i in range(len(sm)))
    total_sm = sum(s for s in sm if s is not None) + 5.0 * foreign
    attributed_sm = sum(s for s in sm if s is not None)
    utils = [u.utilization_percent for u in result.uses]
    if total_sm > 0 and device_util is not None:
        assert sum(u or 0 for u in utils) == pytest.approx(device_util * attributed_sm / total_sm, abs=1e-6)
        assert sum(u.power_milliwatts or 0 for u in result.uses) <= 100_000 * (1 + 1e-9)
    assert all(u is None or 0 <= u <= 100 + 1e-9 for u in utils)
    assert result.unattributed_processes == foreign


# ---- stale entries of terminated pods ----
def test_a_device_claimed_twice_goes_to_the_last_listed_without_more_knowledge() -> None:
    g0 = gpu(0)
    pods = [pod("a", "old", ("c", "nvidia.com/gpu", [g0.uuid])), pod("a", "new", ("c", "nvidia.com/gpu", [g0.uuid]))]
    result = attribute([reading(g0)], pods)
    assert [u.pod.name for u in result.uses] == ["new"]
    assert result.conflicts == 1


def test_a_terminated_pod_loses_its_stale_claim() -> None:
    g0 = gpu(0)
    pods = [
        pod("a", "running", ("c", "nvidia.com/gpu", [g0.uuid])),
        pod("a", "done", ("c", "nvidia.com/gpu", [g0.uuid])),
    ]
    directory = StaticPodDirectory(
        [
            Pod("a", "running", "u1", phase="Running", created_at=1.0),
            Pod("a", "done", "u2", phase="Succeeded", created_at=2.0),
        ]
    )
    result = attribute([reading(g0)], pods, directory=directory)
    assert [u.pod.name for u in result.uses] == ["running"]
    assert result.conflicts == 1


def test_a_terminated_pods_stale_replica_is_dropped() -> None:
    devices, pods, owners, directory, _ = shared_setup([20, 10], [GIB, GIB])
    metas = [directory.by_name("team", "pod-0"), directory.by_name("team", "pod-1")]
    assert metas[0] is not None and metas[1] is not None
    finished = StaticPodDirectory([metas[0], dataclasses.replace(metas[1], phase="Failed")])
    result = attribute(devices, pods, owner_of=owners.get, directory=finished)
    assert [(u.pod.name, u.sharing_pods) for u in result.uses] == [("pod-0", 1)]


def test_the_pod_running_on_the_device_wins_then_the_newest() -> None:
    g0 = gpu(0)
    pods = [pod("a", "x", ("c", "nvidia.com/gpu", [g0.uuid])), pod("a", "y", ("c", "nvidia.com/gpu", [g0.uuid]))]
    directory = StaticPodDirectory(
        [
            Pod("a", "x", "ux", phase="Running", created_at=5.0),
            Pod("a", "y", "uy", phase="Running", created_at=1.0),
        ]
    )
    assert [u.pod.name for u in attribute([reading(g0)], pods, directory=directory).uses] == ["x"]  # newest
    busy = [reading(g0, processes=[ProcessUsage(77, GIB, 40.0)])]
    owners = {77: CgroupOwner("uy")}
    assert [u.pod.name for u in attribute(busy, pods, owner_of=owners.get, directory=directory).uses] == ["y"]


# ---- labels and energy ----
def test_pod_labels_follow_the_allowlist() -> None:
    g0 = gpu(0)
    meta = Pod("a", "p", "u1", labels={"app": "llm", "team": "x", "pod-template-hash": "abc", "version": "v" * 100})
    policy = PodLabelPolicy.parse("app|version", max_value_length=10)
    use = attribute(
        [reading(g0)],
        [pod("a", "p", ("c", "nvidia.com/gpu", [g0.uuid]))],
        directory=StaticPodDirectory([meta]),
        labels=policy,
    ).uses[0]
    assert dict(use.pod.labels) == {"app": "llm", "version": "v" * 10}


def test_energy_is_charged_by_share_and_only_grows() -> None:
    devices, pods, owners, directory, _g0 = shared_setup([30, 10], [GIB, GIB])
    ledger = EnergyLedger()
    totals = []
    for counter in (1_000_000.0, 1_004_000.0, 1_010_000.0):
        readings = [
            DeviceReading(
                devices[0].identity,
                True,
                {**devices[0].values, "total_energy": counter},
                processes=devices[0].processes,
            )
        ]
        result = attribute(readings, pods, owner_of=owners.get, directory=directory)
        totals.append({u.pod.name: u.energy_millijoules for u in ledger.charge(result.shares, readings)})
    assert totals[0] == {"pod-0": 0.0, "pod-1": 0.0}
    assert totals[1]["pod-0"] == pytest.approx(3000.0) and totals[1]["pod-1"] == pytest.approx(1000.0)
    assert totals[2]["pod-0"] == pytest.approx(7500.0) and totals[2]["pod-1"] == pytest.approx(2500.0)


def test_label_policy_bounds() -> None:
    labels = {f"k{i:03d}": "v" * 200 for i in range(500)}
    selected = PodLabelPolicy.parse(".*", max_labels=8, max_value_length=63).select(labels)
    assert len(selected) == 8 and all(len(v) == 63 for v in selected.values())
    assert PodLabelPolicy.parse(None).select(labels) == {}
    with pytest.raises(ValueError, match="--pod-labels: invalid regular expression"):
        PodLabelPolicy.parse("app(")


def test_mps_clients_are_unattributed_with_their_own_memory() -> None:
    """Under MPS the samples name the server (stray: no pod's process); the clients' figures are unknown, not 0 %."""
    devices, pods, owners, directory, _ = shared_setup([60, 20], [3 * GIB, GIB], device_util=80.0)
    clients = [dataclasses.replace(p, mps_client=True, sm_util_percent=None) for p in devices[0].processes]
    server = ProcessUsage(4242, 32 << 20, 80.0)
    mps = [dataclasses.replace(devices[0], processes=(server, *clients))]
    result = attribute(mps, pods, owner_of=owners.get, directory=directory)
    uses = sorted(result.uses, key=lambda u: u.pod.name)
    assert [(u.share, u.utilization_percent, u.memory_used_bytes, u.power_milliwatts) for u in uses] == [
        (ShareMethod.UNATTRIBUTED, None, 3 * GIB, None),
        (ShareMethod.UNATTRIBUTED, None, GIB, None),
    ]
    assert result.mps_devices == 1 and result.unattributed_processes == 1  # the server
    # without MPS the pods' own samples split the device
    plain = attribute(devices, pods, owner_of=owners.get, directory=directory)
    assert plain.mps_devices == 0
    assert [u.utilization_percent for u in sorted(plain.uses, key=lambda u: u.pod.name)] == [60.0, 20.0]


def test_a_busy_gpu_whose_samples_stopped_gets_no_invented_power_split() -> None:
    """The processes are known and tied to their pods, but no sample says whose the work is (samples stopped, or a
    clock step is being waited out): utilization and power stay unknown, memory is still each pod's own."""
    devices, pods, owners, directory, _ = shared_setup([None, None], [3 * GIB, GIB], device_util=70.0)
    result = attribute(devices, pods, owner_of=owners.get, directory=directory)
    uses = sorted(result.uses, key=lambda u: u.pod.name)
    assert [(u.share, u.utilization_percent, u.power_milliwatts, u.memory_used_bytes) for u in uses] == [
        (ShareMethod.PROCESS, None, None, 3 * GIB),
        (ShareMethod.PROCESS, None, None, GIB),
    ]
    assert [share.fraction for share in result.shares] == [None, None], "no energy charged either"
