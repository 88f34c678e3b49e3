"""What each simulated generation gives and refuses through the real pynvml, as a real driver does (the sources are
cited in simulation/): ECC, retired pages and remapped rows, NVLink, thresholds, power averaging, PCIe's 20 ms, MIG,
the vGPU license, and what a driver reload starts again."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pynvml
import pytest

from simulation import Simulator, build_scenario, install
from simulation.hardware import GPU_MODELS
from tests.support.clocks import ManualClock
from tests.support.processes import clean_environment
from tests.support.tools import require_tool

SUCCESS, NOT_SUPPORTED = pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_NOT_SUPPORTED


@contextmanager
def initialized(scenario: object, clock: ManualClock, **options: object) -> Iterator[Simulator]:
    sim = Simulator(scenario, clock=clock, **options)  # type: ignore[arg-type]
    with install(sim):
        pynvml.nvmlInit()
        try:
            yield sim
        finally:
            pynvml.nvmlShutdown()


def handle(i: int = 0) -> object:
    return pynvml.nvmlDeviceGetHandleByIndex(i)


def field(h: object, field_id: int, scope: int = 0) -> tuple[int, int]:
    """(nvmlReturn, value) of one field value."""
    (entry,) = pynvml.nvmlDeviceGetFieldValues(h, [(field_id, scope)])
    return int(entry.nvmlReturn), int(entry.value.ullVal if entry.valueType == 3 else entry.value.uiVal)


def one_gpu(model: str, **gpu: object) -> object:
    return build_scenario({"name": f"one-{model}", "gpus": [{"model": model, **gpu}]})


@pytest.mark.parametrize(
    ("model", "retired", "remapped"),
    [("V100-SXM2-16GB", True, False), ("A100-SXM4-80GB", False, True), ("H100-SXM5-80GB", False, True)],
)
def test_volta_retires_pages_ampere_and_newer_remap_rows(
    clock: ManualClock, model: str, retired: bool, remapped: bool
) -> None:
    with initialized(one_gpu(model), clock):
        h = handle()
        for fid in (pynvml.NVML_FI_DEV_RETIRED_SBE, pynvml.NVML_FI_DEV_RETIRED_DBE, pynvml.NVML_FI_DEV_RETIRED_PENDING):
            assert (field(h, fid)[0] == SUCCESS) is retired
        for fid in (pynvml.NVML_FI_DEV_REMAPPED_COR, pynvml.NVML_FI_DEV_REMAPPED_PENDING):
            assert (field(h, fid)[0] == SUCCESS) is remapped


def test_nvlink_counters_only_on_nvlink_boards(clock: ManualClock) -> None:
    for model, links in (("L4", 0), ("A10", 0), ("A100-SXM4-80GB", 12), ("H100-SXM5-80GB", 18)):
        with initialized(one_gpu(model), clock):
            h = handle()
            status, count = field(h, pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT)
            assert (status, count if status == SUCCESS else 0) == ((SUCCESS, links) if links else (NOT_SUPPORTED, 0))
            for fid in (38, 45, 52, 59):  # NVML_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL
                assert (field(h, fid)[0] == SUCCESS) is bool(links)
            if links:  # per-link throughput: links it has, not one more
                assert field(h, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, links - 1)[0] == SUCCESS
                assert field(h, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, links)[0] != SUCCESS


def test_ecc_mode_off_makes_every_ecc_counter_not_supported(clock: ManualClock) -> None:
    """nvml.h, nvmlDeviceGetTotalEccErrors: "Requires ECC Mode to be enabled"; nvidia-smi -q shows the counters N/A."""
    with initialized(one_gpu("H100-SXM5-80GB", ecc=False), clock):
        h = handle()
        assert pynvml.nvmlDeviceGetEccMode(h) == [0, 0]
        for fid in (3, 4, 5, 6):  # NVML_FI_DEV_ECC_{SBE,DBE}_{VOL,AGG}_TOTAL
            assert field(h, fid)[0] == NOT_SUPPORTED
        assert field(h, pynvml.NVML_FI_DEV_REMAPPED_COR)[0] == SUCCESS  # row remapping does not depend on it


def test_volatile_ecc_is_not_supported_on_a_mig_enabled_gpus_handle(clock: ManualClock) -> None:
    """nvml.h, nvmlDeviceGetMemoryErrorCounter: on MIG-enabled GPUs "querying volatile errors using device handles is
    currently not supported"; the aggregate counters still answer."""
    with initialized("h100-mig", clock):
        h = handle()
        assert field(h, pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL)[0] == NOT_SUPPORTED
        assert field(h, pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL)[0] == NOT_SUPPORTED
        assert field(h, pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL)[0] == SUCCESS


@pytest.mark.parametrize("model", sorted(GPU_MODELS))
def test_each_board_has_its_own_temperature_thresholds(clock: ManualClock, model: str) -> None:
    shutdown, slowdown, gpu_max = GPU_MODELS[model].thresholds_c
    with initialized(one_gpu(model), clock):
        h = handle()
        get = pynvml.nvmlDeviceGetTemperatureThreshold
        assert get(h, pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN) == shutdown
        assert get(h, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN) == slowdown
        assert get(h, pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX) == gpu_max
        assert gpu_max < slowdown < shutdown
        with pytest.raises(pynvml.NVMLError_NotSupported):
            get(h, pynvml.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN)


