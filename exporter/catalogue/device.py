"""Catalogue rows of a GPU's running state: utilization, memory, temperature and its thresholds, power, energy, clocks,
PCIe and NVLink traffic, and the vGPU license.

DCGM field ids are those of dcgm_fields.h (go-dcgm at the commit dcgm-exporter 4.5.3-4.8.2 pins); dcgm names, types
and help texts those of dcgm-exporter's etc/*.csv (see `dcgm_exporter_files`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from exporter.catalogue.model import Measurement, MetricType, Need
from exporter.catalogue.model import constant_labels as labels
from exporter.catalogue.model import rendering as r

G, C = MetricType.GAUGE, MetricType.COUNTER
MIB = 1.0 / (1024 * 1024)

# Clock-event (throttle) reasons: bit values of nvmlClocksEventReasons (nvml.h), named for the `reason` label.
CLOCK_EVENT_REASONS: Mapping[str, int] = MappingProxyType(
    {
        "gpu_idle": 0x1,
        "applications_clocks_setting": 0x2,
        "sw_power_cap": 0x4,
        "hw_slowdown": 0x8,
        "sync_boost": 0x10,
        "sw_thermal_slowdown": 0x20,
        "hw_thermal_slowdown": 0x40,
        "hw_power_brake_slowdown": 0x80,
        "display_clock_setting": 0x100,
    }
)

# NVLink links DCGM has a per-link throughput field for: DCGM_FI_DEV_NVLINK_THROUGHPUT_L0..L17 (dcgm_fields.h; the
# CSV names them by their former spelling DCGM_FI_DEV_NVLINK_BANDWIDTH_L<n>)
NVLINK_LINK_FIELDS: tuple[int, ...] = (440, 441, 442, 443, 444, 445, 475, 476, 477, 478, 479, 480, 446, 447, 448)
NVLINK_LINK_FIELDS += (494, 495, 496)

_NVLINK_RATE = (
    "DCGM (DcgmCacheManager ReadAndCacheNvLinkBandwidth) reads NVML's cumulative KiB counters (rx + tx) and publishes "
    "the difference to its previous reading divided by the seconds between them and by 1000 ('MiB/s'), truncated to "
    "an integer, 0 on the first reading; dcgm-exporter still types it counter (its pull request 658). gpu-pulse "
    "computes the same between two polls."
)

UTILIZATION: tuple[Measurement, ...] = (
    Measurement(
        "gpu_util",
        "%",
        "nvmlDeviceGetUtilizationRates.gpu",
        r("DCGM_FI_DEV_GPU_UTIL", G, "GPU utilization (in %)."),
        r("nvidia_gpu_utilization_ratio", G, "Fraction of the last sample period the GPU was busy.", 0.01),
        dcgm_fields=(203,),
        needs=frozenset({Need.NO_MIG}),
    ),
    Measurement(
        "mem_copy_util",
        "%",
        "nvmlDeviceGetUtilizationRates.memory",
        r("DCGM_FI_DEV_MEM_COPY_UTIL", G, "Memory utilization (in %)."),
        r(
            "nvidia_gpu_memory_copy_utilization_ratio",
            G,
            "Fraction of the last sample period device memory was being read or written.",
            0.01,
        ),
        dcgm_fields=(204,),
        needs=frozenset({Need.NO_MIG}),
    ),
    Measurement(
        "enc_util",
        "%",
        "nvmlDeviceGetEncoderUtilization",
        r("DCGM_FI_DEV_ENC_UTIL", G, "Encoder utilization (in %)."),
        r("nvidia_gpu_encoder_utilization_ratio", G, "Fraction of time the video encoder was busy.", 0.01),
        dcgm_fields=(206,),
        needs=frozenset({Need.NO_MIG}),
    ),
    Measurement(
        "dec_util",
        "%",
        "nvmlDeviceGetDecoderUtilization",
        r("DCGM_FI_DEV_DEC_UTIL", G, "Decoder utilization (in %)."),
        r("nvidia_gpu_decoder_utilization_ratio", G, "Fraction of time the video decoder was busy.", 0.01),
        dcgm_fields=(207,),
        needs=frozenset({Need.NO_MIG}),
    ),
)

MEMORY: tuple[Measurement, ...] = (
    Measurement(
        "fb_used",
        "B",
        "nvmlDeviceGetMemoryInfo_v2.used",
        mig=True,
        dcgm=r("DCGM_FI_DEV_FB_USED", G, "Framebuffer memory used (in MiB).", MIB, integer=True),
        prometheus=r("nvidia_gpu_memory_used_bytes", G, "Framebuffer memory allocated, in bytes."),
        dcgm_fields=(252,),
    ),
    Measurement(
        "fb_free",
        "B",
        "nvmlDeviceGetMemoryInfo_v2.free",
        mig=True,
        dcgm=r("DCGM_FI_DEV_FB_FREE", G, "Framebuffer memory free (in MiB).", MIB, integer=True),
        prometheus=r("nvidia_gpu_memory_free_bytes", G, "Framebuffer memory free, in bytes."),
        dcgm_fields=(251,),
    ),
    Measurement(
        "fb_reserved",
        "B",
        "nvmlDeviceGetMemoryInfo_v2.reserved",
        mig=True,
        dcgm=r("DCGM_FI_DEV_FB_RESERVED", G, "Framebuffer memory reserved (in MiB).", MIB, integer=True),
        prometheus=r("nvidia_gpu_memory_reserved_bytes", G, "Framebuffer memory reserved by the driver, in bytes."),
        dcgm_fields=(253,),
    ),
    Measurement(
        "fb_total",
        "B",
        "nvmlDeviceGetMemoryInfo_v2.total",
        mig=True,
        dcgm=r("DCGM_FI_DEV_FB_TOTAL", G, "Framebuffer memory total (in MiB).", MIB, integer=True),
        prometheus=r("nvidia_gpu_memory_total_bytes", G, "Framebuffer memory in total, in bytes."),
        dcgm_fields=(250,),
    ),
)

TEMPERATURE: tuple[Measurement, ...] = (
    Measurement(
        "gpu_temp",
        "C",
        "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
        r("DCGM_FI_DEV_GPU_TEMP", G, "GPU temperature (in C)."),
        r("nvidia_gpu_temperature_celsius", G, "GPU die temperature, in degrees Celsius."),
        dcgm_fields=(150,),
    ),
    Measurement(
        "memory_temp",
        "C",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP=82)",
        r("DCGM_FI_DEV_MEMORY_TEMP", G, "Memory temperature (in C)."),
        r("nvidia_gpu_memory_temperature_celsius", G, "HBM memory temperature, in degrees Celsius."),
        dcgm_fields=(140,),
        needs=frozenset({Need.HBM}),
    ),
    Measurement(
        "slowdown_temp",
        "C",
        "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)",
        r("DCGM_FI_DEV_SLOWDOWN_TEMP", G, "Slowdown temperature for the device (in C)."),
        r(
            "nvidia_gpu_slowdown_temperature_celsius",
            G,
            "The board's temperature at which the GPU begins hardware slowdown, in degrees Celsius.",
        ),
        dcgm_fields=(158,),
    ),
    Measurement(
        "shutdown_temp",
        "C",
        "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)",
        r("DCGM_FI_DEV_SHUTDOWN_TEMP", G, "Shutdown temperature for the device (in C)."),
        r(
            "nvidia_gpu_shutdown_temperature_celsius",
            G,
            "The board's temperature at which the GPU shuts down to protect itself, in degrees Celsius.",
        ),
        dcgm_fields=(159,),
    ),
    Measurement(
        "max_operating_temp",
        "C",
        "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_GPU_MAX)",
        r("DCGM_FI_DEV_GPU_MAX_OP_TEMP", G, "Maximum operating temperature for this GPU (in C)."),
        r(
            "nvidia_gpu_max_operating_temperature_celsius",
            G,
            "The board's temperature above which the GPU may be throttled below its base clock, in degrees Celsius.",
        ),
        dcgm_fields=(152,),
    ),
)

POWER: tuple[Measurement, ...] = (
    Measurement(
        "power_usage",
        "mW",
        "nvmlDeviceGetPowerUsage",
        r("DCGM_FI_DEV_POWER_USAGE", G, "Power draw (in W).", 0.001),
        r(
            "nvidia_gpu_power_watts",
            G,
            "Power draw, in watts: a 1 s average on Ampere and newer except A100 (GA100), an instantaneous reading on "
            "A100 and older GPUs (nvml.h, nvmlDeviceGetPowerUsage).",
            0.001,
        ),
        dcgm_fields=(155,),
    ),
    # DCGM reads field 160 with nvmlDeviceGetPowerManagementLimit and field 164 with nvmlDeviceGetEnforcedPowerLimit,
    # each milliwatts / 1000 in integer arithmetic (NVIDIA/DCGM dcgmlib/src/DcgmCacheManager.cpp,
    # DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS and _ENFORCED_WATTS: `powerLimitInt / 1000`). They differ under a
    # cap set elsewhere, "the out of band power limit interface" among them (nvml.h, nvmlDeviceGetEnforcedPowerLimit)
    Measurement(
        "power_limit",
        "mW",
        "nvmlDeviceGetEnforcedPowerLimit",
        r(
            "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
            G,
            "Effective power limit that the driver enforces (in W).",
            0.001,
            integer=True,
        ),
        r(
            "nvidia_gpu_power_limit_watts",
            G,
            "Enforced power limit, in watts: the lowest of every limiter, an out-of-band cap among them.",
            0.001,
        ),
        dcgm_fields=(164,),
    ),
    Measurement(
        "power_management_limit",
        "mW",
        "nvmlDeviceGetPowerManagementLimit",
        r("DCGM_FI_DEV_POWER_MGMT_LIMIT", G, "Power management limit (in W).", 0.001, integer=True),
        r(
            "nvidia_gpu_power_management_limit_watts",
            G,
            "Power management limit set on the board (nvidia-smi -pl), in watts; the enforced limit is lower when a "
            "cap is set elsewhere.",
            0.001,
        ),
        dcgm_fields=(160,),
    ),
    Measurement(
        "total_energy",
        "mJ",
        "nvmlDeviceGetTotalEnergyConsumption",
        r("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", C, "Total energy consumption since boot (in mJ)."),
        r(
            "nvidia_gpu_energy_joules_total",
            C,
            "Energy consumed since the driver was loaded, in joules (it starts again from 0 when the driver reloads).",
            0.001,
        ),
        dcgm_fields=(156,),
    ),
)

CLOCKS: tuple[Measurement, ...] = (
    Measurement(
        "sm_clock",
        "MHz",
        "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
        r("DCGM_FI_DEV_SM_CLOCK", G, "SM clock frequency (in MHz)."),
        r("nvidia_gpu_sm_clock_hertz", G, "SM clock frequency, in hertz.", 1e6),
        dcgm_fields=(100,),
    ),
    Measurement(
        "mem_clock",
        "MHz",
        "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)",
        r("DCGM_FI_DEV_MEM_CLOCK", G, "Memory clock frequency (in MHz)."),
        r("nvidia_gpu_memory_clock_hertz", G, "Memory clock frequency, in hertz.", 1e6),
        dcgm_fields=(101,),
    ),
    Measurement(
        "pstate",
        "",
        "nvmlDeviceGetPerformanceState",
        r("DCGM_FI_DEV_PSTATE", G, "Performance state (P-State) 0-15. 0=highest."),
        r("nvidia_gpu_performance_state", G, "Performance state, 0 (highest) to 15 (lowest)."),
        dcgm_fields=(190,),
    ),
    Measurement(
        "clock_event_reasons",
        "bitmask",
        "nvmlDeviceGetCurrentClocksEventReasons",
        r("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", G, "Current clock event reasons (bitmask)."),
        r(
            "nvidia_gpu_clock_event_active",
            G,
            "1 while the named clock event (throttle) reason is active.",
            bits=CLOCK_EVENT_REASONS,
            bit_label="reason",
        ),
        dcgm_fields=(112,),
    ),
)


def _pcie(direction: str, field_id: int, counter: int) -> Measurement:
    word = "transmitted" if direction == "tx" else "received"
    long = "transmit" if direction == "tx" else "receive"
    return Measurement(
        f"pcie_{direction}",
        "KB/s",
        # Hopper and newer: GPM's NVML_GPM_METRIC_PCIE_{TX,RX}_PER_SEC, the mean over the poll interval (as
        # dcgm-exporter's profiling field is an interval figure). Older GPUs: nvmlDeviceGetPcieThroughput, which nvml.h
        # describes as a byte counter over a 20 ms interval: it blocks that long, so it is taken every 5 s, off the
        # poll's path, and held in between.
        f"GPM PCIE_{direction.upper()}_PER_SEC, else nvmlDeviceGetPcieThroughput({counter})",
        r(
            f"DCGM_FI_PROF_PCIE_{direction.upper()}_BYTES",
            G,
            f"The rate of data {word} over the PCIe bus (in bytes/s).",
            1024.0,
        ),
        r(
            f"nvidia_gpu_pcie_{long}_bytes_per_second",
            G,
            f"PCIe {long} throughput, bytes/s: the mean over the poll interval on Hopper and newer (GPM), a 20 ms "
            "sample taken every 5 s on older GPUs.",
            1024.0,
        ),
        dcgm_fields=(field_id,),
        dcgm_computes="DCGM's profiling module gives the rate over its sample period; gpu-pulse gives GPM's mean over "
        "the poll interval on Hopper and newer, nvmlDeviceGetPcieThroughput's 20 ms sample (KB/s x 1024) before.",
    )


PCIE: tuple[Measurement, ...] = (
    _pcie("tx", 1009, 0),
    _pcie("rx", 1010, 1),
    Measurement(
        "pcie_replay",
        "count",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_PCIE_REPLAY_COUNTER=94)",
        r("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", C, "Total number of PCIe retries."),
        r(
            "nvidia_gpu_pcie_replays_total",
            C,
            "PCIe replays (link-level retries) since the driver was loaded.",
        ),
        dcgm_fields=(202,),
    ),
)


def _nvlink_link_rate(link: int, field_id: int) -> Measurement:
    return Measurement(
        f"nvlink_bandwidth_l{link}",
        "KB/s",
        f"nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX=138/139, scopeId={link}), as a rate",
        dcgm=r(
            f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L{link}",
            C,
            f"The number of bytes of active NVLink rx or tx data including both header and payload (link {link}).",
            0.001,
            integer=True,
        ),
        prometheus=None,
        dcgm_fields=(field_id,),
        needs=frozenset({Need.NVLINK}),
        default=False,
        dcgm_computes=_NVLINK_RATE,
    )


NVLINK: tuple[Measurement, ...] = (
    Measurement(
        "nvlink_tx",
        "KiB",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX=138)",
        dcgm=None,
        prometheus=r(
            "nvidia_gpu_nvlink_bytes_total",
            C,
            "NVLink data bytes since the driver was loaded.",
            1024.0,
            const_labels=labels(direction="transmit"),
        ),
        dcgm_fields=(449,),
        needs=frozenset({Need.NVLINK}),
    ),
    Measurement(
        "nvlink_rx",
        "KiB",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX=139)",
        dcgm=None,
        prometheus=r(
            "nvidia_gpu_nvlink_bytes_total",
            C,
            "NVLink data bytes since the driver was loaded.",
            1024.0,
            const_labels=labels(direction="receive"),
        ),
        dcgm_fields=(449,),
        needs=frozenset({Need.NVLINK}),
    ),
    Measurement(
        "nvlink_total",
        "KB/s",
        "nvlink_tx + nvlink_rx (all links), as a rate between two polls",
        dcgm=r(
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            C,
            "Total number of NVLink bandwidth counters for all lanes.",
            0.001,
            integer=True,
        ),
        prometheus=None,
        dcgm_fields=(449,),
        needs=frozenset({Need.NVLINK}),
        dcgm_computes=_NVLINK_RATE,
    ),
    *(_nvlink_link_rate(link, field_id) for link, field_id in enumerate(NVLINK_LINK_FIELDS)),
    *(
        Measurement(
            f"nvlink_link_{direction}",
            "KiB",
            f"nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{direction.upper()}, scopeId=<link>)",
            vector=True,
            dcgm=None,
            prometheus=r(
                "nvidia_gpu_nvlink_link_bytes_total",
                C,
                "NVLink data bytes since the driver was loaded, per link.",
                1024.0,
                const_labels=labels(direction=word),
                vector_label="link",
            ),
            dcgm_fields=NVLINK_LINK_FIELDS,
            needs=frozenset({Need.NVLINK}),
            default=False,
        )
        for direction, word in (("tx", "transmit"), ("rx", "receive"))
    ),
)

VGPU: tuple[Measurement, ...] = (
    Measurement(
        "vgpu_license_status",
        "bool",
        "nvmlDeviceGetGridLicensableFeatures_v4 (the vGPU feature's state)",
        r("DCGM_FI_DEV_VGPU_LICENSE_STATUS", G, "vGPU License status"),
        r(
            "nvidia_gpu_vgpu_licensed",
            G,
            "1 while this GPU's vGPU software license is active; 0 where there is no vGPU licensing (bare metal, "
            "passthrough).",
        ),
        dcgm_fields=(526,),
        dcgm_computes="DCGM publishes 0 when the GPU supports no vGPU licensing (bare metal), else whether the vGPU "
        "feature's state is licensed; gpu-pulse does the same.",
    ),
)
