"""The real NvmlCollector on the real pynvml over the NVML simulator: values, units, MIG, processes, GPM, history."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pynvml
import pytest

from exporter.collection import DeviceCollection
from exporter.nvml import NvmlCollector
from exporter.snapshot import DeviceReading, GpuIdentity, MigIdentity
from simulation import install
from simulation.hardware import GPU_MODELS
from tests.exporter.collecting import collecting
from tests.support.clocks import ManualClock
from tests.support.waiting import holds_within

MIB = 1024 * 1024


def gpus(collection: DeviceCollection) -> list[DeviceReading]:
    return [d for d in collection.devices if not d.is_mig]


def migs(collection: DeviceCollection) -> list[DeviceReading]:
    return [d for d in collection.devices if d.is_mig]


# Fields NVML may leave untyped, as DCGM reads them (NVIDIA/DCGM DcgmCacheManager.cpp: ECC as unsigned long long,
# "WAR for NVML Bug 2032468"; memory temperature as unsigned int, "nvbugs/4300930")
_UNTYPED: dict[int, Callable[[Any], int]] = {
    **{f: (lambda v: v.ullVal) for f in range(1, 29)},
    pynvml.NVML_FI_DEV_MEMORY_TEMP: lambda v: v.uiVal,
}


# An oracle per catalogue key: the same figure asked of NVML another way (another call, or one field at a time),
# in the unit the catalogue names for the snapshot.
def _field(field_id: int, scope: int = 0) -> Callable[[Any], float]:
    def read(handle: Any) -> float:
        (entry,) = pynvml.nvmlDeviceGetFieldValues(handle, [(field_id, scope)])
        assert entry.nvmlReturn == pynvml.NVML_SUCCESS
        if field_id in _UNTYPED:  # DCGM's reading of what NVML may leave untyped (DcgmCacheManager.cpp)
            return float(_UNTYPED[field_id](entry.value))
        return float(entry.value.ullVal if entry.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG else
                     entry.value.uiVal if entry.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT else
                     entry.value.sllVal if entry.valueType == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG else
                     entry.value.dVal)  # fmt: skip

    return read


def _nvlink(field_id: int) -> Callable[[Any], float]:
    def read(handle: Any) -> float:  # the sum of the per-link counters
        links = int(_field(pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT)(handle))
        return sum(_field(field_id, link)(handle) for link in range(links))

    return read


def _memory(handle: Any) -> Any:
    return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)


ORACLE: dict[str, Callable[[Any], float]] = {
    "gpu_util": lambda h: pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
    "mem_copy_util": lambda h: pynvml.nvmlDeviceGetUtilizationRates(h).memory,
    "enc_util": lambda h: pynvml.nvmlDeviceGetEncoderUtilization(h)[0],
    "dec_util": lambda h: pynvml.nvmlDeviceGetDecoderUtilization(h)[0],
    "fb_used": lambda h: _memory(h).used,
    "fb_free": lambda h: _memory(h).free,
    "fb_reserved": lambda h: _memory(h).reserved,
    "fb_total": lambda h: _memory(h).total,
    "gpu_temp": lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
    "memory_temp": _field(pynvml.NVML_FI_DEV_MEMORY_TEMP),
    "power_usage": lambda h: pynvml.nvmlDeviceGetPowerUsage(h),
    "power_limit": lambda h: pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
    "power_management_limit": lambda h: pynvml.nvmlDeviceGetPowerManagementLimit(h),
    "total_energy": lambda h: pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
    "sm_clock": lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
    "mem_clock": lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
    "pstate": lambda h: pynvml.nvmlDeviceGetPerformanceState(h),
    "clock_event_reasons": lambda h: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h),
    "pcie_tx": lambda h: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
    "pcie_rx": lambda h: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES),
    "pcie_replay": lambda h: pynvml.nvmlDeviceGetPcieReplayCounter(h),
    "ecc_sbe_volatile": _field(pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL),
    "ecc_dbe_volatile": _field(pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL),
    "remapped_rows_correctable": _field(pynvml.NVML_FI_DEV_REMAPPED_COR),
    "remapped_rows_uncorrectable": _field(pynvml.NVML_FI_DEV_REMAPPED_UNC),
    "row_remap_pending": _field(pynvml.NVML_FI_DEV_REMAPPED_PENDING),
    "row_remap_failure": _field(pynvml.NVML_FI_DEV_REMAPPED_FAILURE),
    "nvlink_tx": _nvlink(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX),
    "nvlink_rx": _nvlink(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX),
    "ecc_sbe_aggregate": _field(pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL),
    "ecc_dbe_aggregate": _field(pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL),
    "retired_pages_sbe": _field(pynvml.NVML_FI_DEV_RETIRED_SBE),
    "retired_pages_dbe": _field(pynvml.NVML_FI_DEV_RETIRED_DBE),
    "retired_pages_pending": _field(pynvml.NVML_FI_DEV_RETIRED_PENDING),
    "nvlink_crc_flit_errors": _field(pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL),
    "nvlink_crc_data_errors": _field(pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL),
    "nvlink_replay_errors": _field(pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL),
    "nvlink_recovery_errors": _field(pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL),
    "power_violation": _field(pynvml.NVML_FI_DEV_PERF_POLICY_POWER),
    "thermal_violation": _field(pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL),
    "sync_boost_violation": _field(pynvml.NVML_FI_DEV_PERF_POLICY_SYNC_BOOST),
    "board_limit_violation": _field(pynvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT),
    "low_util_violation": _field(pynvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION),
    "reliability_violation": _field(pynvml.NVML_FI_DEV_PERF_POLICY_RELIABILITY),
    "slowdown_temp": lambda h: pynvml.nvmlDeviceGetTemperatureThreshold(h, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
    "shutdown_temp": lambda h: pynvml.nvmlDeviceGetTemperatureThreshold(h, pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
    "max_operating_temp": lambda h: pynvml.nvmlDeviceGetTemperatureThreshold(
        h, pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX
    ),
    "vgpu_license_status": lambda h: pynvml.nvmlDeviceGetGridLicensableFeatures(h).isGridLicenseSupported,
}
GPM_KEYS = {
    "gr_engine_active",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
    "fp64_active",
    "fp32_active",
    "fp16_active",
}
XID_KEYS = {"last_xid"}


@pytest.mark.parametrize("scenario", ["h100x8", "a100-mig", "shared", "faulty"])
def test_every_value_is_what_nvml_says_in_the_native_unit(scenario: str) -> None:
    clock = ManualClock()
    with collecting(scenario, clock) as (_, collector):
        collection = collector.collect()  # the clock stands still: NVML would answer the same now
        for reading in gpus(collection):
            handle = pynvml.nvmlDeviceGetHandleByUUID(reading.uuid)
            assert reading.up
            for key, value in reading.values.items():
                if key in GPM_KEYS | XID_KEYS:
                    continue
                if key == "nvlink_total":
                    expected = 0.0  # a rate: DCGM's first reading is 0, and so is ours
                else:
                    expected = float(ORACLE[key](handle))
                assert value == expected, f"{scenario} GPU {reading.gpu.index} {key}"
            # what every board of these scenarios can give is there
            must = {"fb_used", "fb_free", "fb_total", "gpu_temp", "power_usage", "total_energy", "sm_clock", "pstate"}
            assert must <= reading.values.keys()


def test_units_are_nvml_native_bytes_milliwatts_megahertz_and_millijoules() -> None:
    clock = ManualClock()
    with collecting("h100x8", clock) as (_, collector):
        model = GPU_MODELS["H100-SXM5-80GB"]
        first = gpus(collector.collect())[0].values
        clock.advance(10.0)
        second = gpus(collector.collect())[0].values
    assert first["fb_total"] == model.memory_total_mib * MIB  # bytes, not MiB
    assert first["power_limit"] == model.power_limit_mw  # milliwatts, not watts
    assert model.idle_sm_clock_mhz <= first["sm_clock"] <= model.max_sm_clock_mhz  # MHz
    assert 0 < first["gpu_util"] <= 100  # percent
    # energy is a millijoule counter: over 10 s it grows by about (mean power in mW) x 10 s
    grown = second["total_energy"] - first["total_energy"]
    mean_power_mw = (first["power_usage"] + second["power_usage"]) / 2
    assert 0.8 < grown / (mean_power_mw * 10) < 1.25
    assert 0 < second["pcie_tx"] <= model.pcie_max_kb_per_s  # KB/s (from GPM: from the second cycle on)
    # NVLink as DCGM publishes it: the rate of the tx + rx counters between two readings, KiB/s
    moved = (second["nvlink_tx"] + second["nvlink_rx"]) - (first["nvlink_tx"] + first["nvlink_rx"])
    assert first["nvlink_total"] == 0
    assert second["nvlink_total"] == pytest.approx(moved / 10.0)


def test_identity_is_read_once_with_every_detail() -> None:
    clock = ManualClock()
    with collecting("h100x8", clock) as (sim, collector):
        readings = gpus(collector.collect())
        calls_before = sim.call_counts.get("nvmlDeviceGetUUID", 0)
        collector.collect()
        assert sim.call_counts.get("nvmlDeviceGetUUID", 0) == calls_before  # no per-cycle re-discovery
        assert sim.call_counts["nvmlDeviceGetHandleByIndex_v2"] == 8
    assert [r.gpu.index for r in readings] == list(range(8))
    spec = sim.scenario
    for reading, gpu in zip(readings, spec.gpus, strict=True):
        ident = reading.identity
        assert isinstance(ident, GpuIdentity)
        assert ident.uuid == gpu.uuid
        assert ident.serial == gpu.serial
        assert ident.pci_bus_id == gpu.pci_bus_id
        assert ident.model == "NVIDIA H100 80GB HBM3"
        assert ident.minor_number == reading.gpu.index
        assert ident.driver_version == "550.54.15"
        assert ident.cuda_driver_version == "12.4"
        assert ident.vbios_version == GPU_MODELS["H100-SXM5-80GB"].vbios_version
        assert ident.mig_enabled is False


def test_mig_instances_are_found_in_every_slot_with_their_profile_and_ids() -> None:
    clock = ManualClock()
    with collecting("a100-mig", clock) as (sim, collector):
        collection = collector.collect()
    spec = sim.scenario
    devices = collection.devices
    # GPUs first by index, each GPU's MIG instances right after it
    assert [d.uuid for d in devices] == [
        uuid for gpu in spec.gpus for uuid in (gpu.uuid, *(m.uuid for m in gpu.mig or ()))
    ]
    for parent in gpus(collection):
        assert parent.gpu.mig_enabled
        assert "gpu_util" not in parent.values  # NOT_SUPPORTED in MIG mode: absent, not zero
        assert parent.processes == ()  # listed per instance instead
    found = {d.uuid: d for d in migs(collection)}
    for gpu in spec.gpus:
        for mig in gpu.mig or ():
            assert mig.uuid is not None
            reading = found[mig.uuid]
            ident = reading.identity
            assert isinstance(ident, MigIdentity)
            assert ident.parent.uuid == gpu.uuid
            assert ident.index == mig.index  # the second GPU's slots are 0, 1, 3: probed past the hole
            assert ident.profile == mig.profile
            assert ident.gpu_instance_id == mig.gpu_instance_id
            assert ident.compute_instance_id == mig.compute_instance_id
            profile = GPU_MODELS["A100-SXM4-40GB"].mig_profiles[mig.profile]
            assert reading.values["fb_total"] == profile.memory_mib * MIB
            assert reading.values["fb_used"] + reading.values["fb_free"] <= reading.values["fb_total"]
            assert set(reading.values) == {"fb_used", "fb_free", "fb_reserved", "fb_total"}  # no GPM on A100


def test_mig_instances_carry_their_own_processes() -> None:
    clock = ManualClock()
    with collecting("a100-mig", clock) as (sim, collector):
        collection = collector.collect()
    spec = sim.scenario
    by_uuid = {d.uuid: d for d in migs(collection)}
    for process in spec.processes:
        gpu = spec.gpus[process.gpu]
        mig = next(m for m in gpu.mig or () if m.index == process.mig)
        assert mig.uuid is not None
        (usage,) = [p for p in by_uuid[mig.uuid].processes if p.pid == process.pid]
        assert usage.used_memory_bytes == round(process.memory_mib * MIB)
        assert usage.gpu_instance_id == mig.gpu_instance_id
        assert usage.compute_instance_id == mig.compute_instance_id
        assert usage.sm_util_percent is None  # per-process utilization is NOT_SUPPORTED under MIG


def test_processes_of_a_shared_gpu_come_with_their_utilization() -> None:
    clock = ManualClock()
    with collecting("shared", clock) as (sim, collector):
        collector.collect()
        clock.advance(1.0)
        collection = collector.collect()
    spec = sim.scenario
    for reading in gpus(collection):
        index = reading.gpu.index
        expected_pids = {p.pid for p in spec.processes if p.gpu == index}
        assert {p.pid for p in reading.processes} == expected_pids
        for usage in reading.processes:
            assert usage.sm_util_percent is not None
            assert usage.memory_util_percent is not None
            assert usage.used_memory_bytes is not None and usage.used_memory_bytes > 0
            assert usage.gpu_instance_id is None  # not MIG
        # per tick, the processes' shares add up to the GPU's utilization
        total = sum(p.sm_util_percent or 0.0 for p in reading.processes)
        assert total == pytest.approx(reading.values["gpu_util"], abs=len(reading.processes))


def test_process_utilization_follows_the_load_of_each_process() -> None:
    clock = ManualClock()
    with collecting("shared", clock) as (sim, collector):
        collector.collect()
        sim.set_load("team-a/train-small-0", 30)  # this pod's process now runs at 30 %
        for _ in range(3):
            clock.advance(1.0)
            collection = collector.collect()
        (gpu0, _) = gpus(collection)
        # the newest sample of each process, asked of NVML directly
        samples = pynvml.nvmlDeviceGetProcessUtilization(pynvml.nvmlDeviceGetHandleByUUID(gpu0.uuid), 0)
    newest = max(s.timeStamp for s in samples)
    latest = {s.pid: s.smUtil for s in samples if s.timeStamp == newest}
    # one new sample per 1 s cycle; a running process without one was idle in it
    assert {p.pid: p.sm_util_percent for p in gpu0.processes} == {p.pid: latest.get(p.pid, 0) for p in gpu0.processes}
    pid = sim.scenario.pods[0].containers[0].pids[0]
    assert latest[pid] == pytest.approx(30, abs=1)


def _two_processes(second_load: float) -> Any:
    from simulation import build_scenario

    return build_scenario(
        {
            "gpus": [{"model": "H100-SXM5-80GB"}],
            "processes": [
                {"pid": 101, "gpu": 0, "memory_mib": 100, "load": {"baseline": 60}},
                {"pid": 102, "gpu": 0, "memory_mib": 100, "load": {"baseline": second_load}},
            ],
        },
        seed=1,
    )


def test_a_running_process_without_a_sample_is_idle_not_unknown() -> None:
    """NVML samples only processes busy in the period: the other running ones were at 0 %."""
    clock = ManualClock()
    with collecting(_two_processes(0), clock) as (_, collector):
        collector.collect()
        clock.advance(1.0)
        (gpu,) = gpus(collector.collect())
    by_pid = {p.pid: p.sm_util_percent for p in gpu.processes}
    assert by_pid == {101: 60.0, 102: 0.0}


def test_a_process_that_goes_idle_drops_to_zero_at_once() -> None:
    """Its last busy figure is not held while the other process's samples show the period was sampled."""
    clock = ManualClock()
    with collecting(_two_processes(30), clock) as (sim, collector):
        collector.collect()
        clock.advance(1.0)
        (gpu,) = gpus(collector.collect())
        assert {p.pid: p.sm_util_percent for p in gpu.processes} == {101: 60.0, 102: 30.0}
        sim.node.gpus[0].domain.override_pid(102, 0.0)  # type: ignore[union-attr]
        clock.advance(1.0)
        (gpu,) = gpus(collector.collect())
    assert {p.pid: p.sm_util_percent for p in gpu.processes} == {101: 60.0, 102: 0.0}


