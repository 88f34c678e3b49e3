"""The collector's handling of the fields dcgm-exporter's files ask for: DCGM's NVLink rates, per-link counters,
reasons a device gives for what it cannot give (ECC off, MIG, generation), GPM through MIG handles, board constants."""

from __future__ import annotations

import pytest

from exporter.catalogue import MEASUREMENTS
from exporter.snapshot import DeviceReading
from simulation import build_scenario
from tests.exporter.collecting import collecting
from tests.support.clocks import ManualClock

ALL = [m.key for m in MEASUREMENTS]


def first_gpu(readings: tuple[DeviceReading, ...]) -> DeviceReading:
    return next(r for r in readings if not r.is_mig)


def test_nvlink_rates_are_dcgms_and_per_link_counters_are_vectors() -> None:
    """DCGM: (rx + tx now - rx + tx before) / seconds between the readings, 0 on the first; per link the same."""
    clock = ManualClock()
    with collecting("h100x8", clock, enabled=ALL) as (_, collector):
        first = first_gpu(collector.collect().devices)
        clock.advance(4.0)
        second = first_gpu(collector.collect().devices)
    assert first.values["nvlink_total"] == 0 and first.values["nvlink_bandwidth_l3"] == 0
    moved = (
        second.values["nvlink_tx"] + second.values["nvlink_rx"] - first.values["nvlink_tx"] - first.values["nvlink_rx"]
    )
    assert second.values["nvlink_total"] == pytest.approx(moved / 4.0)
    links = {link: second.vectors["nvlink_link_tx"][link] for link in second.vectors["nvlink_link_tx"]}
    assert sorted(links, key=int) == [str(n) for n in range(18)]
    before = first.vectors["nvlink_link_tx"]["3"] + first.vectors["nvlink_link_rx"]["3"]
    after = second.vectors["nvlink_link_tx"]["3"] + second.vectors["nvlink_link_rx"]["3"]
    assert second.values["nvlink_bandwidth_l3"] == pytest.approx((after - before) / 4.0)


def test_links_a_gpu_lacks_are_named_not_silently_absent() -> None:
    clock = ManualClock()
    for scenario, links in (("a100x8", 12), ("l4x2", 0)):
        with collecting(scenario, clock, enabled=ALL) as (_, collector):
            gpu = first_gpu(collector.collect().devices)
        for link in range(18):
            key = f"nvlink_bandwidth_l{link}"
            assert (key in gpu.values) is (link < links)
            assert (gpu.unavailable.get(key) == "not_supported") is (link >= links)


def test_ecc_off_is_the_reason_ecc_counters_are_missing() -> None:
    clock = ManualClock()
    scenario = build_scenario({"name": "ecc-off", "gpus": [{"model": "H100-SXM5-80GB", "ecc": False}]})
    with collecting(scenario, clock, enabled=ALL) as (_, collector):
        gpu = first_gpu(collector.collect().devices)
    for key in ("ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate"):
        assert key not in gpu.values
        assert gpu.unavailable[key] == "ecc_disabled"
    assert gpu.unavailable["retired_pages_sbe"] == "not_supported"  # the generation's, not ECC's


def test_volatile_ecc_on_a_mig_enabled_gpu_says_mig_and_aggregate_ecc_stays() -> None:
    clock = ManualClock()
    with collecting("h100-mig", clock, enabled=ALL) as (_, collector):
        gpu = first_gpu(collector.collect().devices)
    assert gpu.unavailable["ecc_sbe_volatile"] == gpu.unavailable["ecc_dbe_volatile"] == "mig_enabled"
    assert "ecc_sbe_aggregate" in gpu.values


def test_gpm_of_a_mig_instance_comes_through_its_own_handle() -> None:
    clock = ManualClock()
    with collecting("h100-mig", clock, enabled=ALL) as (sim, collector):
        collector.collect()
        clock.advance(1.0)
        instance = next(r for r in collector.collect().devices if r.is_mig)
        calls = dict(sim.call_counts)
    assert {"sm_occupancy", "fp32_active", "gr_engine_active"} <= instance.values.keys()
    assert calls.get("nvmlGpmSampleGet", 0) > 0 and "nvmlGpmMigSampleGet" not in calls


def test_a_driver_that_refuses_mig_handles_for_gpm_is_sampled_through_the_parent() -> None:
    clock = ManualClock()
    spec = {
        "name": "gpm-parent-only",
        "gpus": [
            {"model": "H100-SXM5-80GB", "mig": [{"profile": "3g.40gb"}], "errors": {"nvmlGpmSampleGet": "UNKNOWN"}}
        ],
    }
    with collecting(build_scenario(spec), clock, enabled=ALL) as (sim, collector):
        collector.collect()
        clock.advance(1.0)
        instance = next(r for r in collector.collect().devices if r.is_mig)
        assert sim.call_counts.get("nvmlGpmMigSampleGet", 0) > 0
    assert "gr_engine_active" in instance.values


