"""Telemetry through the real pynvml: utilization, memory, power, energy, clocks, PCIe, field values."""

from __future__ import annotations

from collections.abc import Iterator

import pynvml
import pytest

from simulation import Simulator, install
from tests.support.clocks import ManualClock

MIB = 1024 * 1024


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[Simulator]:
    s = Simulator("h100x8", clock=clock)
    with install(s):
        pynvml.nvmlInit()
        yield s
        pynvml.nvmlShutdown()


def handle(i: int) -> object:
    return pynvml.nvmlDeviceGetHandleByIndex(i)


def test_utilization_is_percent_and_follows_each_gpus_curve(sim: Simulator, clock: ManualClock) -> None:
    seen: dict[int, list[int]] = {i: [] for i in range(8)}
    for _ in range(30):
        clock.advance(10)
        for i in range(8):
            u = pynvml.nvmlDeviceGetUtilizationRates(handle(i))
            assert 0 <= u.gpu <= 100 and 0 <= u.memory <= u.gpu
            seen[i].append(u.gpu)
    training = [sum(v) / len(v) for i, v in seen.items() if i < 4]
    assert all(70 <= m <= 95 for m in training)  # the training job runs hot
    assert max(seen[7]) == 0  # the idle GPU
    assert len(set(seen[4])) > 5  # inference swings: not a flat line


def test_set_load_moves_a_gpu_and_a_pod(sim: Simulator, clock: ManualClock) -> None:
    sim.set_load(4, 30)
    clock.advance(1)
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(4)).gpu == 30
    sim.set_load("inference/triton-7d9f8-abcde", 90)  # the pod on GPU 4
    clock.advance(1)
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(4)).gpu == 90
    sim.set_load(sim.scenario.gpus[5].uuid or "", 10)
    clock.advance(1)
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(5)).gpu == 10
    sim.set_load(5, None)
    clock.advance(1)
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(5)).gpu != 10
    with pytest.raises(ValueError, match="no GPU, MIG device or pod"):
        sim.set_load("nowhere/nothing", 50)
    with pytest.raises(ValueError, match="between 0 and 100"):
        sim.set_load(0, 120)


def test_memory_v2_used_excludes_reserved_and_v1_includes_it(sim: Simulator) -> None:
    for i in range(8):
        h = handle(i)
        v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
        assert v2.total == v1.total == 81559 * MIB
        assert v2.reserved > 0
        assert v2.used + v2.reserved + v2.free == v2.total
        assert v1.used == v2.used + v2.reserved
        assert v1.free == v2.free
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        assert v2.used == sum(p.usedGpuMemory for p in procs)
    assert pynvml.nvmlDeviceGetMemoryInfo(handle(0), version=pynvml.nvmlMemory_v2).used == 71234 * MIB


def test_power_in_milliwatts_below_the_limit(sim: Simulator) -> None:
    for i in range(8):
        h = handle(i)
        limit = pynvml.nvmlDeviceGetEnforcedPowerLimit(h)
        assert limit == pynvml.nvmlDeviceGetPowerManagementLimit(h) == 700_000
        power = pynvml.nvmlDeviceGetPowerUsage(h)
        assert 60_000 < power <= limit
    # a busy GPU draws more than the idle one
    assert pynvml.nvmlDeviceGetPowerUsage(handle(0)) > 4 * pynvml.nvmlDeviceGetPowerUsage(handle(7))


def test_energy_counter_is_the_integral_of_power(sim: Simulator, clock: ManualClock) -> None:
    h = handle(2)
    start = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    assert start > 10**9  # mJ since the driver loaded, days ago
    powers = []
    previous = start
    for _ in range(120):
        clock.advance(1)
        powers.append(pynvml.nvmlDeviceGetPowerUsage(h))
        now = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        assert now >= previous  # a counter never goes down
        previous = now
    mean_mw = sum(powers) / len(powers)
    assert previous - start == pytest.approx(mean_mw * 120, rel=0.02)  # mW x s = mJ
    # the field-value form is the same counter
    (fv,) = pynvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION])
    assert fv.nvmlReturn == 0 and fv.value.ullVal == previous


def test_temperatures_clocks_pstate_and_clock_event_reasons(sim: Simulator) -> None:
    busy, idle = handle(0), handle(7)
    assert 60 <= pynvml.nvmlDeviceGetTemperature(busy, pynvml.NVML_TEMPERATURE_GPU) <= 80
    assert 25 <= pynvml.nvmlDeviceGetTemperature(idle, pynvml.NVML_TEMPERATURE_GPU) <= 40
    assert pynvml.nvmlDeviceGetTemperatureV(busy, pynvml.NVML_TEMPERATURE_GPU) == pynvml.nvmlDeviceGetTemperature(
        busy, pynvml.NVML_TEMPERATURE_GPU
    )
    assert pynvml.nvmlDeviceGetClockInfo(busy, pynvml.NVML_CLOCK_SM) > pynvml.nvmlDeviceGetClockInfo(
        idle, pynvml.NVML_CLOCK_SM
    )
    assert pynvml.nvmlDeviceGetClockInfo(busy, pynvml.NVML_CLOCK_MEM) == 2619
    assert pynvml.nvmlDeviceGetMaxClockInfo(busy, pynvml.NVML_CLOCK_SM) == 1980
    assert pynvml.nvmlDeviceGetPerformanceState(busy) == 0
    assert pynvml.nvmlDeviceGetPerformanceState(idle) == 8
    idle_reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(idle)
    assert idle_reasons & pynvml.nvmlClocksEventReasonGpuIdle
    assert not pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(busy) & pynvml.nvmlClocksEventReasonGpuIdle