def test_a_device_with_no_sample_for_long_has_unknown_process_figures() -> None:
    clock = ManualClock()
    with collecting(_two_processes(30), clock, interval_seconds=1.0) as (sim, collector):
        collector.collect()
        sim.set_load(0, 0)
        for _ in range(6):  # no valid sample at all from here on: the held figures expire after 3 s
            clock.advance(1.0)
            (gpu,) = gpus(collector.collect())
    assert [p.sm_util_percent for p in gpu.processes] == [None, None]


def test_gpm_activity_on_h100_follows_the_load() -> None:
    clock = ManualClock()
    with collecting("h100x8", clock) as (sim, collector):
        sim.set_load(0, 37.0)
        clock.advance(1.0)  # the simulated load changes on its 1 s grid
        first = gpus(collector.collect())
        assert not GPM_KEYS & first[0].values.keys()  # one sample is no activity yet
        clock.advance(1.0)
        second = gpus(collector.collect())
    busy, idle = second[0].values, second[7].values
    assert busy["gr_engine_active"] == pytest.approx(37.0, abs=0.5)
    assert 0 < busy["tensor_active"] <= busy["sm_active"] <= 100
    assert 0 < busy["dram_active"] <= 100
    assert idle["gr_engine_active"] == pytest.approx(0.0, abs=0.5)


