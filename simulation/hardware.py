"""Facts about the GPU models the simulator can play: names, sizes, limits, clocks, PCI ids, MIG profiles, and what
each generation's NVML gives or refuses.

The static figures are those of public `nvidia-smi -q` captures of each board (cited at the model, with the driver
they were taken with), which reads them with the same NVML calls: memory total and reserved, the default power limit
and its range, the maximum clocks, the temperature thresholds, the PCIe generation and width, the InfoROM versions,
the brand. tests/exporter/test_simulated_boards.py holds them to the captures through pynvml. Idle and busy draw,
temperatures and link speeds are the simulator's own curves.
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
    jpegs: int = 0  # JPEG decoders (`nvidia-smi mig -lgip`: JPEG)
    ofas: int = 0  # optical flow accelerators (OFA)


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
    # nvmlDeviceGetPowerManagementLimitConstraints: the range `nvidia-smi -pl` accepts (Min / Max Power Limit)
    power_limit_min_mw: int
    power_limit_max_mw: int
    max_video_clock_mhz: int  # nvmlDeviceGetMaxClockInfo(NVML_CLOCK_VIDEO): Max Clocks / Video
    # nvmlDeviceGetMaxPcieLinkGeneration / Width: GPU Link Info, PCIe Generation Max and Link Width Max (the board's
    # and the host's maximum agree in every capture cited)
    pcie_max_generation: int
    pcie_max_width: int
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
    MigProfile("7g.40gb", 7, 40192, 98, 7, 5, (0,), jpegs=1, ofas=1),
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
    MigProfile("7g.80gb", 7, 80896, 98, 7, 5, (0,), jpegs=1, ofas=1),
)

# `nvidia-smi mig -lgip` of an H100 80GB (https://jbarrow.ai/field_notes/nvidia-mig/): memory in GiB 9.75, 19.62,
# 19.62, 39.50, 39.50, 79.25 (MiB below: the GiB figure is the MiB one to two decimals), SMs 16, 26, 32, 60, 64, 132;
# CE 1, 1, 2, 3, 4, 8; DEC and JPEG 1, 1, 2, 3, 4, 7; OFA only on 7g.80gb
_H100_80_PROFILES = _profiles(
    MigProfile("1g.10gb", 1, 9984, 16, 1, 1, tuple(range(7, 15)), jpegs=1),
    MigProfile("1g.20gb", 1, 20096, 26, 1, 1, (9, 10, 11, 12), jpegs=1),
    MigProfile("2g.20gb", 2, 20096, 32, 2, 2, (3, 4, 5, 6), jpegs=2),
    MigProfile("3g.40gb", 3, 40448, 60, 3, 3, (1, 2), jpegs=3),
    MigProfile("4g.40gb", 4, 40448, 64, 4, 4, (5,), jpegs=4),
    MigProfile("7g.80gb", 7, 81152, 132, 8, 7, (0,), jpegs=7, ofas=1),
)

# `nvidia-smi mig -lgip` of an H200 (https://github.com/NVIDIA/mig-parted/issues/120): memory in GiB 16.00, 32.25,
# 32.25, 69.50, 69.50, 139.75; SMs 16, 26, 32, 60, 64, 132; CE 1, 1, 2, 3, 4, 8; DEC and JPEG 1, 1, 2, 3, 4, 7; OFA only
# on 7g.141gb
_H200_PROFILES = _profiles(
    MigProfile("1g.18gb", 1, 16384, 16, 1, 1, tuple(range(7, 15)), jpegs=1),
    MigProfile("1g.35gb", 1, 33024, 26, 1, 1, (9, 10, 11, 12), jpegs=1),
    MigProfile("2g.35gb", 2, 33024, 32, 2, 2, (3, 4, 5, 6), jpegs=2),
    MigProfile("3g.71gb", 3, 71168, 60, 3, 3, (1, 2), jpegs=3),
    MigProfile("4g.71gb", 4, 71168, 64, 4, 4, (5,), jpegs=4),
    MigProfile("7g.141gb", 7, 143104, 132, 8, 7, (0,), jpegs=7, ofas=1),
)

_SXM_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)

GPU_MODELS: Mapping[str, GpuModel] = MappingProxyType(
    {
        m.key: m
        for m in (
            # NVIDIA H100 80GB HBM3, driver 565.57.01 (https://github.com/thamada/nvidia-smi/blob/
            # 03fbe6e68c0bb4c28b72d5da786a9712a33cf408/nvsim/H100SXMx8_smi.py): 81559 MiB, 454 reserved; power limit
            # 700 W, range 200-700 W; max clocks 1980 (SM) / 2619 (memory) / 1545 (video) MHz; PCIe gen 5 x16;
            # InfoROM G520.0200.00.05, OEM 2.1, ECC 7.16, no power object; thresholds as T.Limit offsets (slowdown
            # -2 C, max operating 0 C from a T.Limit of 87 C). The same board as an H800 (692-2G520), driver
            # 525.105.17 (https://github.com/NVIDIA/DCGM/issues/120): shutdown 92 C, slowdown 89 C, max operating
            # 87 C, the same max clocks
            GpuModel(
                key="H100-SXM5-80GB",
                name="NVIDIA H100 80GB HBM3",
                memory_total_mib=81559,
                memory_reserved_mib=454,
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
                power_limit_min_mw=200_000,
                power_limit_max_mw=700_000,
                max_video_clock_mhz=1545,
                pcie_max_generation=5,
                pcie_max_width=16,
                thresholds_c=(92, 89, 87),
                architecture="hopper",
                chip="GH100",
                inforom=("G520.0200.00.05", "2.1", "7.16", None),
            ),
            # nvidia-smi -q of an NVIDIA A100-SXM4-40GB, driver 535.129.03: 92/89/85 C, InfoROM G506.0200.00.04,
            # OEM 2.0, ECC 6.16, no power object; and https://github.com/NVIDIA/nvidia-docker/issues/1648 (an
            # A100-SXM4-40GB): power limit 400 W, range 100-400 W, max clocks 1410 / 1215 / 1290 MHz. PCIe gen 4 x16
            # as the A100-SXM4-80GB below (the same GA100 SXM4 module)
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
                power_limit_min_mw=100_000,
                power_limit_max_mw=400_000,
                max_video_clock_mhz=1290,
                pcie_max_generation=4,
                pcie_max_width=16,
                thresholds_c=(92, 89, 85),
                architecture="ampere",
                chip="GA100",
                inforom=("G506.0200.00.04", "2.0", "6.16", None),
            ),
            # NVIDIA A100-SXM4-80GB, driver 555.42.02 (https://github.com/thamada/nvidia-smi/blob/
            # c4c8a463a61e4ac67e3d7956da104b302760a498/gls/A100SXMx4_smi.py): 81920 MiB, 763 reserved; 92/89/85 C;
            # max clocks 1410 / 1593 / 1290 MHz; PCIe gen 4 x16; InfoROM G506.0212.00.01, OEM 2.0, ECC 6.16, no power
            # object. That board is the 500 W one; the 400 W HGX board simulated here:
            # https://github.com/NVIDIA/DCGM/issues/152 (an A100-SXM4-80GB): power limit 400 W, range 100-400 W, the
            # same max clocks
            GpuModel(
                key="A100-SXM4-80GB",
                name="NVIDIA A100-SXM4-80GB",
                memory_total_mib=81920,
                memory_reserved_mib=763,
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
                power_limit_min_mw=100_000,
                power_limit_max_mw=400_000,
                max_video_clock_mhz=1290,
                pcie_max_generation=4,
                pcie_max_width=16,
                thresholds_c=(92, 89, 85),
                architecture="ampere",
                chip="GA100",
                inforom=("G506.0212.00.01", "2.0", "6.16", None),
            ),
            # NVIDIA H200, driver 550.90.12 (https://github.com/thamada/gls/blob/c0bed08d0e20bb1abccfee5aeedb80bc63b493a6/gls/
            # H200_smi.py): 143771 MiB, 700 reserved; power limit 700 W, range 200-700 W; max clocks 1980 / 3201 /
            # 1545 MHz (the same on 550.90.07: https://github.com/awslabs/amazon-eks-ami/pull/1985); PCIe gen 5 x16;
            # thresholds as T.Limit offsets: T.Limit 59 C above the current 28 C (87 C), shutdown -8, slowdown -2,
            # max operating 0: 95/89/87 C; InfoROM G520.0280.02.02, OEM 2.1, ECC 7.16, no power object
            GpuModel(
                key="H200-SXM5-141GB",
                name="NVIDIA H200",
                memory_total_mib=143771,
                memory_reserved_mib=700,
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
                power_limit_min_mw=200_000,
                power_limit_max_mw=700_000,
                max_video_clock_mhz=1545,
                pcie_max_generation=5,
                pcie_max_width=16,
                thresholds_c=(95, 89, 87),
                architecture="hopper",
                chip="GH100",
                inforom=("G520.0280.02.02", "2.1", "7.16", None),
            ),
            # NVIDIA A10, driver 550.90.12 (https://github.com/thamada/gls/blob/b99e2ecde923177a3f6635c678a7fd3796517cde/gls/A10_smi.py):
            # 23028 MiB, 526 reserved; power limit 150 W, range 100-150 W; max clocks 1695 / 6251 / 1575 MHz; PCIe
            # gen 4 x16; 101/98/91 C; InfoROM G133.0215.00.06, OEM 2.0, ECC 6.16, no power object; remapped rows, no
            # retired pages
            GpuModel(
                key="A10",
                name="NVIDIA A10",
                memory_total_mib=23028,
                memory_reserved_mib=526,
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
                power_limit_min_mw=100_000,
                power_limit_max_mw=150_000,
                max_video_clock_mhz=1575,
                pcie_max_generation=4,
                pcie_max_width=16,
                hbm=False,
                thresholds_c=(101, 98, 91),
                architecture="ampere",
                chip="GA102",
                inforom=("G133.0215.00.06", "2.0", "6.16", None),
            ),
            # NVIDIA L4, driver 550.90.07 (https://github.com/thamada/nvidia-smi/blob/
            # c4c8a463a61e4ac67e3d7956da104b302760a498/gls/L4_smi.py): 23034 MiB, 556 reserved; power limit 72 W,
            # range 40-72 W; max clocks 2040 / 6251 / 1770 MHz; PCIe gen 4 x16 (at idle the link trains down to gen 1
            # x8); as T.Limit offsets: T.Limit 53 C above the current 33 C (86 C), shutdown -5, slowdown -2, max
            # operating 0: 91/88/86 C; InfoROM G193.0200.00.01, OEM 2.1, ECC 6.16, no power object
            GpuModel(
                key="L4",
                name="NVIDIA L4",
                memory_total_mib=23034,
                memory_reserved_mib=556,
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
                power_limit_min_mw=40_000,
                power_limit_max_mw=72_000,
                max_video_clock_mhz=1770,
                pcie_max_generation=4,
                pcie_max_width=16,
                hbm=False,
                thresholds_c=(91, 88, 86),
                architecture="ada",
                chip="AD104",
                inforom=("G193.0200.00.01", "2.1", "6.16", None),
            ),
            # thamada/gls gls/V100_x8_smi.py, Tesla V100-SXM2-16GB, driver 550.127.05: brand Tesla, 90/87/83 C,
            # retired pages (0), Remapped Rows N/A, InfoROM G503.0201.00.03, OEM 1.1, ECC 5.0, no power object;
            # 300 W, range 150-300 W, 16384 MiB (240 reserved), clocks up to 1530/877/1372 MHz, PCIe gen 3 x16
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
                power_limit_min_mw=150_000,
                power_limit_max_mw=300_000,
                max_video_clock_mhz=1372,
                pcie_max_generation=3,
                pcie_max_width=16,
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