@pytest.mark.parametrize(("model", "averaged"), [("A100-SXM4-80GB", False), ("H100-SXM5-80GB", True), ("L4", True)])
def test_power_is_a_1s_average_on_ampere_and_newer_but_ga100(clock: ManualClock, model: str, averaged: bool) -> None:
    """nvml.h, nvmlDeviceGetPowerUsage: "On Ampere (except GA100) or newer GPUs, the API returns power averaged over 1
    sec interval. On GA100 and older architectures, instantaneous power is returned." Within a steady second an
    instantaneous reading moves; an average over the last second, of a steady load, does not."""
    steady = {"baseline": 50}
    with initialized(one_gpu(model, load=steady), clock):
        h = handle()
        clock.advance(10.0)
        readings = set()
        for _ in range(5):
            clock.advance(0.05)
            readings.add(pynvml.nvmlDeviceGetPowerUsage(h))
    assert (len(readings) == 1) is averaged


def test_pcie_throughput_waits_out_its_20_ms_window(clock: ManualClock) -> None:
    """nvml.h, nvmlDeviceGetPcieThroughput: "querying a byte counter over a 20ms interval"."""
    waits: list[float] = []
    with initialized(one_gpu("A100-SXM4-80GB"), clock, sleep=waits.append):
        pynvml.nvmlDeviceGetPcieThroughput(handle(), pynvml.NVML_PCIE_UTIL_TX_BYTES)
        pynvml.nvmlDeviceGetPcieThroughput(handle(), pynvml.NVML_PCIE_UTIL_RX_BYTES)
    assert waits == [0.020, 0.020]


def test_max_mig_device_count_is_zero_without_mig(clock: ManualClock) -> None:
    """nvml.h, nvmlDeviceGetMaxMigDeviceCount: "Returns zero if MIG is not supported or enabled"."""
    for model in ("L4", "A100-SXM4-80GB"):
        with initialized(one_gpu(model), clock):
            assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle()) == 0
    with initialized("h100-mig", clock):
        assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle()) == 7


def test_gpm_samples_a_mig_device_through_its_own_handle(clock: ManualClock) -> None:
    """nvml.h, nvmlGpmSampleGet: "The device handle or MIG device handle to get samples for"."""
    with initialized("h100-mig", clock):
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle(), 0)
        first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
        pynvml.nvmlGpmSampleGet(mig, first)
        clock.advance(1.0)
        pynvml.nvmlGpmSampleGet(mig, second)
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 1
        request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_OCCUPANCY
        request.sample1, request.sample2 = first, second
        pynvml.nvmlGpmMetricsGet(request)
        assert request.metrics[0].nvmlReturn == SUCCESS and 0 <= request.metrics[0].value <= 100


def test_bare_metal_has_no_vgpu_licensing(clock: ManualClock) -> None:
    with initialized(one_gpu("H100-SXM5-80GB"), clock):
        features = pynvml.nvmlDeviceGetGridLicensableFeatures(handle())
        assert (features.isGridLicenseSupported, features.licensableFeaturesCount) == (0, 0)


def test_inforom_and_brand_as_the_boards_report_them(clock: ManualClock) -> None:
    with initialized(one_gpu("V100-SXM2-16GB"), clock):
        h = handle()
        assert pynvml.nvmlDeviceGetBrand(h) == pynvml.NVML_BRAND_TESLA
        assert pynvml.nvmlDeviceGetInforomImageVersion(h) == "G503.0201.00.03"
        assert pynvml.nvmlDeviceGetInforomVersion(h, pynvml.NVML_INFOROM_ECC) == "5.0"
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetInforomVersion(h, pynvml.NVML_INFOROM_POWER)


def test_a_driver_reload_starts_energy_and_volatile_ecc_again(clock: ManualClock) -> None:
    """nvml.h: NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION is "since the driver was last reloaded"; volatile ECC counts
    "are reset each time the driver loads"; aggregate counts persist."""
    counters = {"ecc_corrected_per_hour": 3600, "ecc_uncorrected": 2, "ecc_lifetime_corrected": 100}
    with initialized(one_gpu("A100-SXM4-80GB", counters=counters, load={"baseline": 40}), clock) as sim:
        h = handle()
        clock.advance(100.0)
        energy = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        assert field(h, pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL)[1] == 100
        sim.reload_driver()
        clock.advance(10.0)
        assert 0 < pynvml.nvmlDeviceGetTotalEnergyConsumption(h) < energy / 5  # about 10 s of draw, from 0
        assert field(h, pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL)[1] == 10
        assert field(h, pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL)[1] == 0
        assert field(h, pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL)[1] == 100 + 110


PCIE_UNDER_FAKETIME = """
import pynvml
from simulation import Simulator, install
install(Simulator("l4x2"))
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
print(pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES))
"""


def test_the_pcie_call_waits_its_20_ms_on_a_node_whose_clock_is_off() -> None:
    # the e2e node with a clock a minute ahead runs its exporter under libfaketime with DONT_FAKE_MONOTONIC, where
    # time.sleep fails with EINVAL: the simulated 20 ms wait must not (it once failed every GPU's reading there)
    command = [require_tool("faketime"), "-f", "+60s", sys.executable, "-c", PCIE_UNDER_FAKETIME]
    env = clean_environment({"DONT_FAKE_MONOTONIC": "1"})
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 0
