"""MIG through the real pynvml: enumeration by probing, MIG device identity, memory and processes, what is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest
import yaml

import simulation
from simulation import Simulator, build_scenario, install
from tests.support.clocks import ManualClock

MIB = 1024 * 1024


@pytest.fixture
def sim() -> Iterator[Simulator]:
    s = Simulator("a100-mig", clock=ManualClock())
    with install(s):
        pynvml.nvmlInit()
        yield s
        pynvml.nvmlShutdown()


def probe(parent: object) -> dict[int, object]:
    """What a collector does: probe every index up to the maximum; empty slots are NOT_FOUND."""
    found = {}
    for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
        try:
            found[i] = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
        except pynvml.NVMLError_NotFound:
            continue
    return found


def test_mig_mode_and_enumeration_with_a_gap(sim: Simulator) -> None:
    g0, g1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    assert pynvml.nvmlDeviceGetMigMode(g0) == [1, 1]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(g0) == 7
    assert sorted(probe(g0)) == [0, 1, 2, 3]
    assert sorted(probe(g1)) == [0, 1, 3]  # index 2 is empty: probing must not stop there
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(g0, 7)


def test_mig_device_identity_and_attributes(sim: Simulator) -> None:
    g0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    gpu_uuid = pynvml.nvmlDeviceGetUUID(g0)
    expected = {m.index: m for m in sim.scenario.gpus[0].mig or ()}
    seen_gi = set()
    for i, h in probe(g0).items():
        spec = expected[i]
        assert pynvml.nvmlDeviceIsMigDeviceHandle(h).value == 1
        assert pynvml.nvmlDeviceGetName(h) == f"NVIDIA A100-SXM4-40GB MIG {spec.profile}"
        uuid = pynvml.nvmlDeviceGetUUID(h)
        assert uuid == spec.uuid and uuid.startswith("MIG-") and uuid != gpu_uuid
        gi = pynvml.nvmlDeviceGetGpuInstanceId(h)
        assert gi == spec.gpu_instance_id
        assert pynvml.nvmlDeviceGetComputeInstanceId(h) == 0
        seen_gi.add(gi)
        attrs = pynvml.nvmlDeviceGetAttributes(h)
        slices = int(spec.profile[0])
        assert attrs.gpuInstanceSliceCount == slices
        assert attrs.memorySizeMB == pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).total // MIB
        assert attrs.multiprocessorCount == 14 * slices
        parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h)
        assert pynvml.nvmlDeviceGetUUID(parent) == gpu_uuid
        assert pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)) == 0
        assert pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByUUID(uuid)) == pynvml.nvmlDeviceGetName(h)
    assert len(seen_gi) == 4
    assert pynvml.nvmlDeviceIsMigDeviceHandle(g0).value == 0
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(g0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceId(g0)


def test_memory_and_processes_per_mig_device(sim: Simulator) -> None:
    g1 = pynvml.nvmlDeviceGetHandleByIndex(1)
    total_used = 0
    for i, h in probe(g1).items():
        mem = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        expected = {p.pid: p.memory_mib for p in sim.scenario.processes if p.gpu == 1 and p.mig == i}
        assert {p.pid: p.usedGpuMemory for p in procs} == {pid: int(m * MIB) for pid, m in expected.items()}
        gi = pynvml.nvmlDeviceGetGpuInstanceId(h)
        assert all(p.gpuInstanceId == gi and p.computeInstanceId == 0 for p in procs)
        assert mem.used == sum(p.usedGpuMemory for p in procs)
        assert mem.used + mem.reserved + mem.free == mem.total
        total_used += mem.used
    # the parent lists every MIG device's processes, with their instance ids
    parent_procs = pynvml.nvmlDeviceGetComputeRunningProcesses(g1)
    assert sorted(p.pid for p in parent_procs) == [52001, 52002, 52003, 52004]
    assert pynvml.nvmlDeviceGetMemoryInfo(g1, version=pynvml.nvmlMemory_v2).used == total_used


def test_what_a_mig_enabled_gpu_and_a_mig_handle_refuse(sim: Simulator) -> None:
    g0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    mig = probe(g0)[0]
    for call in (
        lambda h: pynvml.nvmlDeviceGetUtilizationRates(h),
        lambda h: pynvml.nvmlDeviceGetProcessUtilization(h, 0),
        lambda h: pynvml.nvmlDeviceGetEncoderUtilization(h),
        lambda h: pynvml.nvmlDeviceGetDecoderUtilization(h),
    ):
        for h in (g0, mig):
            with pytest.raises(pynvml.NVMLError_NotSupported):
                call(h)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetPowerUsage(mig)  # board-level readings belong to the parent
    # the parent still reports board-level readings
    assert pynvml.nvmlDeviceGetPowerUsage(g0) > 0
    assert pynvml.nvmlDeviceGetTemperature(g0, 0) > 0


def test_a_gpu_without_mig_enabled_reports_mode_zero() -> None:
    with install(Simulator("h100x8", clock=ManualClock())):
        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]
            assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 0
        finally:
            pynvml.nvmlShutdown()


def test_fifty_six_mig_devices() -> None:
    with install(Simulator("h100-mig", clock=ManualClock())):
        pynvml.nvmlInit()
        try:
            names = set()
            for g in range(pynvml.nvmlDeviceGetCount()):
                for h in probe(pynvml.nvmlDeviceGetHandleByIndex(g)).values():
                    names.add(pynvml.nvmlDeviceGetUUID(h))
                    assert pynvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
            assert len(names) == 56
        finally:
            pynvml.nvmlShutdown()


def test_drivers_that_name_mig_devices_without_the_profile() -> None:
    scenario = build_scenario(
        {"gpus": [{"model": "A100-SXM4-40GB", "mig_names": "plain", "mig": [{"profile": "2g.10gb"}]}]}
    )
    with install(Simulator(scenario, clock=ManualClock())):
        pynvml.nvmlInit()
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(pynvml.nvmlDeviceGetHandleByIndex(0), 0)
            assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA A100-SXM4-40GB"
            attrs = pynvml.nvmlDeviceGetAttributes(mig)  # where the profile can still be read from
            assert (attrs.gpuInstanceSliceCount, attrs.computeInstanceSliceCount, attrs.memorySizeMB) == (2, 2, 9856)
        finally:
            pynvml.nvmlShutdown()


# ---- MIG reconfiguration at run time (the GPU Operator's mig-manager) ------------------------------------------------


def _reconfigured(at: float, mig: list[dict[str, Any]] | None) -> Any:
    data = yaml.safe_load((Path(simulation.__file__).parent / "scenarios" / "a100-mig.yaml").read_text())
    data["timeline"] = [{"at": at, "action": "reconfigure_mig", "gpu": 0, "mig": mig}]
    return build_scenario(data, seed=100)


def test_a_reconfiguration_invalidates_destroyed_handles_and_reuses_slots(clock: ManualClock) -> None:
    scenario = _reconfigured(5.0, [{"profile": "7g.40gb"}])
    with install(Simulator(scenario, clock=clock)):
        pynvml.nvmlInit()
        try:
            gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
            before = [pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, i) for i in range(4)]
            old = [pynvml.nvmlDeviceGetUUID(h) for h in before]
            clock.at(6.0)
            reused = pynvml.nvmlDeviceGetUUID(before[0])  # slot 0 now holds the new 7g.40gb instance
            assert reused not in old
            assert "7g.40gb" in pynvml.nvmlDeviceGetName(before[0])
            for gone in before[1:]:
                with pytest.raises(pynvml.NVMLError_InvalidArgument):
                    pynvml.nvmlDeviceGetUUID(gone)
            assert pynvml.nvmlDeviceGetComputeRunningProcesses(gpu) == [], "the workloads were evicted first"
        finally:
            pynvml.nvmlShutdown()


def test_turning_mig_off_waits_for_the_gpu_to_be_idle_then_gives_the_whole_gpu_back(clock: ManualClock) -> None:
    """nvml.h (nvmlDeviceSetMigMode): the mode change unbinds or resets the GPU, IN_USE while it is not idle; the
    caller holding a handle keeps it busy, so the new mode stays pending until it lets go."""
    sim = Simulator(_reconfigured(5.0, None), clock=clock)
    with install(sim):
        pynvml.nvmlInit()
        try:
            gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
            with pytest.raises(pynvml.NVMLError_NotSupported):
                pynvml.nvmlDeviceGetUtilizationRates(gpu)
            energy = pynvml.nvmlDeviceGetTotalEnergyConsumption(gpu)
            clock.at(6.0)
            enabled, disabled = pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_DISABLE
            assert pynvml.nvmlDeviceGetMigMode(gpu) == [enabled, disabled], "current on, pending off"
            assert pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu) == 7
            with pytest.raises(pynvml.NVMLError_NotFound):  # mig-parted cleared the instances before the mode
                pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
            with pytest.raises(pynvml.NVMLError_NotSupported):
                pynvml.nvmlDeviceGetUtilizationRates(gpu)
            assert [r.what for r in sim.lifecycle.refusals] == ["mig_mode gpu 0"]
        finally:
            pynvml.nvmlShutdown()
        clock.at(16.0)  # the mig-manager's next try finds the GPU idle
        pynvml.nvmlInit()
        try:
            gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
            assert pynvml.nvmlDeviceGetMigMode(gpu) == [disabled, disabled]
            assert pynvml.nvmlDeviceGetUtilizationRates(gpu).gpu >= 0
            assert pynvml.nvmlDeviceGetTotalEnergyConsumption(gpu) >= energy, "counters carry on"
        finally:
            pynvml.nvmlShutdown()
