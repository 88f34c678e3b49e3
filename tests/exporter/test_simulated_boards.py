"""The simulated boards' static figures against public `nvidia-smi -q` captures of real boards (issue 41, item 10).

Each row is what a capture shows (the URL and driver are cited beside the model in simulation/hardware.py); the test
reads the same figure from the simulator through pynvml with the NVML call nvidia-smi reads it with. A row is a quote:
change it only with a capture to cite.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pynvml
import pytest

from simulation import Simulator, build_scenario, install
from tests.support.clocks import ManualClock

MIB = 1024 * 1024


@dataclass(frozen=True)
class Capture:
    name: str  # Product Name
    memory_mib: tuple[int, int]  # FB Memory Usage: Total, Reserved
    power_w: tuple[int, int, int]  # Default, Min and Max Power Limit
    max_clocks_mhz: tuple[int, int, int]  # Max Clocks: SM, Memory, Video
    thresholds_c: tuple[int, int, int]  # GPU Shutdown, Slowdown, Max Operating Temp
    pcie: tuple[int, int]  # GPU Link Info: PCIe Generation Max, Link Width Max
    inforom: tuple[str, str, str]  # Image Version, OEM Object, ECC Object (Power Management Object: N/A)


CAPTURES = {
    # thamada/nvidia-smi nvsim/H100SXMx8_smi.py, driver 565.57.01 (thresholds: an H800, driver 525.105.17)
    "H100-SXM5-80GB": Capture(
        "NVIDIA H100 80GB HBM3",
        (81559, 454),
        (700, 200, 700),
        (1980, 2619, 1545),
        (92, 89, 87),
        (5, 16),
        ("G520.0200.00.05", "2.1", "7.16"),
    ),
    # thamada/gls gls/H200_smi.py, driver 550.90.12
    "H200-SXM5-141GB": Capture(
        "NVIDIA H200",
        (143771, 700),
        (700, 200, 700),
        (1980, 3201, 1545),
        (95, 89, 87),
        (5, 16),
        ("G520.0280.02.02", "2.1", "7.16"),
    ),
    # thamada/nvidia-smi gls/A100SXMx4_smi.py, driver 555.42.02; power: NVIDIA/DCGM#152 (the 400 W board)
    "A100-SXM4-80GB": Capture(
        "NVIDIA A100-SXM4-80GB",
        (81920, 763),
        (400, 100, 400),
        (1410, 1593, 1290),
        (92, 89, 85),
        (4, 16),
        ("G506.0212.00.01", "2.0", "6.16"),
    ),
    # thamada/gls gls/A10_smi.py, driver 550.90.12
    "A10": Capture(
        "NVIDIA A10",
        (23028, 526),
        (150, 100, 150),
        (1695, 6251, 1575),
        (101, 98, 91),
        (4, 16),
        ("G133.0215.00.06", "2.0", "6.16"),
    ),
    # thamada/nvidia-smi gls/L4_smi.py, driver 550.90.07
    "L4": Capture(
        "NVIDIA L4",
        (23034, 556),
        (72, 40, 72),
        (2040, 6251, 1770),
        (91, 88, 86),
        (4, 16),
        ("G193.0200.00.01", "2.1", "6.16"),
    ),
}


@pytest.fixture(params=sorted(CAPTURES))
def board(request: pytest.FixtureRequest) -> Iterator[tuple[object, Capture]]:
    key = request.param
    sim = Simulator(build_scenario({"gpus": [{"model": key}]}, seed=1), clock=ManualClock())
    with install(sim):
        pynvml.nvmlInit()
        try:
            yield pynvml.nvmlDeviceGetHandleByIndex(0), CAPTURES[key]
        finally:
            pynvml.nvmlShutdown()


def test_name_and_memory(board: tuple[object, Capture]) -> None:
    handle, capture = board
    assert pynvml.nvmlDeviceGetName(handle) == capture.name
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert (memory.total // MIB, memory.reserved // MIB) == capture.memory_mib


def test_power_limit_and_its_range(board: tuple[object, Capture]) -> None:
    handle, capture = board
    default = pynvml.nvmlDeviceGetPowerManagementDefaultLimit(handle)
    low, high = pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
    assert (default // 1000, low // 1000, high // 1000) == capture.power_w
    assert pynvml.nvmlDeviceGetPowerManagementLimit(handle) == pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) == default


def test_max_clocks(board: tuple[object, Capture]) -> None:
    handle, capture = board
    kinds = (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM, pynvml.NVML_CLOCK_VIDEO)
    assert tuple(pynvml.nvmlDeviceGetMaxClockInfo(handle, kind) for kind in kinds) == capture.max_clocks_mhz
    assert pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_GRAPHICS) == capture.max_clocks_mhz[0]
    # the current clocks never pass them
    for kind, top in zip(kinds, capture.max_clocks_mhz, strict=True):
        assert 0 <= pynvml.nvmlDeviceGetClockInfo(handle, kind) <= top


def test_temperature_thresholds(board: tuple[object, Capture]) -> None:
    handle, capture = board
    kinds = (
        pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
        pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
        pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX,
    )
    assert tuple(pynvml.nvmlDeviceGetTemperatureThreshold(handle, kind) for kind in kinds) == capture.thresholds_c


def test_pcie_link_maximum(board: tuple[object, Capture]) -> None:
    handle, capture = board
    generation = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)
    assert generation == pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(handle)
    assert (generation, pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle)) == capture.pcie


def test_inforom(board: tuple[object, Capture]) -> None:
    handle, capture = board
    image = pynvml.nvmlDeviceGetInforomImageVersion(handle)
    kinds = (pynvml.NVML_INFOROM_OEM, pynvml.NVML_INFOROM_ECC)
    found = (image, *[pynvml.nvmlDeviceGetInforomVersion(handle, kind) for kind in kinds])
    assert found == capture.inforom
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetInforomVersion(handle, pynvml.NVML_INFOROM_POWER)


# `nvidia-smi mig -lgip`: profile -> (Memory GiB as printed, SM, CE, DEC, JPEG, OFA)
LGIP = {
    # an H100 80GB (https://jbarrow.ai/field_notes/nvidia-mig/)
    "H100-SXM5-80GB": {
        "1g.10gb": ("9.75", 16, 1, 1, 1, 0),
        "1g.20gb": ("19.62", 26, 1, 1, 1, 0),
        "2g.20gb": ("19.62", 32, 2, 2, 2, 0),
        "3g.40gb": ("39.50", 60, 3, 3, 3, 0),
        "4g.40gb": ("39.50", 64, 4, 4, 4, 0),
        "7g.80gb": ("79.25", 132, 8, 7, 7, 1),
    },
    # an H200 (https://github.com/NVIDIA/mig-parted/issues/120)
    "H200-SXM5-141GB": {
        "1g.18gb": ("16.00", 16, 1, 1, 1, 0),
        "1g.35gb": ("32.25", 26, 1, 1, 1, 0),
        "2g.35gb": ("32.25", 32, 2, 2, 2, 0),
        "3g.71gb": ("69.50", 60, 3, 3, 3, 0),
        "4g.71gb": ("69.50", 64, 4, 4, 4, 0),
        "7g.141gb": ("139.75", 132, 8, 7, 7, 1),
    },
}


@pytest.mark.parametrize("model", sorted(LGIP))
def test_mig_profiles(model: str) -> None:
    profiles = sorted(LGIP[model])
    scenario = build_scenario({"gpus": [{"model": model, "mig": [{"profile": p}]} for p in profiles]}, seed=1)
    found = {}
    with install(Simulator(scenario, clock=ManualClock())):
        pynvml.nvmlInit()
        try:
            for i, profile in enumerate(profiles):
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(pynvml.nvmlDeviceGetHandleByIndex(i), 0)
                a = pynvml.nvmlDeviceGetAttributes(mig)
                found[profile] = (
                    f"{a.memorySizeMB / 1024:.2f}",
                    a.multiprocessorCount,
                    a.sharedCopyEngineCount,
                    a.sharedDecoderCount,
                    a.sharedJpegCount,
                    a.sharedOfaCount,
                )
        finally:
            pynvml.nvmlShutdown()
    assert found == LGIP[model]
