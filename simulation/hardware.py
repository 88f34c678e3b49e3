"""Facts about the GPU models the simulator can play: names, sizes, limits, clocks, PCI ids, MIG profiles, and what
each generation's NVML gives or refuses.

Figures are those a real board of the model reports through NVML (rounded where boards differ slightly); they make
simulated series look like real ones, nothing in gpu-pulse depends on their exact values. The temperature thresholds,
InfoROM versions and brand are those of `nvidia-smi -q` captures of each board (cited at the model), which read them
with the same NVML calls.
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
    # nvmlDeviceGetTemperatureThreshold: (shutdown, slowdown, GPU max operating) in C, as nvidia-smi -q shows them
    thresholds_c: tuple[int, int, int] = (92, 89, 87)
    architecture: str = "hopper"  # volta, ampere, ada, hopper
    chip: str = ""  # GV100, GA100, GA102, AD104, GH100
    brand: int = 14  # nvmlBrandType_t: NVML_BRAND_NVIDIA (14) for Ampere and newer boards, NVML_BRAND_TESLA (2) before
    # nvmlDeviceGetInforomImageVersion, and nvmlDeviceGetInforomVersion of the OEM, ECC and power objects (None: the
    # board has no such object, NVML says NOT_SUPPORTED; nvidia-smi prints N/A)
    inforom: tuple[str, str, str, str | None] = ("", "", "", None)

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    @property
    def page_retirement(self) -> bool:
        """Retired pages (NVML_FI_DEV_RETIRED_*): Volta and Turing. Ampere and newer remap rows instead, and
        nvidia-smi -q shows their Retired Pages as N/A (the captures cited at the models)."""
        return self.architecture == "volta"

    @property
    def row_remapping(self) -> bool:
        """Remapped rows (nvml.h, nvmlDeviceGetRemappedRows: "For Ampere or newer"); a V100's nvidia-smi -q says
        `Remapped Rows : N/A`."""
        return self.architecture != "volta"

    @property
    def power_averaged(self) -> bool:
        """nvml.h, nvmlDeviceGetPowerUsage: "On Ampere (except GA100) or newer GPUs, the API returns power averaged
        over 1 sec interval. On GA100 and older architectures, instantaneous power is returned." """
        return self.architecture != "volta" and self.chip != "GA100"


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

# Instance memory: `nvidia-smi mig -lgip` of each product (the listings toolkit/migprofiles.py cites): A100-SXM4-40GB
# 4.75 / 9.62 / 19.50 / 39.25 GiB, A100-SXM4-80GB 9.50 / 19.50 / 39.25 / 79.00, H100 80GB HBM3 9.75 / 19.62 / 39.50 /
# 79.25, H200 16.00 / 32.50 / - / 140.00 (the 4-slice profiles of the H200: no listing found; 68 GiB kept)
_A100_80_PROFILES = _profiles(
    MigProfile("1g.10gb", 1, 9728, 14, 1, 0, tuple(range(7, 15))),
    MigProfile("1g.20gb", 1, 19968, 14, 1, 1, (9, 10, 11, 12)),
    MigProfile("2g.20gb", 2, 19968, 28, 2, 1, (3, 4, 5, 6)),
    MigProfile("3g.40gb", 3, 40192, 42, 3, 2, (1, 2)),
    MigProfile("4g.40gb", 4, 40192, 56, 4, 2, (5,)),
    MigProfile("7g.80gb", 7, 80896, 98, 7, 5, (0,)),
)

_H100_80_PROFILES = _profiles(
    MigProfile("1g.10gb", 1, 9984, 16, 1, 1, tuple(range(7, 15))),
    MigProfile("1g.20gb", 1, 20096, 16, 1, 1, (9, 10, 11, 12)),
    MigProfile("2g.20gb", 2, 20096, 32, 2, 2, (3, 4, 5, 6)),
    MigProfile("3g.40gb", 3, 40448, 60, 3, 3, (1, 2)),
    MigProfile("4g.40gb", 4, 40448, 64, 4, 4, (5,)),
    MigProfile("7g.80gb", 7, 81152, 132, 8, 7, (0,)),
)

# H200 (NVIDIA MIG user guide, supported profiles of H200 141GB)
_H200_PROFILES = _profiles(
    MigProfile("1g.18gb", 1, 16384, 16, 1, 1, tuple(range(7, 15))),
    MigProfile("1g.35gb", 1, 33280, 16, 1, 1, (9, 10, 11, 12)),
    MigProfile("2g.35gb", 2, 33280, 32, 2, 2, (3, 4, 5, 6)),
    MigProfile("3g.71gb", 3, 69632, 60, 3, 3, (1, 2)),
    MigProfile("4g.71gb", 4, 69632, 64, 4, 4, (5,)),
    MigProfile("7g.141gb", 7, 143360, 132, 8, 7, (0,)),
)

_SXM_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)

