"""The collector through the driver's life cycle, on the simulator's timeline: a driver that is not there yet, a
driver upgraded without reloading its modules, the driver held while the exporter runs and let go when it stops,
GPUs bound at run time, and a lost GPU counted as XID 79 on every driver branch."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter.catalogue import Dialect
from exporter.collection import DeviceCollection
from exporter.exposition import ExpositionRenderer
from exporter.loop import PollLoop
from exporter.nvml import NvmlCollector
from exporter.nvml.availability import DriverFiles, library_version, module_version
from exporter.snapshot import DeviceReading, GpuIdentity
from simulation import Simulator, build_scenario, install
from tests.exporter.collecting import collecting
from tests.support.clocks import ManualClock
from toolkit.backoff import Backoff

PINNED = {"driver_backoff": Backoff(initial=1.0, maximum=8.0), "draw": lambda: 1.0}  # delays 1, 2, 4, 8, 8, ...


def two_h100(**fields: Any) -> Any:
    return build_scenario({"gpus": [{"model": "H100-SXM5-80GB", "count": 2}], **fields}, seed=4)


def gpus(collection: DeviceCollection) -> list[DeviceReading]:
    return [d for d in collection.devices if isinstance(d.identity, GpuIdentity)]


def init_calls(sim: Simulator) -> int:
    return sim.call_counts.get("nvmlInitWithFlags", 0)


def test_an_exporter_started_before_the_driver_waits_with_backoff_and_recovers_without_a_restart() -> None:
    clock = ManualClock()
    scenario = two_h100(driver_loaded=False, timeline=[{"at": 20, "action": "load_driver"}])
    with collecting(scenario, clock, **PINNED) as (sim, collector):
        first = collector.collect()
        attempts = {}
        for t in (0.5, 1.0, 2.0, 3.0, 7.0, 15.0, 22.0, 23.0):
            clock.at(t)
            last = collector.collect()
            attempts[t] = init_calls(sim)
        assert first.devices == () and first.nvml is not None and first.nvml.error == "DRIVER_NOT_LOADED"
        assert "driver container has not finished installing it" in first.nvml.reason
        # tried at 0 (start), 1, 3, 7, 15 and 23: backoff, not once per cycle
        assert attempts == {0.5: 1, 1.0: 2, 2.0: 2, 3.0: 3, 7.0: 4, 15.0: 5, 22.0: 5, 23.0: 6}
        assert last.nvml is not None and last.nvml.up
        assert [g.up for g in gpus(last)] == [True, True]


def test_after_a_long_wait_for_the_driver_the_exporter_serves_within_half_a_minute_of_its_load() -> None:
    """A driver upgrade (k8s-driver-manager hands the node back once the old modules are unloaded; the driver
    container loads the new ones minutes later): the exporter's own wait, with its default backoff at the longest
    jittered delay, sees the new driver within 30 s of its load, so it serves within a minute of the toolkit's
    validation, which comes after the load."""
    clock = ManualClock()
    scenario = two_h100(driver_loaded=False, timeline=[{"at": 964, "action": "load_driver"}])
    with collecting(scenario, clock, draw=lambda: 1.0) as (_, collector):
        collector.collect()
        served_at = None
        for t in range(1, 1100):
            clock.at(float(t))
            if gpus(collector.collect()):
                served_at = t
                break
    assert served_at is not None and 964 <= served_at <= 964 + 30


def test_a_driver_upgraded_without_reloading_its_modules_says_so_and_names_the_fix(tmp_path: Path) -> None:
    version_file = tmp_path / "version"
    version_file.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Feb 20 13:35:21 UTC 2024\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
    )
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0c2a000000-7f0c2a200000 r-xp 00000000 fd:01 1311 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15\n"
    )
    clock = ManualClock()
    scenario = two_h100(
        driver_version="570.86.15",
        kernel_module_version="550.54.15",
        timeline=[{"at": 30, "action": "unload_driver"}, {"at": 30, "action": "load_driver"}],
    )
    files = DriverFiles(module_version=version_file, process_maps=maps)
    with collecting(scenario, clock, driver_files=files, **PINNED) as (sim, collector):
        down = collector.collect().nvml
        clock.at(31.0)
        up = collector.collect()
        del sim
    assert down is not None and down.error == "LIB_RM_VERSION_MISMATCH"
    assert "(kernel module 550.54.15, NVML library 570.86.15)" in down.reason
    assert "reboot the node" in down.reason and "restart this pod" in down.reason
    assert "is the NVIDIA driver installed" not in down.reason
    assert up.nvml is not None and up.nvml.up and len(gpus(up)) == 2


@given(
    st.from_regex(r"\d{3}\.\d{2,3}(\.\d{2})?", fullmatch=True),
    st.sampled_from(["NVIDIA UNIX x86_64 Kernel Module", "NVIDIA UNIX Open Kernel Module for x86_64"]),
)
def test_the_version_files_are_read_as_the_driver_writes_them(version: str, kind: str) -> None:
    assert module_version(f"NVRM version: {kind}  {version}  Release Build  (builder)  Tue Feb 20 2024\n") == version
    maps = f"7f00-7f01 r-xp 0 fd:01 13 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{version}\n"
    assert library_version("7e00-7e01 r-xp 0 fd:01 12 /usr/lib/libc.so.6\n" + maps) == version
    assert library_version("7e00-7e01 r-xp 0 fd:01 12 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\n") is None
    assert module_version("garbage") is None


def test_the_running_exporter_holds_the_driver_until_it_stops() -> None:
    """Why gpu-pulse must be paused for a driver upgrade: the driver manager's unload fails while the exporter has
    NVML open, and goes through once the exporter stops (SIGTERM closes the collector: nvmlShutdown)."""
    clock = ManualClock()
    scenario = two_h100(timeline=[{"at": 5, "action": "unload_driver", "retry_every_s": 5}])
    with collecting(scenario, clock) as (sim, collector):
        collector.collect()
        clock.at(6.0)
        assert collector.collect().nvml is not None
        assert [(r.what, r.reason) for r in sim.lifecycle.refusals] == [("unload_driver", "driver is in use")]
    clock.at(10.0)
    sim.elapsed()  # the driver manager's next try, after the exporter stopped
    assert sim.lifecycle.module_version is None
    assert len(sim.lifecycle.refusals) == 1


def test_a_gpu_bound_at_run_time_is_picked_up_at_the_next_enumeration_check(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    scenario = build_scenario(
        {
            "gpus": [{"model": "H100-SXM5-80GB"}, {"model": "H100-SXM5-80GB", "bound": False}, {"model": "L4"}],
            "timeline": [{"at": 5, "action": "bind_gpu", "gpu": 1}],
        },
        seed=4,
    )
    uuids = [g.uuid for g in scenario.gpus]
    with (
        caplog.at_level(logging.WARNING, logger="exporter.nvml"),
        collecting(scenario, clock, layout_check_seconds=10.0) as (_, collector),
    ):
        before = gpus(collector.collect())
        clock.at(6.0)
        early = gpus(collector.collect())
        clock.at(10.0)
        after = gpus(collector.collect())
    assert [(g.gpu.index, g.uuid) for g in before] == [(0, uuids[0]), (1, uuids[2])]
    assert [g.uuid for g in early] == [uuids[0], uuids[2]], "checked every 10 s"
    assert [(g.gpu.index, g.uuid, g.up) for g in after] == [(i, uuid, True) for i, uuid in enumerate(uuids)]
    assert any("enumerates 3 GPU(s) now, not 2" in r.getMessage() for r in caplog.records)


def _lost_gpu_xids(version: str, busy: bool, expected: float) -> tuple[dict[str, float], float]:
    """(xid_errors, last_xid) of GPU 1 after it fell off the bus, on a driver of `version`, once the XID 79 count
    reached `expected` (or after 5 s of scenario time: a count that stays short fails the test)."""
    clock = ManualClock()
    processes = [{"pid": 900, "gpu": 1, "memory_mib": 100}, {"pid": 901, "gpu": 1, "memory_mib": 100}]
    scenario = two_h100(driver_version=version, processes=processes if busy else [])
    with collecting(scenario, clock, xid_wait_ms=20) as (sim, collector):
        collector.collect()
        sim.lose_gpu(1)
        lost = gpus(collector.collect())[1]
        for _ in range(50):  # the XID thread may still be taking in the events
            clock.advance(0.1)
            lost = gpus(collector.collect())[1]
            if lost.vectors.get("xid_errors", {}).get("79", 0) >= expected:
                break
    assert not lost.up
    return dict(lost.vectors["xid_errors"]), lost.values["last_xid"]


@pytest.mark.parametrize(
    ("version", "busy", "count"),
    [
        ("550.54.15", True, 1.0),  # no event: counted from GPU_IS_LOST
        ("560.35.03", False, 1.0),  # one XID 79 event for the GPU, and GPU_IS_LOST: the same loss
        ("570.86.15", False, 1.0),  # the GPU-unavailable event only (no channel on an idle GPU): from GPU_IS_LOST
        ("570.86.15", True, 2.0),  # one XID 79 per running channel: the count is theirs, not one more
    ],
)
def test_a_lost_gpu_is_xid_79_on_every_driver_branch(version: str, busy: bool, count: float) -> None:
    xids, last = _lost_gpu_xids(version, busy, count)
    assert xids == {"79": count}
    assert last == 79


def test_without_nvml_the_loop_is_not_ready_says_why_and_exposes_nvml_up_0() -> None:
    clock = ManualClock()
    with install(Simulator(two_h100(driver_loaded=False), clock=clock)):
        collector = NvmlCollector(pynvml, clock=clock, wall_clock=clock)
        collector.start()
        try:
            renderer = ExpositionRenderer(Dialect.PROMETHEUS, interval_seconds=1.0, version="test")
            loop = PollLoop(collector, renderer, interval=1.0, node="n", monotonic=clock)
            published = loop.poll_once()
            readiness = loop.readiness()
        finally:
            collector.close()
    assert published is not None
    assert not readiness.ready and readiness.reason.startswith("NVML is not usable: the NVIDIA kernel module")
    families = text_string_to_metric_families(published.text.decode())
    samples = {s.name: s.value for f in families for s in f.samples if not s.labels}
    assert samples["gpu_pulse_nvml_up"] == 0
    assert "nvidia_gpu_up" not in published.text.decode()