def test_gpm_samples_closer_than_100_ms_report_the_previous_activity() -> None:
    clock = ManualClock()
    with collecting("h100x8", clock) as (sim, collector):
        collector.collect()
        clock.advance(1.0)
        before = gpus(collector.collect())[0].values["sm_active"]
        samples = sim.call_counts["nvmlGpmSampleGet"]
        clock.advance(0.05)
        after = gpus(collector.collect())[0].values["sm_active"]
        assert sim.call_counts["nvmlGpmSampleGet"] == samples  # no new sample
    assert after == before


def test_gpm_is_off_on_a100() -> None:
    clock = ManualClock()
    with collecting("a100-mig", clock) as (sim, collector):
        collector.collect()
        clock.advance(1.0)
        collection = collector.collect()
        assert sim.call_counts.get("nvmlGpmSampleGet", 0) == 0
        assert sim.call_counts.get("nvmlGpmMigSampleGet", 0) == 0
    for reading in collection.devices:
        assert not GPM_KEYS & reading.values.keys()


def test_gpm_activity_per_mig_instance_on_h100() -> None:
    clock = ManualClock()
    with collecting("h100-mig", clock) as (_, collector):
        collector.collect()
        clock.advance(1.0)
        collection = collector.collect()
    instances = migs(collection)
    assert len(instances) == 56
    for reading in instances:
        assert GPM_KEYS <= reading.values.keys()
        assert all(0 <= reading.values[key] <= 100 for key in GPM_KEYS)


