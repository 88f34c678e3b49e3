"""How the real NvmlCollector behaves when NVML says no: unsupported fields, permissions, lost GPUs, XIDs, no NVML."""

from __future__ import annotations

import ctypes.util
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pynvml
import pytest

from exporter.collection import DeviceCollection
from exporter.nvml import NvmlCollector
from exporter.snapshot import DeviceReading, MigIdentity
from simulation import Simulator, build_scenario, install, installed
from tests.exporter.collecting import collecting
from tests.support.clocks import ManualClock
from toolkit.backoff import Backoff


def by_index(collection: DeviceCollection) -> dict[int, DeviceReading]:
    return {d.gpu.index: d for d in collection.devices if not d.is_mig}


def wait_for(collector: NvmlCollector, done: Callable[[DeviceCollection], bool]) -> DeviceCollection:
    """Collect until `done` holds: XID events arrive on the listener's own thread."""
    deadline = time.monotonic() + 10.0
    while True:
        collection = collector.collect()
        if done(collection) or time.monotonic() > deadline:
            return collection
        time.sleep(0.02)


# ---- NOT_SUPPORTED ------------------------------------------------------------------------------------------------


def test_unsupported_measurements_are_absent_and_not_asked_again() -> None:
    clock = ManualClock()
    with collecting("faulty", clock) as (sim, collector):
        first = by_index(collector.collect())
        encoder_calls = sim.call_counts["nvmlDeviceGetEncoderUtilization"]
        pcie_calls = sim.call_counts["nvmlDeviceGetPcieThroughput"]
        for _ in range(3):
            clock.advance(0.5)  # the timeline's first fault is at 3 s
            last = by_index(collector.collect())
        # GPU 2 said NOT_SUPPORTED once; only the other three GPUs are asked again
        assert sim.call_counts["nvmlDeviceGetEncoderUtilization"] - encoder_calls == 3 * 3
        assert sim.call_counts["nvmlDeviceGetPcieThroughput"] == pcie_calls  # held between samples
    for reading in (first[2], last[2]):
        assert reading.up
        for key in ("memory_temp", "enc_util", "dec_util", "pcie_tx", "pcie_rx"):
            assert key not in reading.values  # absent, never zero
        assert {"gpu_util", "fb_used", "gpu_temp", "pcie_replay", "nvlink_total"} <= reading.values.keys()
        assert reading.errors == {}  # NOT_SUPPORTED is a fact of the board, not an error
    assert "memory_temp" in last[0].values
    # the L4 has no NVLink: its NVLink fields answer NOT_SUPPORTED entry by entry
    assert not {"nvlink_tx", "nvlink_rx", "nvlink_total"} & last[3].values.keys()
    assert "ecc_sbe_volatile" in last[3].values


# ---- NO_PERMISSION ------------------------------------------------------------------------------------------------


def test_no_permission_is_logged_once_and_counted_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    with caplog.at_level(logging.WARNING, logger="exporter.nvml"), collecting("faulty", clock) as (_, collector):
        for _ in range(4):
            readings = by_index(collector.collect())
            clock.advance(0.5)
        collector.rediscover()  # counts survive a rediscovery of the same GPU
        readings = by_index(collector.collect())
    l4 = readings[3]
    assert l4.up
    assert "pcie_replay" not in l4.values
    assert l4.errors == {"NO_PERMISSION": 1.0}
    denied = [r for r in caplog.records if "no permission" in r.getMessage()]
    assert len(denied) == 1
    assert "pcie_replay" in denied[0].getMessage()
    assert l4.gpu.uuid in denied[0].getMessage()


# ---- other errors -------------------------------------------------------------------------------------------------


def _one_gpu(**gpu: Any) -> Any:
    return build_scenario({"name": "one", "gpus": [{"model": "H100-SXM5-80GB", **gpu}]})


def test_another_error_drops_only_that_value_and_counts_every_time() -> None:
    clock = ManualClock()
    scenario = _one_gpu(errors={"nvmlDeviceGetPowerUsage": "UNKNOWN", "field:94": "UNKNOWN"})
    with collecting(scenario, clock) as (sim, collector):
        for _ in range(3):
            collection = collector.collect()
            clock.advance(1.0)
        power_calls = sim.call_counts["nvmlDeviceGetPowerUsage"]
    (gpu,) = collection.devices
    assert gpu.up
    assert "power_usage" not in gpu.values
    assert "pcie_replay" not in gpu.values
    assert {"power_limit", "total_energy", "memory_temp", "ecc_dbe_volatile"} <= gpu.values.keys()
    assert gpu.errors == {"UNKNOWN": 6.0}  # two failing reads, three cycles
    assert power_calls == 3  # asked again every cycle: the next one may work
    nvml_status = {s.name: s for s in collection.statuses}["nvml"]
    assert not nvml_status.success
    assert nvml_status.errors_total == 3


