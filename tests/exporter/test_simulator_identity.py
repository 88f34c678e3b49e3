"""The simulator seen through the real pynvml: install, init, system calls, device handles and identity."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pynvml
import pytest

from simulation import Simulator, build_scenario, install, installed, load_scenario, uninstall
from tests.support.clocks import ManualClock

UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PCI_RE = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.0$")


@pytest.fixture
def sim() -> Iterator[Simulator]:
    s = Simulator("h100x8", clock=ManualClock())
    with install(s):
        pynvml.nvmlInit()
        yield s
        if s.initialized:
            pynvml.nvmlShutdown()


def test_system_calls_report_the_scenarios_driver(sim: Simulator) -> None:
    assert pynvml.nvmlSystemGetDriverVersion() == "550.54.15"
    assert pynvml.nvmlSystemGetCudaDriverVersion() == 12040
    assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == 12040
    assert pynvml.nvmlSystemGetNVMLVersion() == "12.550.54.15"
    assert pynvml.nvmlSystemGetProcessName(41001) == "torchrun"
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlSystemGetProcessName(999_999)


def test_every_gpu_has_a_distinct_well_formed_identity(sim: Simulator) -> None:
    assert pynvml.nvmlDeviceGetCount() == 8
    uuids, buses, serials = set(), set(), set()
    for i in range(8):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        assert pynvml.nvmlDeviceGetIndex(h) == i
        assert pynvml.nvmlDeviceGetMinorNumber(h) == i
        assert pynvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
        uuid = pynvml.nvmlDeviceGetUUID(h)
        assert UUID_RE.match(uuid), uuid
        pci = pynvml.nvmlDeviceGetPciInfo(h)
        bus_id = pci.busId
        assert PCI_RE.match(bus_id), bus_id
        assert pci.busIdLegacy == bus_id[4:]
        assert (pci.domain, pci.bus, pci.device) == (int(bus_id[:8], 16), int(bus_id[9:11], 16), 0)
        assert pci.pciDeviceId == 0x233010DE
        serial = pynvml.nvmlDeviceGetSerial(h)
        assert serial.isdigit() and len(serial) == 13
        assert re.match(r"^\d\d\.\d\d\.\d\d\.\d\d\.\d\d$", pynvml.nvmlDeviceGetVbiosVersion(h))
        uuids.add(uuid)
        buses.add(bus_id)
        serials.add(serial)
        # the handle found by UUID or PCI bus id is the same device
        assert pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(uuid)) == i
        assert pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)) == i
    assert len(uuids) == len(buses) == len(serials) == 8


def test_identity_matches_the_loaded_scenario(sim: Simulator) -> None:
    for i, gpu in enumerate(sim.scenario.gpus):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        assert pynvml.nvmlDeviceGetUUID(h) == gpu.uuid
        assert pynvml.nvmlDeviceGetPciInfo(h).busId == gpu.pci_bus_id


def test_bad_handle_lookups_raise_the_drivers_errors(sim: Simulator) -> None:
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(8)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetName(pynvml.c_nvmlDevice_t())  # a NULL handle


def test_a_function_the_simulator_lacks_is_function_not_found(sim: Simulator) -> None:
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetBoardId(h)
    assert "nvmlDeviceGetBoardId" not in sim.functions


def test_calls_before_init_and_after_shutdown_are_uninitialized(sim: Simulator) -> None:
    pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlShutdown()
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 8


def test_init_is_reference_counted(sim: Simulator) -> None:
    pynvml.nvmlInit()
    pynvml.nvmlShutdown()
    assert pynvml.nvmlDeviceGetCount() == 8  # still initialized once


def test_fail_init_looks_like_a_host_without_a_driver(sim: Simulator) -> None:
    pynvml.nvmlShutdown()
    sim.fail_init()
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()
    sim.fail_init(None)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 8


def test_error_strings_come_from_the_library(sim: Simulator) -> None:
    # a code pynvml has no text for is looked up through nvmlErrorString
    assert pynvml.nvmlErrorString(15) == "GPU is lost"
    assert pynvml.nvmlErrorString(12345) == "Unknown Error"


def test_install_uninstall_restores_pynvml_and_refuses_a_second_simulator() -> None:
    before = pynvml.nvmlLib
    a = Simulator("shared", clock=ManualClock())
    b = Simulator("shared", clock=ManualClock())
    with install(a):
        assert pynvml.nvmlLib is a
        assert installed() is a
        with pytest.raises(RuntimeError, match="already installed"):
            install(b)
        install(a)  # the same one again is harmless
    assert pynvml.nvmlLib is before
    assert installed() is None
    uninstall()  # nothing installed: no-op
    # a fresh install sees no function pointers cached from the previous one
    with install(b):
        pynvml.nvmlInit()
        assert pynvml.nvmlDeviceGetCount() == 2
        pynvml.nvmlShutdown()
        assert b.call_counts["nvmlDeviceGetCount_v2"] == 1
        assert "nvmlDeviceGetCount_v2" not in a.call_counts


def test_same_seed_same_identities_other_seed_other_identities() -> None:
    def identities(seed: int) -> list[tuple[str, str, str]]:
        with install(Simulator(load_scenario("h100x8", seed=seed), clock=ManualClock())):
            pynvml.nvmlInit()
            try:
                out = []
                for i in range(pynvml.nvmlDeviceGetCount()):
                    h = pynvml.nvmlDeviceGetHandleByIndex(i)
                    out.append(
                        (
                            pynvml.nvmlDeviceGetUUID(h),
                            pynvml.nvmlDeviceGetSerial(h),
                            str(pynvml.nvmlDeviceGetPowerUsage(h)),
                        )
                    )
                return out
            finally:
                pynvml.nvmlShutdown()

    assert identities(1) == identities(1)
    assert {u for u, _, _ in identities(1)}.isdisjoint({u for u, _, _ in identities(2)})


def test_an_older_driver_lacks_the_functions_the_scenario_names() -> None:
    scenario = build_scenario(
        {"gpus": [{"model": "A100-SXM4-40GB"}], "missing_functions": ["nvmlDeviceGetCurrentClocksEventReasons"]}
    )
    with install(Simulator(scenario, clock=ManualClock())):
        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            with pytest.raises(pynvml.NVMLError_FunctionNotFound):
                pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
            assert pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h) >= 0  # the older name still answers
        finally:
            pynvml.nvmlShutdown()
