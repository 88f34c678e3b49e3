"""The driver's life cycle through the real pynvml: a driver that is not loaded yet, a module that is not the
library's version, an unload, a GPU unbind and a MIG mode change refused while the caller holds the driver, GPUs
bound at run time, and what each driver branch posts when a GPU falls off the bus."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pynvml
import pytest

from simulation import ScenarioError, Simulator, build_scenario, install
from tests.support.clocks import ManualClock

GPU_UNAVAILABLE = 0x4000  # nvmlEventTypeGpuUnavailableError
XID = pynvml.nvmlEventTypeXidCriticalError


@contextmanager
def initialized() -> Iterator[None]:
    """nvmlInit, and nvmlShutdown at the end: the caller holds the driver meanwhile."""
    pynvml.nvmlInit()
    try:
        yield
    finally:
        pynvml.nvmlShutdown()


def scenario(**fields: Any) -> Any:
    data: dict[str, Any] = {"gpus": [{"model": "H100-SXM5-80GB", "count": 2}]}
    data.update(fields)
    return build_scenario(data, seed=5)


def test_a_driver_not_loaded_yet_refuses_init_until_it_is(clock: ManualClock) -> None:
    with install(Simulator(scenario(driver_loaded=False, timeline=[{"at": 30, "action": "load_driver"}]), clock=clock)):
        with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
            pynvml.nvmlInit()
        clock.at(30)
        with initialized():
            assert pynvml.nvmlDeviceGetCount() == 2


def test_a_driver_upgraded_without_reloading_the_modules_is_a_version_mismatch(clock: ManualClock) -> None:
    """The container has the new library (570), the node still runs the old module (550) until the modules are
    reloaded: nvmlInit fails with LIB_RM_VERSION_MISMATCH meanwhile, as nvidia-smi's "Driver/library version
    mismatch"."""
    data = scenario(
        driver_version="570.86.15",
        kernel_module_version="550.54.15",
        timeline=[{"at": 20, "action": "unload_driver"}, {"at": 21, "action": "load_driver"}],
    )
    sim = Simulator(data, clock=clock)
    with install(sim):
        with pytest.raises(pynvml.NVMLError_LibRmVersionMismatch):
            pynvml.nvmlInit()
        assert sim.lifecycle.module_version == "550.54.15"
        clock.at(21)
        with initialized():
            assert pynvml.nvmlSystemGetDriverVersion() == "570.86.15"
    assert sim.lifecycle.refusals == []  # nothing held the driver: the reload went through at once