def test_only_selected_measurements_are_read_and_reported() -> None:
    clock = ManualClock()
    with collecting("h100x8", clock, enabled={"fb_used", "nvlink_total"}) as (sim, collector):
        collection = collector.collect()
        calls = sim.call_counts
    for reading in gpus(collection):
        assert set(reading.values) == {"fb_used", "nvlink_total"}
        assert reading.vectors.get("xid_errors") is None
    assert "nvmlDeviceGetPowerUsage" not in calls
    assert "nvmlEventSetCreate" not in calls  # no XID listener when no XID measurement is selected
    assert "nvmlGpmSampleGet" not in calls
    assert calls["nvmlDeviceGetFieldValues"] == 8  # one batch per GPU


def test_counters_are_read_in_one_field_values_call_per_gpu() -> None:
    clock = ManualClock()
    with collecting("h100x8", clock) as (sim, collector):
        before = sim.call_counts["nvmlDeviceGetFieldValues"] if "nvmlDeviceGetFieldValues" in sim.call_counts else 0
        collector.collect()
        assert sim.call_counts["nvmlDeviceGetFieldValues"] - before == 8


def test_pcie_throughput_is_read_off_the_poll_path_every_few_cycles() -> None:
    """Without GPM (A100): nvmlDeviceGetPcieThroughput blocks for its 20 ms window (nvml.h), twice per GPU. The first
    reading is taken in the first poll; later ones run on a thread of the GPU's own every few cycles, and a poll never
    waits for one: it reports the last finished reading."""
    clock = ManualClock()
    gate = threading.Event()
    waits: list[float] = []

    def driver_wait(seconds: float) -> None:  # the simulated driver's 20 ms, held by the test after the first poll
        waits.append(seconds)
        if len(waits) > 16:
            gate.wait(10.0)

    with collecting("a100x8", clock, sleep=driver_wait, interval_seconds=1.0, pcie_period_seconds=3.0) as (
        sim,
        collector,
    ):
        first = gpus(collector.collect())[0].values["pcie_tx"]
        assert waits == [0.020] * 16  # tx and rx of 8 GPUs, 20 ms each, in the first poll
        seen = []
        for _ in range(4):  # cycle 3 starts a background run; it blocks in the driver, the polls go on
            clock.advance(1.0)
            seen.append(gpus(collector.collect())[0].values["pcie_tx"])
        assert seen == [first] * 4, "the last finished reading is held while a run is in flight"
        clock.advance(30.0)  # the running calls will answer for this moment: another load, another figure
        gate.set()
        assert holds_within(lambda: sim.call_counts["nvmlDeviceGetPcieThroughput"] == 32 and len(waits) == 32)
        # the run's result is taken by the first poll after it finished
        assert holds_within(lambda: gpus(collector.collect())[0].values["pcie_tx"] != first)


