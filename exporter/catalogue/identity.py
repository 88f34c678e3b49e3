"""dcgm-exporter's label fields: strings read once per GPU at discovery, put on every series of the GPU (dcgm dialect,
when the counters CSV asks for them; the driver version always) and on the prometheus dialect's info series.

DCGM reads each with the NVML call named here (DcgmCacheManager, DCGM 4.5.3); a call the GPU refuses gives no label.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from exporter.catalogue.model import LabelField

LABEL_FIELDS: tuple[LabelField, ...] = (
    LabelField("driver_version", 1, "DCGM_FI_DRIVER_VERSION", "nvmlSystemGetDriverVersion", "driver_version"),
    LabelField("nvml_version", 2, "DCGM_FI_NVML_VERSION", "nvmlSystemGetNVMLVersion", "nvml_version"),
    LabelField("brand", 51, "DCGM_FI_DEV_BRAND", "nvmlDeviceGetBrand, named as DCGM names it", "brand"),
    LabelField("serial", 53, "DCGM_FI_DEV_SERIAL", "nvmlDeviceGetSerial", "serial"),
    LabelField(
        "inforom_oem_version", 56, "DCGM_FI_DEV_OEM_INFOROM_VER", "nvmlDeviceGetInforomVersion(OEM)", "oem_version"
    ),
    LabelField(
        "inforom_ecc_version", 80, "DCGM_FI_DEV_ECC_INFOROM_VER", "nvmlDeviceGetInforomVersion(ECC)", "ecc_version"
    ),
    LabelField(
        "inforom_power_version",
        81,
        "DCGM_FI_DEV_POWER_INFOROM_VER",
        "nvmlDeviceGetInforomVersion(POWER)",
        "power_version",
    ),
    LabelField(
        "inforom_image_version",
        82,
        "DCGM_FI_DEV_INFOROM_IMAGE_VER",
        "nvmlDeviceGetInforomImageVersion",
        "image_version",
    ),
    LabelField("vbios_version", 85, "DCGM_FI_DEV_VBIOS_VERSION", "nvmlDeviceGetVbiosVersion", "vbios_version"),
)

LABEL_BY_KEY: Mapping[str, LabelField] = MappingProxyType({f.key: f for f in LABEL_FIELDS})

# put on every dcgm series whatever the counters CSV says (as gpu-pulse always has: rules and dashboards read it)
ALWAYS_LABELLED = frozenset({"driver_version"})
# of these, the ones the prometheus dialect's `nvidia_gpu_inforom_info` carries; the others are on `nvidia_gpu_info`
INFOROM_KEYS = ("inforom_image_version", "inforom_oem_version", "inforom_ecc_version", "inforom_power_version")

# label fields not every board gives -> which do (docs/migration.md); the board's refusal names it at run time
LABEL_UNAVAILABLE: Mapping[str, str] = MappingProxyType(
    {
        "inforom_power_version": "boards whose InfoROM has a power object; the V100, A100, A10, L4, H100 and H200 "
        "boards have none (nvidia-smi -q: Power Management Object N/A)",
    }
)

# nvmlBrandType_t (nvml.h) -> the string DCGM publishes for it (DcgmCacheManager, DCGM_FI_DEV_BRAND)
BRAND_NAMES: Mapping[int, str] = MappingProxyType(
    {
        1: "Quadro",
        2: "Tesla",
        3: "NVS",
        4: "Grid",
        5: "GeForce",
        6: "Titan",
        7: "NVIDIA Virtual Applications",
        8: "NVIDIA Virtual PC",
        9: "NVIDIA Virtual Compute Server",
        10: "NVIDIA RTX Virtual Workstation",
        11: "NVIDIA vGaming",
        12: "Quadro RTX",
        13: "NVIDIA RTX",
        14: "NVIDIA",
        15: "GeForce RTX",
        16: "Titan RTX",
    }
)
UNKNOWN_BRAND = "Unknown"