def test_pcie_throughput_in_kilobytes_per_second(sim: Simulator) -> None:
    h = handle(0)
    tx = pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES)
    rx = pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES)
    assert 100_000 < tx < 64_000_000 and 100_000 < rx < 64_000_000  # 0.1 GB/s .. PCIe Gen5 x16
    assert pynvml.nvmlDeviceGetPcieReplayCounter(h) == 0


def test_encoder_and_decoder_utilization_with_sampling_period(sim: Simulator) -> None:
    util, period = pynvml.nvmlDeviceGetDecoderUtilization(handle(4))
    assert 0 < util <= 20 and period > 0
    assert pynvml.nvmlDeviceGetEncoderUtilization(handle(4))[0] == 0


def test_field_values_each_entry_has_its_own_status_type_and_timestamp(sim: Simulator, clock: ManualClock) -> None:
    ids = [
        pynvml.NVML_FI_DEV_MEMORY_TEMP,
        pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
        pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
        pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
        pynvml.NVML_FI_DEV_REMAPPED_COR,
        pynvml.NVML_FI_DEV_REMAPPED_UNC,
        pynvml.NVML_FI_DEV_REMAPPED_PENDING,
        pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
        pynvml.NVML_FI_DEV_POWER_INSTANT,
        299,  # a field the simulator does not know
    ]
    values = pynvml.nvmlDeviceGetFieldValues(handle(0), ids)
    assert [v.fieldId for v in values] == ids
    by_id = {v.fieldId: v for v in values}
    assert all(v.timestamp == int(clock.now * 1e6) for v in values)
    assert by_id[299].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    for fid in ids[:-1]:
        assert by_id[fid].nvmlReturn == pynvml.NVML_SUCCESS, fid
    mem_temp = by_id[pynvml.NVML_FI_DEV_MEMORY_TEMP]
    assert mem_temp.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert mem_temp.value.uiVal > pynvml.nvmlDeviceGetTemperature(handle(0), 0)  # HBM runs hotter than the die
    instant = by_id[pynvml.NVML_FI_DEV_POWER_INSTANT].value.uiVal
    assert instant == pytest.approx(pynvml.nvmlDeviceGetPowerUsage(handle(0)), rel=0.02)
    assert by_id[pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG


def test_nvlink_throughput_counters_per_link_and_summed(sim: Simulator, clock: ManualClock) -> None:
    all_links = 0xFFFFFFFF
    ids = [
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0),
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, all_links),
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, all_links),
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, all_links),
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 18),  # H100 has links 0-17
        pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT,
    ]
    first = pynvml.nvmlDeviceGetFieldValues(handle(0), ids)
    clock.advance(30)
    second = pynvml.nvmlDeviceGetFieldValues(handle(0), ids)
    assert first[4].nvmlReturn == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert second[5].value.uiVal == 18
    link0, total, rx, raw = (second[k].value.ullVal - first[k].value.ullVal for k in range(4))
    assert link0 > 0
    assert total == pytest.approx(18 * link0, rel=1e-6)
    assert 0 < rx < total < raw
    # the idle GPU moves nothing over NVLink
    idle = [pynvml.nvmlDeviceGetFieldValues(handle(7), ids[1:2])[0].value.ullVal for _ in range(2)]
    clock.advance(30)
    assert pynvml.nvmlDeviceGetFieldValues(handle(7), ids[1:2])[0].value.ullVal == idle[0]


def test_field_values_on_a_gpu_without_nvlink_or_hbm() -> None:
    with install(Simulator("faulty", clock=ManualClock())):
        pynvml.nvmlInit()
        try:
            l4 = pynvml.nvmlDeviceGetHandleByIndex(3)
            assert pynvml.nvmlDeviceGetName(l4) == "NVIDIA L4"
            values = pynvml.nvmlDeviceGetFieldValues(
                l4, [(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0xFFFFFFFF), pynvml.NVML_FI_DEV_MEMORY_TEMP, 83]
            )
            assert [v.nvmlReturn for v in values] == [
                pynvml.NVML_ERROR_NOT_SUPPORTED,
                pynvml.NVML_ERROR_NOT_SUPPORTED,
                pynvml.NVML_SUCCESS,
            ]
            with pytest.raises(pynvml.NVMLError_NotSupported):
                pynvml.nvmlDeviceGetMigMode(l4)
        finally:
            pynvml.nvmlShutdown()


def test_values_are_a_function_of_time_and_seed() -> None:
    def readings() -> list[int]:
        clock = ManualClock()
        with install(Simulator("h100x8", clock=clock)):
            pynvml.nvmlInit()
            try:
                out = []
                for _ in range(5):
                    clock.advance(7)
                    for i in range(8):
                        h = pynvml.nvmlDeviceGetHandleByIndex(i)
                        out += [
                            pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
                            pynvml.nvmlDeviceGetPowerUsage(h),
                            pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
                            pynvml.nvmlDeviceGetTemperature(h, 0),
                        ]
                return out
            finally:
                pynvml.nvmlShutdown()

    assert readings() == readings()