def test_pcie_throughput_on_hopper_is_gpms_interval_mean() -> None:
    """GPM's PCIe rates are means over the interval between two samples (as dcgm-exporter's profiling fields): used
    where present, and the 20 ms snapshot call is not made at all."""
    clock = ManualClock()
    with collecting("h100x8", clock) as (sim, collector):
        first = gpus(collector.collect())[0]
        clock.advance(1.0)
        second = gpus(collector.collect())[0]
        assert "nvmlDeviceGetPcieThroughput" not in sim.call_counts
    assert "pcie_tx" not in first.values, "one GPM sample is not an interval yet"
    model = GPU_MODELS["H100-SXM5-80GB"]
    # the simulator's GPM rate for the mean load of the interval, in MiB/s, as KB/s
    assert 0.01 * model.pcie_max_kb_per_s < second.values["pcie_tx"] <= 0.09 * model.pcie_max_kb_per_s
    assert second.values["pcie_rx"] == pytest.approx(0.8 * second.values["pcie_tx"])


def test_history_keeps_utilization_and_memory_per_device() -> None:
    clock = ManualClock()
    with collecting("a100-mig", clock, interval_seconds=1.0, history_seconds=5.0) as (_, collector):
        taken = []
        for _ in range(8):
            taken.append(collector.collect())
            clock.advance(1.0)
        mig = migs(taken[-1])[0]
        gpu = gpus(taken[-1])[0]
        points = collector.history(mig.uuid, 3.5)
        everything = collector.history(mig.uuid, 3600)
        gpu_points = collector.history(gpu.uuid, 3600)
        unknown = collector.history("GPU-nope", 60)
    assert [p.at for p in points] == [taken[i].taken_at for i in (5, 6, 7)]
    assert len(everything) == 5  # bounded: 5 s at 1 s
    assert [p.memory_used_bytes for p in points] == [
        next(d for d in taken[i].devices if d.uuid == mig.uuid).values["fb_used"] for i in (5, 6, 7)
    ]
    assert all(p.utilization_percent is None for p in points)  # A100 MIG: no utilization without GPM
    assert all(p.utilization_percent is None for p in gpu_points)  # MIG-enabled parent: NOT_SUPPORTED
    assert unknown == ()