def test_board_constants_and_the_vgpu_license() -> None:
    clock = ManualClock()
    with collecting("l4x2", clock) as (_, collector):
        gpu = first_gpu(collector.collect().devices)
    assert (gpu.values["shutdown_temp"], gpu.values["slowdown_temp"], gpu.values["max_operating_temp"]) == (91, 88, 86)
    assert gpu.values["vgpu_license_status"] == 0


def test_label_fields_asked_for_that_a_gpu_lacks_are_named() -> None:
    clock = ManualClock()
    with collecting("h100x8", clock, labels=["serial", "inforom_power_version"]) as (_, collector):
        gpu = first_gpu(collector.collect().devices)
    assert gpu.unavailable["inforom_power_version"] == "not_supported"
    assert "serial" not in gpu.unavailable
    assert gpu.gpu.brand == "NVIDIA" and gpu.gpu.inforom_ecc_version == "7.16" and gpu.gpu.nvml_version


def test_fields_gpu_pulse_never_serves_are_named_on_every_gpu() -> None:
    clock = ManualClock()
    unserved = {"DCGM_EXP_GPU_HEALTH_STATUS": "not_in_nvml"}
    with collecting("a100x8", clock, unserved=unserved) as (_, collector):
        readings = collector.collect().devices
    assert all(r.unavailable["DCGM_EXP_GPU_HEALTH_STATUS"] == "not_in_nvml" for r in readings if not r.is_mig)


def test_the_energy_counter_starts_again_when_the_driver_reloads() -> None:
    clock = ManualClock()
    with collecting("a100x8", clock) as (sim, collector):
        clock.advance(60.0)
        before = first_gpu(collector.collect().devices).values["total_energy"]
        sim.reload_driver()
        clock.advance(1.0)
        after = first_gpu(collector.collect().devices).values["total_energy"]
    assert 0 < after < before / 100


def test_ecc_counters_and_memory_temperature_nvml_leaves_untyped_read_as_dcgm_reads_them() -> None:
    """A driver that writes the ECC counts and the memory temperature but leaves their valueType unset (the caller's
    zero-filled array says DOUBLE): 7 double-bit errors are 7, not 3.5e-323, so the ECC alerts see them."""
    clock = ManualClock()
    spec = {
        "name": "untyped-ecc",
        "untyped_fields": [3, 4, 5, 6, 82],
        "gpus": [{"model": "H100-SXM5-80GB", "counters": {"ecc_uncorrected": 7, "ecc_lifetime_uncorrected": 2}}],
    }
    with collecting(build_scenario(spec), clock, enabled=ALL) as (_, collector):
        gpu = first_gpu(collector.collect().devices)
    assert gpu.values["ecc_dbe_volatile"] == 7
    assert gpu.values["ecc_dbe_aggregate"] == 9
    assert gpu.values["ecc_sbe_volatile"] == 0
    assert 20 <= gpu.values["memory_temp"] <= 100


def test_an_out_of_band_power_cap_is_the_enforced_limit_and_the_management_limit_stays() -> None:
    """DCGM_FI_DEV_POWER_MGMT_LIMIT (160) is nvmlDeviceGetPowerManagementLimit, DCGM_FI_DEV_ENFORCED_POWER_LIMIT (164)
    nvmlDeviceGetEnforcedPowerLimit (DcgmCacheManager.cpp); under a cap set out of band they differ (nvml.h), and the
    board draws no more than the enforced one, its clocks held for the power cap."""
    clock = ManualClock()
    spec = {
        "name": "capped-hall",
        "gpus": [
            {"model": "H100-SXM5-80GB", "load": {"baseline": 100}, "power_cap_w": 450},
            {"model": "H100-SXM5-80GB", "load": {"baseline": 100}, "power_limit_w": 600},
        ],
    }
    with collecting(build_scenario(spec), clock, enabled=ALL) as (_, collector):
        capped, lowered = (r for r in collector.collect().devices if not r.is_mig)
    assert capped.values["power_management_limit"] == 700_000  # the board's, as set
    assert capped.values["power_limit"] == 450_000  # what the driver enforces
    assert capped.values["power_usage"] <= 450_000
    assert int(capped.values["clock_event_reasons"]) & 0x4  # SW power cap
    assert lowered.values["power_management_limit"] == lowered.values["power_limit"] == 600_000


def test_a_mig_instance_no_process_runs_on_is_idle() -> None:
    """An unassigned MIG instance runs no kernel: its graphics engine activity is 0, whatever load its neighbours or
    the scenario's curve for it have (its engines are its own)."""
    clock = ManualClock()
    with collecting("h100-mig", clock, enabled=ALL) as (sim, collector):
        collector.collect()
        clock.advance(5.0)
        readings = collector.collect().devices
        busy = {(p.gpu, p.mig) for p in sim.scenario.processes}
    instances = [r for r in readings if r.is_mig and r.up]
    idle = [r for r in instances if (r.gpu.index, r.identity.index) not in busy]
    loaded = [r for r in instances if (r.gpu.index, r.identity.index) in busy]
    assert idle and loaded
    assert all(r.values["gr_engine_active"] == 0 for r in idle)
    assert any(r.values["gr_engine_active"] > 0 for r in loaded)
