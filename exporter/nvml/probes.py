"""The plain per-cycle reads of one device: one NVML call each, in the native unit the catalogue names.

The table is built once per device at discovery (no per-cycle rebuilding); a probe the device says NOT_SUPPORTED for is
removed from that device's table for good. Counters that NVML exposes as field values are read in one batch instead
(see `fields.py`). Board constants (temperature thresholds) are read once, when the device's reader is built; the vGPU
license once a minute; PCIe throughput, which blocks in the driver, off the poll's path (`pcie.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from exporter.nvml.errors import FUNCTION_NOT_FOUND, status_code

# pynvml constants (nvml.h): sensor and clock selectors
_TEMPERATURE_GPU = 0
_CLOCK_SM = 1
_CLOCK_MEM = 2
_PCIE_TX = 0
_PCIE_RX = 1
# nvmlTemperatureThresholds_t
_THRESHOLD_SHUTDOWN = 0
_THRESHOLD_SLOWDOWN = 1
_THRESHOLD_GPU_MAX = 3
_LICENSE_FEATURE_VGPU = 1  # NVML_GRID_LICENSE_FEATURE_CODE_VGPU


@dataclass(frozen=True, slots=True)
class Probe:
    """One NVML call that yields the values of `keys`, in that order."""

    name: str  # for logs and the per-device "unsupported" set
    keys: tuple[str, ...]
    read: Callable[[Any, Any], tuple[float, ...]]  # (nvml module, handle) -> values
    every: int = 1  # read every Nth cycle; the last values are reported in between
    constant: bool = False  # changes seldom: read every `constant_every` cycles
    static: bool = False  # never changes while the driver runs: read on the reader's first cycle only


def _utilization(nvml: Any, handle: Any) -> tuple[float, ...]:
    rates = nvml.nvmlDeviceGetUtilizationRates(handle)
    return (float(rates.gpu), float(rates.memory))


def _encoder(nvml: Any, handle: Any) -> tuple[float, ...]:
    return (float(nvml.nvmlDeviceGetEncoderUtilization(handle)[0]),)


def _decoder(nvml: Any, handle: Any) -> tuple[float, ...]:
    return (float(nvml.nvmlDeviceGetDecoderUtilization(handle)[0]),)


def _memory(nvml: Any, handle: Any) -> tuple[float, ...]:
    mem = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)  # v2: `used` excludes `reserved`
    return (float(mem.used), float(mem.free), float(mem.reserved), float(mem.total))


def _gpu_temperature(nvml: Any, handle: Any) -> tuple[float, ...]:
    return (float(nvml.nvmlDeviceGetTemperature(handle, _TEMPERATURE_GPU)),)


def _power_usage(nvml: Any, handle: Any) -> tuple[float, ...]:
    return (float(nvml.nvmlDeviceGetPowerUsage(handle)),)


def _power_limit(nvml: Any, handle: Any) -> tuple[float, ...]:
    return (float(nvml.nvmlDeviceGetEnforcedPowerLimit(handle)),)


def _power_management_limit(nvml: Any, handle: Any) -> tuple[float, ...]:
    return (float(nvml.nvmlDeviceGetPowerManagementLimit(handle)),)


def _energy(nvml: Any, handle: Any) -> tuple[float, ...]:
    return (float(nvml.nvmlDeviceGetTotalEnergyConsumption(handle)),)


def _sm_clock(nvml: Any, handle: Any) -> tuple[float, ...]:
    return (float(nvml.nvmlDeviceGetClockInfo(handle, _CLOCK_SM)),)


def _memory_clock(nvml: Any, handle: Any) -> tuple[float, ...]:
    return (float(nvml.nvmlDeviceGetClockInfo(handle, _CLOCK_MEM)),)


def _pstate(nvml: Any, handle: Any) -> tuple[float, ...]:
    return (float(nvml.nvmlDeviceGetPerformanceState(handle)),)


def _clock_event_reasons(nvml: Any, handle: Any) -> tuple[float, ...]:
    try:
        return (float(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)),)
    except nvml.NVMLError as exc:
        if status_code(exc) != FUNCTION_NOT_FOUND:
            raise
    # drivers before R535 only have the old name of the same bitmask
    return (float(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)),)


def _threshold(kind: int) -> Callable[[Any, Any], tuple[float, ...]]:
    def read(nvml: Any, handle: Any) -> tuple[float, ...]:
        return (float(nvml.nvmlDeviceGetTemperatureThreshold(handle, kind)),)

    return read


def _vgpu_license(nvml: Any, handle: Any) -> tuple[float, ...]:
    """As DCGM (DcgmCacheManager, DCGM_FI_DEV_VGPU_LICENSE_STATUS): 0 where the GPU has no vGPU licensing (bare metal),
    else whether the vGPU feature is licensed; no value when the GPU lists no vGPU feature."""
    features = nvml.nvmlDeviceGetGridLicensableFeatures(handle)
    if not int(features.isGridLicenseSupported):
        return (0.0,)
    for i in range(min(int(features.licensableFeaturesCount), len(features.gridLicensableFeatures))):
        feature = features.gridLicensableFeatures[i]
        if int(feature.featureCode) == _LICENSE_FEATURE_VGPU:
            return (1.0 if int(feature.featureState) > 0 else 0.0,)
    return ()


def _pcie_tx(nvml: Any, handle: Any) -> tuple[float, ...]:
    return (float(nvml.nvmlDeviceGetPcieThroughput(handle, _PCIE_TX)),)


def _pcie_rx(nvml: Any, handle: Any) -> tuple[float, ...]:
    return (float(nvml.nvmlDeviceGetPcieThroughput(handle, _PCIE_RX)),)


MEMORY = Probe("memory", ("fb_used", "fb_free", "fb_reserved", "fb_total"), _memory)

GPU_PROBES: tuple[Probe, ...] = (
    Probe("utilization", ("gpu_util", "mem_copy_util"), _utilization),
    Probe("encoder_utilization", ("enc_util",), _encoder),
    Probe("decoder_utilization", ("dec_util",), _decoder),
    MEMORY,
    Probe("gpu_temperature", ("gpu_temp",), _gpu_temperature),
    Probe("power_usage", ("power_usage",), _power_usage),
    Probe("power_limit", ("power_limit",), _power_limit),
    Probe("power_management_limit", ("power_management_limit",), _power_management_limit, constant=True),
    Probe("total_energy", ("total_energy",), _energy),
    Probe("sm_clock", ("sm_clock",), _sm_clock),
    Probe("memory_clock", ("mem_clock",), _memory_clock),
    Probe("performance_state", ("pstate",), _pstate),
    Probe("clock_event_reasons", ("clock_event_reasons",), _clock_event_reasons),
    Probe("pcie_tx_throughput", ("pcie_tx",), _pcie_tx),
    Probe("pcie_rx_throughput", ("pcie_rx",), _pcie_rx),
    Probe("slowdown_threshold", ("slowdown_temp",), _threshold(_THRESHOLD_SLOWDOWN), static=True),
    Probe("shutdown_threshold", ("shutdown_temp",), _threshold(_THRESHOLD_SHUTDOWN), static=True),
    Probe("gpu_max_threshold", ("max_operating_temp",), _threshold(_THRESHOLD_GPU_MAX), static=True),
    Probe("vgpu_license", ("vgpu_license_status",), _vgpu_license, constant=True),
)

MIG_PROBES: tuple[Probe, ...] = (MEMORY,)

ProbeEntry = tuple[Probe, tuple[tuple[int, str], ...]]  # a probe and the (position, key) pairs of its values kept

PCIE_PROBES = frozenset({"pcie_tx_throughput", "pcie_rx_throughput"})

PROBE_KEYS: frozenset[str] = frozenset(key for probe in GPU_PROBES for key in probe.keys)


def probes_for(enabled: frozenset[str], *, mig: bool, pcie_every: int = 1, constant_every: int = 1) -> list[ProbeEntry]:
    """The probes one device runs, each with the (position, key) pairs of its values that are enabled.

    A probe none of whose keys is enabled is left out: it is never called. PCIe throughput blocks 20 ms per call inside
    the driver, so it runs every `pcie_every` cycles; seldom changing figures every `constant_every`.
    """
    table = MIG_PROBES if mig else GPU_PROBES
    chosen: list[ProbeEntry] = []
    for probe in table:
        keep = tuple((i, key) for i, key in enumerate(probe.keys) if key in enabled)
        if not keep:
            continue
        every = pcie_every if probe.name in PCIE_PROBES else constant_every if probe.constant else 1
        if every > 1:
            probe = replace(probe, every=every)
        chosen.append((probe, keep))
    return chosen
