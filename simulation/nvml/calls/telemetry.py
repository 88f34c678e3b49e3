"""NVML device calls for telemetry: utilization, memory, temperature, power, energy, clocks, PCIe."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simulation.machine import Node, SimGpu, SimMig
from simulation.nvml import cabi
from simulation.nvml.cabi import as_int, target

DeviceCall = Callable[..., int]

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_CLOCK_VIDEO = 0, 1, 2, 3
NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
# nvml.h, nvmlDeviceGetPcieThroughput: "querying a byte counter over a 20ms interval": each call blocks that long
PCIE_SAMPLE_SECONDS = 0.020
# nvmlTemperatureThresholds_t
THRESHOLD_SHUTDOWN, THRESHOLD_SLOWDOWN, THRESHOLD_MEM_MAX, THRESHOLD_GPU_MAX = 0, 1, 2, 3
NVML_MEMORY_V2 = 0x02000028
NVML_TEMPERATURE_V1 = 0x100000C
UTILIZATION_SAMPLE_PERIOD_US = 1_000_000
VIDEO_SAMPLE_PERIOD_US = 167_000


class TelemetryCalls:
    def __init__(self, node: Node) -> None:
        self.node = node

    def calls(self) -> dict[str, DeviceCall]:
        return {
            "nvmlDeviceGetUtilizationRates": self.utilization_rates,
            "nvmlDeviceGetEncoderUtilization": self.encoder_utilization,
            "nvmlDeviceGetDecoderUtilization": self.decoder_utilization,
            "nvmlDeviceGetMemoryInfo": self.memory_info,
            "nvmlDeviceGetMemoryInfo_v2": self.memory_info_v2,
            "nvmlDeviceGetTemperature": self.temperature,
            "nvmlDeviceGetTemperatureV": self.temperature_v,
            "nvmlDeviceGetTemperatureThreshold": self.temperature_threshold,
            "nvmlDeviceGetPowerUsage": self.power_usage,
            "nvmlDeviceGetEnforcedPowerLimit": self.enforced_power_limit,
            "nvmlDeviceGetPowerManagementLimit": self.power_management_limit,
            "nvmlDeviceGetPowerManagementDefaultLimit": self.default_power_limit,
            "nvmlDeviceGetPowerManagementLimitConstraints": self.power_limit_constraints,
            "nvmlDeviceGetTotalEnergyConsumption": self.total_energy,
            "nvmlDeviceGetClockInfo": self.clock_info,
            "nvmlDeviceGetMaxClockInfo": self.max_clock_info,
            "nvmlDeviceGetPerformanceState": self.performance_state,
            "nvmlDeviceGetCurrentClocksEventReasons": self.clock_event_reasons,
            "nvmlDeviceGetCurrentClocksThrottleReasons": self.clock_event_reasons,
            "nvmlDeviceGetPcieThroughput": self.pcie_throughput,
            "nvmlDeviceGetPcieReplayCounter": self.pcie_replay_counter,
            "nvmlDeviceGetMaxPcieLinkGeneration": self.max_pcie_generation,
            "nvmlDeviceGetGpuMaxPcieLinkGeneration": self.max_pcie_generation,
            "nvmlDeviceGetMaxPcieLinkWidth": self.max_pcie_width,
            "nvmlDeviceGetFanSpeed": self.fan_speed,
        }

    MIG_HANDLE_CALLS = frozenset({"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2"})

    # --- utilization -----------------------------------------------------------------------------------------

    def utilization_rates(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        if gpu.domain is None:  # MIG enabled
            return cabi.NOT_SUPPORTED
        tick_t = self.node.tick(t) * 1.0
        load = gpu.domain.total(tick_t)
        u = target(out)
        u.gpu = round(load)
        u.memory = round(load * gpu.spec.memory_copy_ratio)
        return cabi.SUCCESS

    def _video(self, t: float, gpu: SimGpu, util: Any, period: Any, encoder: bool) -> int:
        if gpu.mig_enabled:
            return cabi.NOT_SUPPORTED
        curve = gpu.encoder if encoder else gpu.decoder
        target(util).value = round(curve(t))
        target(period).value = VIDEO_SAMPLE_PERIOD_US
        return cabi.SUCCESS

    def encoder_utilization(self, t: float, gpu: SimGpu, mig: SimMig | None, util: Any, period: Any) -> int:
        return self._video(t, gpu, util, period, encoder=True)

    def decoder_utilization(self, t: float, gpu: SimGpu, mig: SimMig | None, util: Any, period: Any) -> int:
        return self._video(t, gpu, util, period, encoder=False)

    # --- memory ----------------------------------------------------------------------------------------------

    @staticmethod
    def _memory(gpu: SimGpu, mig: SimMig | None) -> tuple[int, int, int]:
        """(total, reserved, used) in bytes; `used` excludes `reserved` (the v2 meaning)."""
        if mig is not None:
            return mig.memory_total, 0, mig.domain.memory_used()
        return gpu.memory_total, gpu.memory_reserved, gpu.memory_used()

    def memory_info(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        if self.node.mig_aggregate_refused(gpu, mig):
            return cabi.NO_PERMISSION
        total, reserved, used = self._memory(gpu, mig)
        m = target(out)
        m.total = total
        m.used = used + reserved  # v1: used includes the driver's reserved memory
        m.free = total - reserved - used
        return cabi.SUCCESS

    def memory_info_v2(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        m = target(out)
        if m.version != NVML_MEMORY_V2:
            return cabi.ARGUMENT_VERSION_MISMATCH
        if self.node.mig_aggregate_refused(gpu, mig):
            return cabi.NO_PERMISSION
        total, reserved, used = self._memory(gpu, mig)
        m.total = total
        m.reserved = reserved
        m.used = used
        m.free = total - reserved - used
        return cabi.SUCCESS

    # --- temperature, power, energy --------------------------------------------------------------------------

    def temperature(self, t: float, gpu: SimGpu, mig: SimMig | None, sensor: Any, out: Any) -> int:
        if as_int(sensor) != NVML_TEMPERATURE_GPU:
            return cabi.INVALID_ARGUMENT
        target(out).value = gpu.temperature_c(t, gpu.load(t))
        return cabi.SUCCESS

    def temperature_v(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        v = target(out)
        if v.version != NVML_TEMPERATURE_V1:
            return cabi.ARGUMENT_VERSION_MISMATCH
        if v.sensorType != NVML_TEMPERATURE_GPU:
            return cabi.INVALID_ARGUMENT
        v.temperature = gpu.temperature_c(t, gpu.load(t))
        return cabi.SUCCESS

    def temperature_threshold(self, t: float, gpu: SimGpu, mig: SimMig | None, kind: Any, out: Any) -> int:
        """The board's thresholds (hardware.py cites each board's); the memory threshold only on HBM boards."""
        shutdown, slowdown, gpu_max = gpu.model.thresholds_c
        which = as_int(kind)
        if which == THRESHOLD_SHUTDOWN:
            value = shutdown
        elif which == THRESHOLD_SLOWDOWN:
            value = slowdown
        elif which == THRESHOLD_GPU_MAX:
            value = gpu_max
        elif which == THRESHOLD_MEM_MAX and gpu.model.hbm:
            value = 95  # nvidia-smi -q "Memory Max Operating Temp : 95 C" on the A100 and H100 captures
        elif 0 <= which < 8:
            return cabi.NOT_SUPPORTED  # the acoustic and GPS thresholds: not on these data-center boards
        else:
            return cabi.INVALID_ARGUMENT
        target(out).value = value
        return cabi.SUCCESS

    def power_usage(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        target(out).value = gpu.power_reading_mw(t)
        return cabi.SUCCESS

    # nvml.h: the management limit is the one set on the board; the enforced one "can be different from the
    # nvmlDeviceGetPowerManagementLimit if other limits are set elsewhere. This includes the out of band power limit
    # interface"; the default is the board's at the factory
    def enforced_power_limit(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        target(out).value = gpu.enforced_limit_mw
        return cabi.SUCCESS

    def power_management_limit(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        target(out).value = gpu.management_limit_mw
        return cabi.SUCCESS

    def default_power_limit(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        target(out).value = gpu.model.power_limit_mw
        return cabi.SUCCESS

    def power_limit_constraints(self, t: float, gpu: SimGpu, mig: SimMig | None, low: Any, high: Any) -> int:
        """The range a power management limit may be set in, milliwatts (nvml.h,
        nvmlDeviceGetPowerManagementLimitConstraints); nvidia-smi -q shows it as Min / Max Power Limit."""
        target(low).value = gpu.model.power_limit_min_mw
        target(high).value = gpu.model.power_limit_max_mw
        return cabi.SUCCESS

    def total_energy(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        target(out).value = gpu.energy_mj(t)
        return cabi.SUCCESS

    # --- clocks ----------------------------------------------------------------------------------------------

    def clock_info(self, t: float, gpu: SimGpu, mig: SimMig | None, clock_type: Any, out: Any) -> int:
        kind = as_int(clock_type)
        load = gpu.load(t)
        if kind in (NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM):
            value = gpu.sm_clock_mhz(load)
        elif kind == NVML_CLOCK_MEM:
            value = gpu.model.max_mem_clock_mhz
        elif kind == NVML_CLOCK_VIDEO:
            # the video clock follows the graphics clock up to its own maximum (Max Clocks / Video in the captures
            # cited in simulation/hardware.py)
            value = round(gpu.model.max_video_clock_mhz * gpu.sm_clock_mhz(load) / gpu.model.max_sm_clock_mhz)
        else:
            return cabi.INVALID_ARGUMENT
        target(out).value = value
        return cabi.SUCCESS

    def max_clock_info(self, t: float, gpu: SimGpu, mig: SimMig | None, clock_type: Any, out: Any) -> int:
        kind = as_int(clock_type)
        if kind in (NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM):
            value = gpu.model.max_sm_clock_mhz
        elif kind == NVML_CLOCK_MEM:
            value = gpu.model.max_mem_clock_mhz
        elif kind == NVML_CLOCK_VIDEO:
            value = gpu.model.max_video_clock_mhz
        else:
            return cabi.INVALID_ARGUMENT
        target(out).value = value
        return cabi.SUCCESS

    def performance_state(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        target(out).value = gpu.performance_state(gpu.load(t))
        return cabi.SUCCESS

    def clock_event_reasons(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        target(out).value = gpu.clock_event_reasons(gpu.load(t))
        return cabi.SUCCESS

    # --- PCIe, fan -------------------------------------------------------------------------------------------

    def pcie_throughput(self, t: float, gpu: SimGpu, mig: SimMig | None, counter: Any, out: Any) -> int:
        kind = as_int(counter)
        if kind not in (NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES):
            return cabi.INVALID_ARGUMENT
        self.node.sleep(PCIE_SAMPLE_SECONDS)  # the driver counts bytes for 20 ms before it answers
        t = self.node.now()
        target(out).value = gpu.pcie_kb_per_s(t, gpu.load(t), receive=kind == NVML_PCIE_UTIL_RX_BYTES)
        return cabi.SUCCESS

    def pcie_replay_counter(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        target(out).value = pcie_replays(gpu, t)
        return cabi.SUCCESS

    def max_pcie_generation(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        """nvml.h, nvmlDeviceGetMaxPcieLinkGeneration: "the maximum PCIe link generation possible with this device and
        system" (nvmlDeviceGetGpuMaxPcieLinkGeneration: the device's own); the captures cited in
        simulation/hardware.py show the two equal."""
        target(out).value = gpu.model.pcie_max_generation
        return cabi.SUCCESS

    def max_pcie_width(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        """nvml.h, nvmlDeviceGetMaxPcieLinkWidth: the maximum link width possible with this device and system."""
        target(out).value = gpu.model.pcie_max_width
        return cabi.SUCCESS

    def fan_speed(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        return cabi.NOT_SUPPORTED  # every simulated board is passively cooled


def pcie_replays(gpu: SimGpu, t: float) -> int:
    return int(gpu.spec.counters.pcie_replays_per_hour * max(t, 0.0) / 3600.0)