# ---- a lost GPU ---------------------------------------------------------------------------------------------------


def test_a_lost_gpu_is_down_while_the_others_report_and_comes_back(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    with caplog.at_level(logging.WARNING, logger="exporter.nvml"), collecting("faulty", clock) as (_, collector):
        before = by_index(collector.collect())
        clock.advance(6.0)  # GPU 1 falls off the bus at 5 s
        during = by_index(collector.collect())
        clock.advance(1.0)
        still = collector.collect()
        clock.advance(60.0)  # restored at 60 s, and the backoff has run out
        after = by_index(collector.collect())
    assert before[1].up
    lost = during[1]
    assert not lost.up
    assert lost.uuid == before[1].uuid  # still named, so its series say "down"
    assert set(lost.values) <= {"last_xid"}, "nothing but the XIDs it said before it went"
    assert lost.errors == {"GPU_IS_LOST": 1.0}
    for index in (0, 2, 3):
        assert during[index].up
        assert "fb_used" in during[index].values
    assert not by_index(still)[1].up
    assert by_index(still)[1].errors == {"GPU_IS_LOST": 1.0}  # one loss, counted once
    nvml_status = {s.name: s for s in still.statuses}["nvml"]
    assert nvml_status.success, "the other GPUs answer: the collector did its job (GPU 1 shows as up 0)"
    assert nvml_status.errors_total >= 2  # the lost GPU counts as an error every cycle
    assert after[1].up
    assert after[1].uuid == before[1].uuid
    assert {"gpu_util", "fb_used", "memory_temp"} <= after[1].values.keys()
    assert after[1].errors == {"GPU_IS_LOST": 1.0}
    messages = [r.getMessage() for r in caplog.records]
    assert any("GPU 1" in m and "lost" in m for m in messages)
    assert any("GPU 1" in m and "answers again" in m for m in messages)


def test_a_lost_gpu_is_probed_again_with_exponential_backoff() -> None:
    clock = ManualClock()
    with collecting("h100x8", clock, lost_backoff=Backoff(1.0, 60.0), draw=lambda: 1.0) as (sim, collector):
        collector.collect()

        def lookups() -> int:
            return sim.call_counts["nvmlDeviceGetHandleByIndex_v2"]

        sim.lose_gpu(3)
        assert not by_index(collector.collect())[3].up
        seen = [lookups()]
        for step in (0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0):
            clock.advance(step)
            collector.collect()
            seen.append(lookups())
        sim.restore_gpu(3)
        clock.advance(8.0)
        back = by_index(collector.collect())
    # probes at +1 s, then 2 s later (+3 s), then 4 s later (+7 s)
    assert [b - a for a, b in itertools.pairwise(seen)] == [0, 1, 0, 1, 0, 0, 0, 1]
    assert back[3].up
    assert back[3].errors == {"GPU_IS_LOST": 1.0}


def test_a_lost_gpu_keeps_its_xid_series() -> None:
    """XID 79 comes as the GPU falls off the bus: the down GPU keeps it, so the XID alert can fire while it is gone."""
    clock = ManualClock()
    with collecting("h100x8", clock) as (sim, collector):
        collector.collect()
        sim.lose_gpu(3)
        collection = wait_for(collector, lambda c: by_index(c)[3].values.get("last_xid") == 79)
    lost = by_index(collection)[3]
    assert not lost.up
    assert lost.values == {"last_xid": 79.0}
    assert lost.vectors["xid_errors"] == {"79": 1.0}


def test_the_nvml_collector_fails_only_when_no_gpu_answers() -> None:
    clock = ManualClock()
    with collecting("faulty", clock) as (sim, collector):
        collector.collect()
        sim.lose_gpu(2)
        one_lost = {s.name: s for s in collector.collect().statuses}["nvml"]
        for index in range(len(sim.node.gpus)):
            sim.lose_gpu(index)
        clock.advance(0.1)
        all_lost = {s.name: s for s in collector.collect().statuses}["nvml"]
    assert one_lost.success and one_lost.errors_total == 1
    assert not all_lost.success


def test_the_xid_listener_leaves_a_lost_gpu_out_and_keeps_hearing_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """nvmlEventSetWait fails with GPU_IS_LOST while a lost GPU is in the set: the set is built again without it."""
    clock = ManualClock()
    with caplog.at_level(logging.WARNING, logger="exporter.nvml"), collecting("h100x8", clock) as (sim, collector):
        collector.collect()
        sim.lose_gpu(3)
        wait_for(collector, lambda c: by_index(c)[3].values.get("last_xid") == 79)

        def rebuilt(_: DeviceCollection) -> bool:  # an event raised while the old set is being dropped is lost with it
            return any("XID events" in r.getMessage() and "lost" in r.getMessage() for r in caplog.records)

        assert rebuilt(wait_for(collector, rebuilt)), "the listener never left the lost GPU out"
        sim.inject_xid(5, 13)
        collection = wait_for(collector, lambda c: by_index(c)[5].values.get("last_xid") == 13)
        statuses = {s.name: s for s in collection.statuses}
    assert by_index(collection)[5].vectors["xid_errors"] == {"13": 1.0}
    assert statuses["xid"].success and statuses["xid"].errors_total == 0
    assert any("XID events" in r.getMessage() and "lost" in r.getMessage() for r in caplog.records)


def test_a_lost_mig_gpu_takes_its_instances_down_only() -> None:
    clock = ManualClock()
    with collecting("a100-mig", clock) as (sim, collector):
        collector.collect()
        sim.lose_gpu(0)
        collection = collector.collect()
    for reading in collection.devices:
        if reading.gpu.index == 0:
            assert not reading.up
            assert set(reading.values) <= {"last_xid"}  # the GPU keeps its XID 79; its instances keep nothing
        else:
            assert reading.up
            assert "fb_used" in reading.values
    assert sum(1 for d in collection.devices if d.is_mig and not d.up) == 4


# ---- XID events ---------------------------------------------------------------------------------------------------


def test_xid_events_are_counted_per_gpu_and_xid() -> None:
    clock = ManualClock()
    with collecting("h100x8", clock) as (sim, collector):
        collector.collect()
        for xid in (13, 13, 13, 31):
            sim.inject_xid(2, xid)
        collection = wait_for(collector, lambda c: by_index(c)[2].vectors["xid_errors"].get("31") == 1.0)
    gpu = by_index(collection)
    assert gpu[2].vectors["xid_errors"] == {"13": 3.0, "31": 1.0}
    assert gpu[2].values["last_xid"] == 31
    for index in (0, 1, 3, 4, 5, 6, 7):
        assert gpu[index].vectors["xid_errors"] == {}
        assert gpu[index].values["last_xid"] == 0


def test_an_xid_burst_on_the_scenario_timeline_is_heard() -> None:
    clock = ManualClock()
    with collecting("faulty", clock) as (_, collector):
        collector.collect()
        clock.advance(4.0)  # 5 x XID 13 on GPU 0 from 3 s, 0.2 s apart
        collection = wait_for(collector, lambda c: by_index(c)[0].vectors["xid_errors"].get("13") == 5.0)
    assert by_index(collection)[0].vectors["xid_errors"] == {"13": 5.0}
    assert by_index(collection)[0].values["last_xid"] == 13


def test_close_stops_the_xid_thread_and_shuts_nvml_down() -> None:
    clock = ManualClock()
    with collecting("h100x8", clock) as (sim, collector):
        collector.collect()
        assert any(t.name == "gpu-pulse-xid" for t in threading.enumerate())
        collector.close()
        assert not any(t.name == "gpu-pulse-xid" for t in threading.enumerate())
        assert not sim.initialized
        assert sim.call_counts["nvmlEventSetFree"] == 1
        collector.close()  # twice is harmless


# ---- no NVML at all -----------------------------------------------------------------------------------------------


def test_a_host_without_the_driver_is_served_not_ready_with_a_reason() -> None:
    sim = Simulator("h100x8")
    sim.fail_init()  # DRIVER_NOT_LOADED, as without the kernel module
    with install(sim):
        collector = NvmlCollector(pynvml)
        collector.start()  # no exception: the exporter serves and says why
        collection = collector.collect()
        collector.close()
    assert collection.devices == ()
    assert collection.nvml is not None and not collection.nvml.up
    assert collection.nvml.error == "DRIVER_NOT_LOADED"
    assert "kernel module is not loaded" in collection.nvml.reason
    assert not {s.name: s for s in collection.statuses}["nvml"].success


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this host has a real libnvidia-ml")
def test_a_host_without_libnvidia_ml_is_told_about_the_runtime_and_simulate() -> None:
    assert installed() is None and pynvml.nvmlLib is None
    collector = NvmlCollector(pynvml)
    collector.start()
    state = collector.nvml_state
    collector.close()
    assert state.error == "LIBRARY_NOT_FOUND"
    assert "runtimeClassName: nvidia" in state.reason and "--simulate SCENARIO" in state.reason
    assert "\n" not in state.reason


# ---- GPM, best effort ---------------------------------------------------------------------------------------------


def test_gpm_refused_by_a_gpu_is_switched_off_for_good() -> None:
    clock = ManualClock()
    with collecting(_one_gpu(errors={"nvmlGpmSampleGet": "NOT_SUPPORTED"}), clock) as (sim, collector):
        for _ in range(3):
            collection = collector.collect()
            clock.advance(1.0)
        assert sim.call_counts["nvmlGpmSampleGet"] == 1
    (gpu,) = collection.devices
    assert gpu.up
    assert not {"sm_active", "tensor_active", "dram_active", "gr_engine_active"} & gpu.values.keys()
    assert "gpu_util" in gpu.values
    assert gpu.errors == {}
    assert {s.name: s.success for s in collection.statuses}["gpm"]


def test_a_gpm_metric_the_gpu_cannot_give_is_absent_alone() -> None:
    clock = ManualClock()
    with collecting(_one_gpu(errors={"gpm:5": "NOT_SUPPORTED"}), clock) as (_, collector):
        collector.collect()
        clock.advance(1.0)
        (gpu,) = collector.collect().devices
    assert "tensor_active" not in gpu.values
    assert {"sm_active", "dram_active", "gr_engine_active"} <= gpu.values.keys()


# ---- older drivers ------------------------------------------------------------------------------------------------


def test_a_function_an_old_driver_lacks_is_treated_as_not_supported() -> None:
    clock = ManualClock()
    scenario = build_scenario(
        {
            "name": "old-driver",
            "missing_functions": ["nvmlDeviceGetPcieThroughput", "nvmlGpmQueryDeviceSupport"],
            "gpus": [{"model": "H100-SXM5-80GB"}],
        }
    )
    with collecting(scenario, clock) as (_, collector):
        collector.collect()
        clock.advance(1.0)
        (gpu,) = collector.collect().devices
    assert gpu.up
    assert not {"pcie_tx", "pcie_rx", "sm_active"} & gpu.values.keys()
    assert {"gpu_util", "fb_used", "memory_temp"} <= gpu.values.keys()
    assert gpu.errors == {}


def test_clock_event_reasons_fall_back_to_the_old_throttle_reasons_call() -> None:
    clock = ManualClock()
    scenario = build_scenario(
        {
            "name": "r530",
            "missing_functions": ["nvmlDeviceGetCurrentClocksEventReasons"],
            "gpus": [{"model": "H100-SXM5-80GB"}],  # idle: the GPU_IDLE reason is set
        }
    )
    with collecting(scenario, clock) as (_, collector):
        (gpu,) = collector.collect().devices
    assert gpu.values["clock_event_reasons"] == pynvml.nvmlClocksEventReasonGpuIdle


def test_a_mig_profile_is_read_from_the_attributes_when_the_name_does_not_carry_it() -> None:
    clock = ManualClock()
    scenario = build_scenario(
        {
            "name": "plain-mig-names",
            "gpus": [
                {
                    "model": "A100-SXM4-40GB",
                    "mig_names": "plain",
                    "mig": [{"profile": "3g.20gb"}, {"profile": "1g.5gb"}],
                }
            ],
        }
    )
    with collecting(scenario, clock) as (_, collector):
        collection = collector.collect()
    assert [d.identity.profile for d in collection.devices if isinstance(d.identity, MigIdentity)] == [
        "3g.20gb",
        "1g.5gb",
    ]


# ---- hung calls ---------------------------------------------------------------------------------------------------


def _two_gpus() -> Any:
    return build_scenario({"gpus": [{"model": "H100-SXM5-80GB", "count": 2, "load": {"baseline": 50}}]}, seed=3)


def test_a_hung_call_on_one_gpu_does_not_stall_the_others(caplog: pytest.LogCaptureFixture) -> None:
    """dcgm-exporter issue 164: one GPU's hung NVML call must not leave the healthy GPUs stale."""
    clock = ManualClock()
    with (
        caplog.at_level(logging.WARNING, logger="exporter.nvml"),
        collecting(_two_gpus(), clock, slow_call_seconds=0.2) as (sim, collector),
    ):
        collector.collect()
        sim.set_slow_call(0, "nvmlDeviceGetPowerUsage", 600.0)  # hangs
        clock.advance(1.0)
        first = collector.collect()
        sim.set_load(1, 90)
        clock.advance(1.0)
        second = collector.collect()
        calls_while_hung = sim.call_counts["nvmlDeviceGetPowerUsage"]
        clock.advance(1.0)
        third = collector.collect()
        assert sim.call_counts["nvmlDeviceGetPowerUsage"] == calls_while_hung + 1, "only GPU 1 is asked again"
        sim.set_slow_call(0, "nvmlDeviceGetPowerUsage", None)  # the driver call returns
        clock.advance(1.0)
        after = wait_for(collector, lambda c: by_index(c)[0].up)
    for collection in (first, second, third):
        hung, healthy = by_index(collection)[0], by_index(collection)[1]
        assert not hung.up and hung.values == {}
        assert hung.stalled is not None and hung.stalled.call == "power_usage"
        assert healthy.up and "power_usage" in healthy.values
        assert {s.name: s for s in collection.statuses}["nvml"].success
    assert by_index(second)[1].values["gpu_util"] == 90, "GPU 1 is read afresh every cycle"
    assert by_index(third)[0].stalled is not None and by_index(third)[0].stalled.seconds == 2.0
    assert by_index(after)[0].stalled is None and "power_usage" in by_index(after)[0].values
    messages = [r.getMessage() for r in caplog.records]
    assert sum("has not returned" in m and "power_usage" in m for m in messages) == 1, "logged once per hang"
    assert any("returned after" in m for m in messages)


def test_a_slow_call_within_the_bound_is_waited_for() -> None:
    clock = ManualClock()
    with collecting(_two_gpus(), clock, slow_call_seconds=30.0) as (sim, collector):
        sim.set_slow_call(0, "nvmlDeviceGetTemperature", 0.05)
        collection = collector.collect()
    assert all(d.up and d.stalled is None for d in collection.devices)


# ---- MIG without the monitor privilege --------------------------------------------------------------------------


def _a100_mig(privileged: bool) -> Any:
    from simulation.loader import load_scenario

    return load_scenario("a100-mig").model_copy(update={"mig_monitor_privilege": privileged})


def test_without_the_mig_monitor_privilege_the_instances_are_served_and_the_gap_is_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """nvml.h: aggregate figures of a MIG-enabled GPU's own handle, and XIDs of single instances, need the privilege."""
    clock = ManualClock()
    with (
        caplog.at_level(logging.WARNING, logger="exporter.nvml"),
        collecting(_a100_mig(False), clock) as (sim, collector),
    ):
        collector.collect()
        sim.inject_xid(0, 31, mig=0)  # an instance's XID: never arrives
        sim.inject_xid(0, 48)  # a whole-device XID: arrives
        collection = wait_for(collector, lambda c: by_index(c)[0].values.get("last_xid") == 48)
    parent = by_index(collection)[0]
    assert "fb_used" not in parent.values
    assert parent.unavailable["fb_used"] == "needs_mig_monitor_privilege"
    assert parent.unavailable["mig_instance_xids"] == "needs_mig_monitor_privilege"
    assert parent.vectors["xid_errors"] == {"48": 1.0}
    instances = [d for d in collection.devices if d.is_mig and d.gpu.index == 0]
    assert instances and all("fb_used" in d.values and d.processes is not None for d in instances)
    warned = [r.getMessage() for r in caplog.records if "MIG monitor privilege" in r.getMessage()]
    assert sum(m.startswith("GPU 0 ") for m in warned) == 1, "once per GPU"


def test_with_the_mig_monitor_privilege_an_instances_xid_is_heard() -> None:
    clock = ManualClock()
    with collecting(_a100_mig(True), clock) as (sim, collector):
        collector.collect()
        sim.inject_xid(0, 31, mig=1)
        collection = wait_for(collector, lambda c: by_index(c)[0].values.get("last_xid") == 31)
    parent = by_index(collection)[0]
    assert parent.vectors["xid_errors"] == {"31": 1.0}
    assert "fb_used" in parent.values and "mig_instance_xids" not in parent.unavailable