def test_history_of_a_whole_gpu_holds_its_utilization() -> None:
    clock = ManualClock()
    with collecting("h100x8", clock) as (_, collector):
        collection = collector.collect()
        gpu = gpus(collection)[0]
        (point,) = collector.history(gpu.uuid, 60)
    assert point.utilization_percent == gpu.values["gpu_util"]
    assert point.memory_used_bytes == gpu.values["fb_used"]
    assert point.at == collection.taken_at


def test_rediscovery_finds_the_same_devices_and_keeps_counting() -> None:
    clock = ManualClock()
    with collecting("a100-mig", clock) as (sim, collector):
        before = [d.uuid for d in collector.collect().devices]
        collector.rediscover()
        after = [d.uuid for d in collector.collect().devices]
        assert sim.call_counts["nvmlDeviceGetHandleByIndex_v2"] == 4  # looked up again on purpose
    assert before == after


def test_statuses_name_every_sub_collector() -> None:
    clock = ManualClock()
    with collecting("h100x8", clock) as (_, collector):
        statuses = collector.collect().statuses
    assert [s.name for s in statuses] == ["nvml", "fields", "processes", "xid", "gpm"]
    assert all(s.success for s in statuses)
    assert all(s.duration_seconds >= 0 for s in statuses)


# ---- MIG reconfiguration at run time ---------------------------------------------------------------------------------


