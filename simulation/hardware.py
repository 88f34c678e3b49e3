"""Facts about the GPU models the simulator can play: names, sizes, limits, clocks, PCI ids, MIG profiles.

Figures are those a real board of the model reports through NVML (rounded where boards differ slightly); they make
simulated series look like real ones, nothing in gpu-pulse depends on their exact values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A MIG GPU-instance profile, e.g. `3g.20gb`: slices of compute and memory."""

    name: str  # "3g.20gb"
    slices: int  # GPU-instance slice count (the "3" of 3g)
    memory_mib: int  # framebuffer of the instance
    multiprocessors: int
    copy_engines: int
    decoders: int
    gpu_instance_ids: tuple[int, ...]  # ids the driver hands out for this profile, in placement order


@dataclass(frozen=True, slots=True)
class GpuModel:
    key: str  # the name scenarios use
    name: str  # nvmlDeviceGetName
    memory_total_mib: int
    memory_reserved_mib: int  # held by the driver (nvmlMemory_v2.reserved)
    power_limit_mw: int  # default (= enforced) power limit
    idle_power_mw: int
    max_power_mw: int  # draw at 100 % utilization
    max_sm_clock_mhz: int
    idle_sm_clock_mhz: int
    max_mem_clock_mhz: int
    idle_temp_c: int
    hot_temp_c: int  # at 100 % utilization
    pci_device_id: int
    pci_subsystem_id: int
    pci_bus_numbers: tuple[int, ...]  # bus numbers of boards in a typical 8-GPU server, by index
    vbios_version: str
    multiprocessors: int
    nvlink_links: int  # 0: no NVLink (NVLink field values are NOT_SUPPORTED)
    nvlink_kib_per_s_per_link: int  # data throughput per link at 100 % load
    gpm: bool  # GPU Performance Monitoring (Hopper and newer)
    mig_profiles: Mapping[str, MigProfile]  # empty: MIG not supported
    pcie_max_kb_per_s: int
    hbm: bool = True  # HBM memory reports its temperature (field 82); GDDR boards do not

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)


def _profiles(*profiles: MigProfile) -> Mapping[str, MigProfile]:
    return MappingProxyType({p.name: p for p in profiles})


_A100_40_PROFILES = _profiles(
    MigProfile("1g.5gb", 1, 4864, 14, 1, 0, tuple(range(7, 15))),
    MigProfile("1g.10gb", 1, 9856, 14, 1, 1, (9, 10, 11, 12)),
    MigProfile("2g.10gb", 2, 9856, 28, 2, 1, (3, 4, 5, 6)),
    MigProfile("3g.20gb", 3, 19968, 42, 3, 2, (1, 2)),
    MigProfile("4g.20gb", 4, 19968, 56, 4, 2, (5,)),
    MigProfile("7g.40gb", 7, 40192, 98, 7, 5, (0,)),
)

_A100_80_PROFILES = _profiles(
    MigProfile("1g.10gb", 1, 9856, 14, 1, 0, tuple(range(7, 15))),
    MigProfile("1g.20gb", 1, 19968, 14, 1, 1, (9, 10, 11, 12)),
    MigProfile("2g.20gb", 2, 19968, 28, 2, 1, (3, 4, 5, 6)),
    MigProfile("3g.40gb", 3, 40192, 42, 3, 2, (1, 2)),
    MigProfile("4g.40gb", 4, 40192, 56, 4, 2, (5,)),
    MigProfile("7g.80gb", 7, 80896, 98, 7, 5, (0,)),
)

_H100_80_PROFILES = _profiles(
    MigProfile("1g.10gb", 1, 9984, 16, 1, 1, tuple(range(7, 15))),
    MigProfile("1g.20gb", 1, 19968, 16, 1, 1, (9, 10, 11, 12)),
    MigProfile("2g.20gb", 2, 19968, 32, 2, 2, (3, 4, 5, 6)),
    MigProfile("3g.40gb", 3, 40320, 60, 3, 3, (1, 2)),
    MigProfile("4g.40gb", 4, 40320, 64, 4, 4, (5,)),
    MigProfile("7g.80gb", 7, 80896, 132, 8, 7, (0,)),
)

# H200 (NVIDIA MIG user guide, supported profiles of H200 141GB)
_H200_PROFILES = _profiles(
    MigProfile("1g.18gb", 1, 16384, 16, 1, 1, tuple(range(7, 15))),
    MigProfile("1g.35gb", 1, 32768, 16, 1, 1, (9, 10, 11, 12)),
    MigProfile("2g.35gb", 2, 32768, 32, 2, 2, (3, 4, 5, 6)),
    MigProfile("3g.71gb", 3, 69632, 60, 3, 3, (1, 2)),
    MigProfile("4g.71gb", 4, 69632, 64, 4, 4, (5,)),
    MigProfile("7g.141gb", 7, 143360, 132, 8, 7, (0,)),
)

_SXM_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)