GPU_MODELS: Mapping[str, GpuModel] = MappingProxyType(
    {
        m.key: m
        for m in (
            # nvidia-smi -q of an NVIDIA H800 (the H100 SXM5 board, 692-2G520), driver 525.105.17: shutdown 92 C,
            # slowdown 89 C, max operating 87 C; an NVIDIA H100 80GB HBM3 on 565.57.01 (thamada/nvidia-smi,
            # nvsim/H100SXMx8_smi.py) gives the same slowdown and max operating as T.Limit offsets (-2 C, 0 C from a
            # T.Limit of 87 C), InfoROM G520.0200.00.05 with OEM 2.1, ECC 7.16 and no power object
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
                thresholds_c=(92, 89, 87),
                architecture="hopper",
                chip="GH100",
                inforom=("G520.0200.00.05", "2.1", "7.16", None),
            ),
            # nvidia-smi -q of an NVIDIA A100-SXM4-40GB, driver 535.129.03: 92/89/85 C, InfoROM G506.0200.00.04,
            # OEM 2.0, ECC 6.16, no power object
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
                thresholds_c=(92, 89, 85),
                architecture="ampere",
                chip="GA100",
                inforom=("G506.0200.00.04", "2.0", "6.16", None),
            ),
            # thamada/nvidia-smi gls/A100SXMx4_smi.py, NVIDIA A100-SXM4-80GB, driver 555.42.02: 92/89/85 C, InfoROM
            # G506.0212.00.01, OEM 2.0, ECC 6.16, no power object
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
                thresholds_c=(92, 89, 85),
                architecture="ampere",
                chip="GA100",
                inforom=("G506.0212.00.01", "2.0", "6.16", None),
            ),
            # thamada/gls gls/H200_smi.py, NVIDIA H200, driver 550.90.12, gives the thresholds as T.Limit offsets:
            # T.Limit 59 C above the current 28 C (87 C), shutdown -8, slowdown -2, max operating 0: 95/89/87 C;
            # InfoROM G520.0280.02.02, OEM 2.1, ECC 7.16, no power object
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
                thresholds_c=(95, 89, 87),
                architecture="hopper",
                chip="GH100",
                inforom=("G520.0280.02.02", "2.1", "7.16", None),
            ),
            # thamada/gls gls/A10_smi.py, NVIDIA A10, driver 550.90.12: 101/98/91 C, InfoROM G133.0215.00.06, OEM
            # 2.0, ECC 6.16, no power object; remapped rows, no retired pages
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
                thresholds_c=(101, 98, 91),
                architecture="ampere",
                chip="GA102",
                inforom=("G133.0215.00.06", "2.0", "6.16", None),
            ),
            # thamada/nvidia-smi gls/L4_smi.py, NVIDIA L4, driver 550.90.07, as T.Limit offsets: T.Limit 53 C above
            # the current 33 C (86 C), shutdown -5, slowdown -2, max operating 0: 91/88/86 C; InfoROM
            # G193.0200.00.01, OEM 2.1, ECC 6.16, no power object
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
                thresholds_c=(91, 88, 86),
                architecture="ada",
                chip="AD104",
                inforom=("G193.0200.00.01", "2.1", "6.16", None),
            ),
            # thamada/gls gls/V100_x8_smi.py, Tesla V100-SXM2-16GB, driver 550.127.05: brand Tesla, 90/87/83 C,
            # retired pages (0), Remapped Rows N/A, InfoROM G503.0201.00.03, OEM 1.1, ECC 5.0, no power object;
            # 300 W, 16384 MiB (240 reserved), clocks up to 1530/877 MHz, PCIe gen 3
            GpuModel(
                key="V100-SXM2-16GB",
                name="Tesla V100-SXM2-16GB",
                memory_total_mib=16384,
                memory_reserved_mib=240,
                power_limit_mw=300_000,
                idle_power_mw=41_000,
                max_power_mw=295_000,
                max_sm_clock_mhz=1530,
                idle_sm_clock_mhz=135,
                max_mem_clock_mhz=877,
                idle_temp_c=36,
                hot_temp_c=71,
                pci_device_id=0x1DB110DE,
                pci_subsystem_id=0x121210DE,
                pci_bus_numbers=(0x06, 0x07, 0x0A, 0x0B, 0x85, 0x86, 0x89, 0x8A),
                vbios_version="88.00.4F.00.09",
                multiprocessors=80,
                nvlink_links=6,
                nvlink_kib_per_s_per_link=24_000_000,
                gpm=False,
                mig_profiles=_profiles(),
                pcie_max_kb_per_s=15_000_000,
                thresholds_c=(90, 87, 83),
                architecture="volta",
                chip="GV100",
                brand=2,
                inforom=("G503.0201.00.03", "1.1", "5.0", None),
            ),
        )
    }
)

MAX_MIG_DEVICES = 7  # nvmlDeviceGetMaxMigDeviceCount on A100 and H100