def test_the_energy_counter_starts_again_when_the_modules_are_loaded_again(clock: ManualClock) -> None:
    """nvml.h: the total energy is counted "since the driver was last reloaded": an unload and load on the timeline
    (a driver container restarted) starts it from 0, as Simulator.reload_driver does."""
    data = scenario(
        gpus=[{"model": "H100-SXM5-80GB", "load": {"baseline": 50}}],
        timeline=[{"at": 100, "action": "unload_driver"}, {"at": 101, "action": "load_driver"}],
    )
    with install(Simulator(data, clock=clock)):
        clock.at(99)
        with initialized():
            before = pynvml.nvmlDeviceGetTotalEnergyConsumption(pynvml.nvmlDeviceGetHandleByIndex(0))
        clock.at(111)  # nothing held the driver: it was unloaded at 100 s and loaded at 101 s
        with initialized():
            after = pynvml.nvmlDeviceGetTotalEnergyConsumption(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert 0 < after < before / 5, (before, after)  # about 10 s of draw, counted from the load


def test_the_driver_cannot_be_unloaded_while_nvml_holds_it(clock: ManualClock) -> None:
    """k8s-driver-manager's unload fails ("driver is in use") while a process holds the driver; its pod restarts
    and tries again. The new driver is installed only once the old one is gone."""
    data = scenario(
        timeline=[
            {"at": 10, "action": "unload_driver", "retry_every_s": 5},
            {"at": 12, "action": "load_driver", "version": "570.86.15"},
        ]
    )
    sim = Simulator(data, clock=clock)
    with install(sim):
        pynvml.nvmlInit()
        pynvml.nvmlDeviceGetHandleByIndex(0)
        clock.at(16)
        assert pynvml.nvmlDeviceGetCount() == 2, "still loaded: the unload at 10 s and its retry at 15 s failed"
        assert [(r.at, r.what, r.reason) for r in sim.lifecycle.refusals] == [
            (10, "unload_driver", "driver is in use"),
            (15, "unload_driver", "driver is in use"),
        ]
        pynvml.nvmlShutdown()  # the exporter's pod is deleted: its process lets go of the driver
        clock.at(20)  # the next try unloads, and the waiting 570 driver is loaded
        with pytest.raises(pynvml.NVMLError_LibRmVersionMismatch):  # this process still has the 550 library
            pynvml.nvmlInit()
        assert sim.lifecycle.module_version == "570.86.15"
        assert len(sim.lifecycle.refusals) == 2


def test_a_gpu_unbind_waits_for_the_caller_to_let_go_and_a_bind_moves_the_indexes(clock: ManualClock) -> None:
    data = scenario(
        gpus=[{"model": "H100-SXM5-80GB"}, {"model": "H100-SXM5-80GB", "bound": False}, {"model": "L4"}],
        timeline=[{"at": 5, "action": "bind_gpu", "gpu": 1}, {"at": 10, "action": "unbind_gpu", "gpu": 0}],
    )
    sim = Simulator(data, clock=clock)
    uuids = [g.uuid for g in data.gpus]
    with install(sim):
        with initialized():
            assert pynvml.nvmlDeviceGetCount() == 2
            l4 = pynvml.nvmlDeviceGetHandleByIndex(1)
            assert pynvml.nvmlDeviceGetUUID(l4) == uuids[2]
            with pytest.raises(pynvml.NVMLError_NotFound):
                pynvml.nvmlDeviceGetHandleByUUID(uuids[1] or "")
            first = pynvml.nvmlDeviceGetHandleByIndex(0)
            clock.at(5)  # GPU 1 is bound: it enumerates in bus order, and the L4 moves from index 1 to 2
            assert pynvml.nvmlDeviceGetCount() == 3
            assert [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(3)] == uuids
            with pytest.raises(pynvml.NVMLError_InvalidArgument):  # nvml.h: such handles must be re-established
                pynvml.nvmlDeviceGetUUID(l4)
            assert pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(uuids[2] or "")) == 2
            clock.at(10)  # the unbind of GPU 0 waits: this process holds it
            assert pynvml.nvmlDeviceGetCount() == 3
            assert pynvml.nvmlDeviceGetUUID(first) == uuids[0]
            assert [r.what for r in sim.lifecycle.refusals] == ["unbind_gpu 0"]
        with initialized():
            assert pynvml.nvmlDeviceGetCount() == 2, "the unbind completed when the caller let go"
            assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0)) == uuids[1]


def test_a_mig_layout_without_a_mode_change_applies_while_the_gpu_is_held(clock: ManualClock) -> None:
    data = build_scenario(
        {
            "gpus": [{"model": "A100-SXM4-40GB", "mig": [{"profile": "3g.20gb"}]}],
            "timeline": [{"at": 5, "action": "reconfigure_mig", "gpu": 0, "mig": [{"profile": "7g.40gb"}]}],
        },
        seed=2,
    )
    sim = Simulator(data, clock=clock)
    with install(sim):
        with initialized():
            gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
            clock.at(6)
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
            assert "7g.40gb" in pynvml.nvmlDeviceGetName(mig)
            assert sim.lifecycle.refusals == []


def test_turning_mig_on_stays_pending_while_held(clock: ManualClock) -> None:
    data = build_scenario(
        {
            "gpus": [{"model": "A100-SXM4-40GB"}],
            "timeline": [{"at": 5, "action": "reconfigure_mig", "gpu": 0, "mig": [{"profile": "3g.20gb"}]}],
        },
        seed=2,
    )
    sim = Simulator(data, clock=clock)
    with install(sim):
        pynvml.nvmlInit()
        gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
        clock.at(6)
        assert pynvml.nvmlDeviceGetMigMode(gpu) == [0, 1]
        assert pynvml.nvmlDeviceGetUtilizationRates(gpu).gpu >= 0, "still a whole GPU"
        pynvml.nvmlShutdown()
        clock.at(15)  # the mig-manager tries again 10 s after its refused try at 5 s
        with initialized():
            gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
            assert pynvml.nvmlDeviceGetMigMode(gpu) == [1, 1]
            assert "3g.20gb" in pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0))