GPU_MODELS: Mapping[str, GpuModel] = MappingProxyType(
    {
        m.key: m
        for m in (
            GpuModel(
                key="H100-SXM5-80GB",
                name="NVIDIA H100 80GB HBM3",
                memory_total_mib=81559,
                memory_reserved_mib=527,
                power_limit_mw=700_000,
                idle_power_mw=72_000,
                max_power_mw=690_000,
                max_sm_clock_mhz=1980,
                idle_sm_clock_mhz=345,
                max_mem_clock_mhz=2619,
                idle_temp_c=31,
                hot_temp_c=74,
                pci_device_id=0x233010DE,
                pci_subsystem_id=0x16C110DE,
                pci_bus_numbers=_SXM_BUSES,
                vbios_version="96.00.99.00.01",
                multiprocessors=132,
                nvlink_links=18,
                nvlink_kib_per_s_per_link=20_000_000,
                gpm=True,
                mig_profiles=_H100_80_PROFILES,
                pcie_max_kb_per_s=55_000_000,
            ),
            GpuModel(
                key="A100-SXM4-40GB",
                name="NVIDIA A100-SXM4-40GB",
                memory_total_mib=40960,
                memory_reserved_mib=418,
                power_limit_mw=400_000,
                idle_power_mw=54_000,
                max_power_mw=395_000,
                max_sm_clock_mhz=1410,
                idle_sm_clock_mhz=210,
                max_mem_clock_mhz=1215,
                idle_temp_c=29,
                hot_temp_c=68,
                pci_device_id=0x20B010DE,
                pci_subsystem_id=0x134F10DE,
                pci_bus_numbers=(0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD),
                vbios_version="92.00.36.00.05",
                multiprocessors=108,
                nvlink_links=12,
                nvlink_kib_per_s_per_link=18_000_000,
                gpm=False,
                mig_profiles=_A100_40_PROFILES,
                pcie_max_kb_per_s=26_000_000,
            ),
            GpuModel(
                key="A100-SXM4-80GB",
                name="NVIDIA A100-SXM4-80GB",
                memory_total_mib=81920,
                memory_reserved_mib=598,
                power_limit_mw=400_000,
                idle_power_mw=60_000,
                max_power_mw=398_000,
                max_sm_clock_mhz=1410,
                idle_sm_clock_mhz=210,
                max_mem_clock_mhz=1593,
                idle_temp_c=30,
                hot_temp_c=70,
                pci_device_id=0x20B210DE,
                pci_subsystem_id=0x147F10DE,
                pci_bus_numbers=(0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD),
                vbios_version="92.00.45.00.03",
                multiprocessors=108,
                nvlink_links=12,
                nvlink_kib_per_s_per_link=18_000_000,
                gpm=False,
                mig_profiles=_A100_80_PROFILES,
                pcie_max_kb_per_s=26_000_000,
            ),
            GpuModel(
                key="H200-SXM5-141GB",
                name="NVIDIA H200",
                memory_total_mib=143771,
                memory_reserved_mib=575,
                power_limit_mw=700_000,
                idle_power_mw=76_000,
                max_power_mw=695_000,
                max_sm_clock_mhz=1980,
                idle_sm_clock_mhz=345,
                max_mem_clock_mhz=3201,
                idle_temp_c=30,
                hot_temp_c=72,
                pci_device_id=0x233510DE,
                pci_subsystem_id=0x18BE10DE,
                pci_bus_numbers=_SXM_BUSES,
                vbios_version="96.00.AF.00.01",
                multiprocessors=132,
                nvlink_links=18,
                nvlink_kib_per_s_per_link=20_000_000,
                gpm=True,
                mig_profiles=_H200_PROFILES,
                pcie_max_kb_per_s=55_000_000,
            ),
            GpuModel(
                key="A10",
                name="NVIDIA A10",
                memory_total_mib=23028,
                memory_reserved_mib=404,
                power_limit_mw=150_000,
                idle_power_mw=20_000,
                max_power_mw=148_000,
                max_sm_clock_mhz=1695,
                idle_sm_clock_mhz=210,
                max_mem_clock_mhz=6251,
                idle_temp_c=33,
                hot_temp_c=77,
                pci_device_id=0x223610DE,
                pci_subsystem_id=0x148210DE,
                pci_bus_numbers=(0x17, 0x31, 0x4B, 0x65, 0x98, 0xB1, 0xCA, 0xE3),
                vbios_version="94.02.5C.00.03",
                multiprocessors=72,
                nvlink_links=0,
                nvlink_kib_per_s_per_link=0,
                gpm=False,
                mig_profiles=_profiles(),
                pcie_max_kb_per_s=26_000_000,
                hbm=False,
            ),
            GpuModel(
                key="L4",
                name="NVIDIA L4",
                memory_total_mib=23034,
                memory_reserved_mib=433,
                power_limit_mw=72_000,
                idle_power_mw=16_000,
                max_power_mw=71_000,
                max_sm_clock_mhz=2040,
                idle_sm_clock_mhz=210,
                max_mem_clock_mhz=6251,
                idle_temp_c=34,
                hot_temp_c=79,
                pci_device_id=0x27B810DE,
                pci_subsystem_id=0x16CA10DE,
                pci_bus_numbers=(0x01, 0x02, 0x41, 0x42, 0x81, 0x82, 0xC1, 0xC2),
                vbios_version="95.04.29.00.06",
                multiprocessors=58,
                nvlink_links=0,
                nvlink_kib_per_s_per_link=0,
                gpm=False,
                mig_profiles=_profiles(),
                pcie_max_kb_per_s=26_000_000,
                hbm=False,
            ),
        )
    }
)

MAX_MIG_DEVICES = 7  # nvmlDeviceGetMaxMigDeviceCount on A100 and H100