def _a100_mig_then(mig: list[dict[str, Any]] | None, at: float = 5.0) -> Any:
    from pathlib import Path

    import yaml

    import simulation
    from simulation import build_scenario

    data = yaml.safe_load((Path(simulation.__file__).parent / "scenarios" / "a100-mig.yaml").read_text())
    data["timeline"] = [{"at": at, "action": "reconfigure_mig", "gpu": 0, "mig": mig}]
    return build_scenario(data, seed=100)


def test_new_mig_instances_are_found_without_a_restart_and_never_under_old_identities(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scenario = _a100_mig_then([{"profile": "4g.20gb"}, {"profile": "3g.20gb"}])
    new = {m.uuid: m for m in scenario.timeline[0].mig}  # type: ignore[union-attr]
    clock = ManualClock()
    with caplog.at_level(logging.WARNING, logger="exporter.nvml"), collecting(scenario, clock) as (_, collector):
        before = collector.collect()
        clock.at(6.0)
        after = collector.collect()
    old = {d.uuid for d in migs(before) if d.gpu.index == 0}
    on_gpu0 = [d for d in migs(after) if d.gpu.index == 0]
    assert {d.uuid for d in on_gpu0} == set(new), "exactly the new instances, no stale one"
    assert not old & {d.uuid for d in on_gpu0}
    for reading in on_gpu0:
        identity = reading.identity
        assert isinstance(identity, MigIdentity)
        assert identity.profile == new[reading.uuid].profile
        assert (
            reading.values["fb_total"] == GPU_MODELS["A100-SXM4-40GB"].mig_profiles[identity.profile].memory_mib * MIB
        )
    assert [d.uuid for d in migs(after) if d.gpu.index == 1] == [d.uuid for d in migs(before) if d.gpu.index == 1]
    assert any("reading its new layout" in r.getMessage() for r in caplog.records)


def test_mig_turned_off_waits_for_the_exporter_to_let_go_then_gives_the_whole_gpus_utilization_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A MIG mode change needs the GPU idle, and the exporter holds every GPU it reads (simulation/lifecycle.py):
    the change stays pending while it runs, which it logs; once it lets go (the mig-manager pauses its pod, which
    shuts NVML down) the change applies, and the exporter that comes back reads the whole GPU's utilization."""
    clock = ManualClock()
    with caplog.at_level(logging.WARNING, logger="exporter.nvml"):
        with collecting(_a100_mig_then(None), clock) as (sim, collector):
            before = gpus(collector.collect())[0]
            clock.at(6.0)
            collector.collect()
            clock.at(11.0)
            during = gpus(collector.collect())[0]
        clock.at(16.0)  # the mig-manager's next try, 10 s after the refused one
        with install(sim):
            collector = NvmlCollector(pynvml, clock=clock, wall_clock=clock)
            collector.start()
            try:
                collector.collect()
                clock.at(17.0)
                after = gpus(collector.collect())[0]
            finally:
                collector.close()
    assert before.gpu.mig_enabled and "gpu_util" not in before.values
    assert during.gpu.mig_enabled, "pending while the exporter holds the GPU"
    assert [r.what for r in sim.lifecycle.refusals] == ["mig_mode gpu 0"]
    assert any("MIG mode change" in r.getMessage() and "pending" in r.getMessage() for r in caplog.records)
    assert not after.gpu.mig_enabled
    assert "gpu_util" in after.values and "gpu_util" not in after.unavailable
    assert not [d for d in after.processes if d.gpu_instance_id is not None]


def test_an_instance_created_in_an_empty_slot_is_found_by_the_periodic_probe() -> None:
    """The other instances keep their handles and UUIDs: only probing the slots shows the new one."""
    from pathlib import Path

    import yaml

    import simulation
    from simulation import build_scenario

    data = yaml.safe_load((Path(simulation.__file__).parent / "scenarios" / "a100-mig.yaml").read_text())
    data["gpus"][0]["mig"] = data["gpus"][0]["mig"][:3]  # 3g + 2g + 1g: one slice free
    kept = [m.model_dump(exclude={"load"}) for m in build_scenario(data, seed=100).gpus[0].mig or ()]
    data["timeline"] = [
        {"at": 5.0, "action": "reconfigure_mig", "gpu": 0, "mig": [*kept, {"profile": "1g.5gb", "index": 3}]}
    ]
    clock = ManualClock()
    with collecting(build_scenario(data, seed=100), clock, layout_check_seconds=10.0) as (_, collector):
        collector.collect()
        clock.at(6.0)
        early = [d for d in migs(collector.collect()) if d.gpu.index == 0]
        clock.at(11.0)
        found = [d for d in migs(collector.collect()) if d.gpu.index == 0]
    assert len(early) == 3, "the slots were probed at start, and are probed again only every 10 s"
    assert len(found) == 4
    assert [d.uuid for d in found[:3]] == [d.uuid for d in early]


def test_board_temperature_thresholds_are_asked_once_and_reported_every_cycle() -> None:
    """They never change while the driver runs (board constants): asked when a GPU's reader is built, not per poll."""
    clock = ManualClock()
    with collecting("h100x8", clock) as (sim, collector):
        first = collector.collect()
        asked = sim.call_counts["nvmlDeviceGetTemperatureThreshold"]
        for _ in range(70):  # past the minute after which seldom-changing figures are read again
            clock.advance(1.0)
            latest = collector.collect()
        assert sim.call_counts["nvmlDeviceGetTemperatureThreshold"] == asked == 3 * 8
    for reading in (*gpus(first), *gpus(latest)):
        assert {"slowdown_temp", "shutdown_temp", "max_operating_temp"} <= reading.values.keys()