def _events_of_a_lost_gpu(version: str, processes: bool, clock: ManualClock) -> tuple[list[tuple[int, int]], int]:
    """(event type, data) of what a set registered for everything supported hears when GPU 0 falls off the bus, and
    the supported event mask."""
    data = scenario(
        driver_version=version,
        processes=[{"pid": 100, "gpu": 0, "memory_mib": 1000}, {"pid": 101, "gpu": 0, "memory_mib": 1000}]
        if processes
        else [],
    )
    sim = Simulator(data, clock=clock)
    heard: list[tuple[int, int]] = []
    with install(sim):
        with initialized():
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
            event_set = pynvml.nvmlEventSetCreate()
            pynvml.nvmlDeviceRegisterEvents(handle, supported & (XID | GPU_UNAVAILABLE), event_set)
            sim.lose_gpu(0)
            while True:
                try:
                    event = pynvml.nvmlEventSetWait(event_set, 20)
                except pynvml.NVMLError_GpuIsLost:
                    break
                assert ctypes.cast(event.device, ctypes.c_void_p).value == ctypes.cast(handle, ctypes.c_void_p).value
                heard.append((event.eventType, event.eventData))
            pynvml.nvmlEventSetFree(event_set)
    return heard, supported


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("535.161.08", []),  # R535 before 535.216.01: Xid 79 only in the kernel log
        ("535.216.01", [(XID, 79), (XID, 79)]),  # one per running channel (here: per process)
        ("550.54.15", []),
        ("550.120", [(XID, 79), (XID, 79)]),
        ("555.58.02", [(XID, 79)]),  # R555, R560: one RC_ERROR 79 for the GPU (osinit.c), not one per channel
        ("560.35.03", [(XID, 79)]),
        ("570.86.15", [(GPU_UNAVAILABLE, 0), (XID, 79), (XID, 79)]),
    ],
)
def test_what_each_driver_branch_posts_when_a_busy_gpu_falls_off_the_bus(
    version: str, expected: list[tuple[int, int]], clock: ManualClock
) -> None:
    heard, supported = _events_of_a_lost_gpu(version, processes=True, clock=clock)
    assert heard == expected
    assert bool(supported & GPU_UNAVAILABLE) == version.startswith("570")


def test_an_idle_gpu_that_falls_off_the_bus_posts_no_xid_even_on_r570(clock: ManualClock) -> None:
    heard, _ = _events_of_a_lost_gpu("570.86.15", processes=False, clock=clock)
    assert heard == [(GPU_UNAVAILABLE, 0)]


@pytest.mark.parametrize("version", ["555.42.02", "560.35.03"])
def test_an_idle_gpu_that_falls_off_the_bus_on_r555_and_r560_posts_one_xid_79(version: str, clock: ManualClock) -> None:
    """open-gpu-kernel-modules osinit.c `osHandleGpuLost`, 555.42.02 to 560.35.03: `gpuNotifySubDeviceEvent(pGpu,
    NV2080_NOTIFIERS_RC_ERROR, ..., ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS, 0)` for the GPU, whatever runs on it."""
    heard, _ = _events_of_a_lost_gpu(version, processes=False, clock=clock)
    assert heard == [(XID, 79)]


def test_every_xid_and_a_gsp_timeout_are_printed_to_the_kernel_log_as_the_driver_prints_them(
    clock: ManualClock,
) -> None:
    """kernel_rc.c `krcReportXid`: "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s"; kernel_gsp.c logs a GSP
    RPC timeout as Xid 119 on every release; osinit.c logs Xid 79 for a lost GPU."""
    sim = Simulator(scenario(driver_version="550.54.15"), clock=clock)
    sim.inject_xid(0, 13)
    sim.gsp_timeout(0)
    sim.lose_gpu(0)
    address = sim.node.gpus[0].pci_bus_id.lower()[4:-2]  # "00000000:18:00.0" -> "0000:18:00"
    texts = [record.split(";", 1)[1] for record in sim.kernel_log.records]
    assert [t.split(": ", 2)[2].split(",")[0] for t in texts] == ["13", "119", "79"]
    assert all(t.startswith(f"NVRM: Xid (PCI:{address}): ") for t in texts)
    assert [int(r.split(",")[1]) for r in sim.kernel_log.records] == [0, 1, 2]  # kmsg sequence numbers


def test_registering_for_an_event_type_the_driver_lacks_is_not_supported(clock: ManualClock) -> None:
    with install(Simulator(scenario(driver_version="550.54.15"), clock=clock)):
        with initialized():
            event_set = pynvml.nvmlEventSetCreate()
            with pytest.raises(pynvml.NVMLError_NotSupported):
                pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0), XID | GPU_UNAVAILABLE, event_set)
            pynvml.nvmlEventSetFree(event_set)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"timeline": [{"at": 1, "action": "unbind_gpu", "gpu": 4}]}, "timeline.0: no GPU 4"),
        ({"timeline": [{"at": 1, "action": "load_driver", "version": "latest"}]}, "timeline.0.load_driver.version"),
        ({"kernel_module_version": "550"}, "kernel_module_version"),
    ],
)
def test_bad_life_cycle_events_are_one_line_errors(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        scenario(**fields)
