"""NVML GPU Performance Monitoring (GPM, Hopper and newer): samples, and metrics computed from two of them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulation.machine import Node, SimGpu, SimMig
from simulation.nvml import cabi
from simulation.nvml.cabi import as_int, pointer_value, set_pointer, target

Call = Callable[..., Any]

GPM_SUPPORT_VERSION = 1
GPM_METRICS_GET_VERSION = 1

GRAPHICS_UTIL = 1
SM_UTIL = 2
SM_OCCUPANCY = 3
INTEGER_UTIL = 4
ANY_TENSOR_UTIL = 5
DFMA_TENSOR_UTIL = 6
HMMA_TENSOR_UTIL = 7
IMMA_TENSOR_UTIL = 9
DRAM_BW_UTIL = 10
FP64_UTIL = 11
FP32_UTIL = 12
FP16_UTIL = 13
PCIE_TX_PER_SEC = 20
PCIE_RX_PER_SEC = 21
NVLINK_TOTAL_RX_PER_SEC = 60
NVLINK_TOTAL_TX_PER_SEC = 61

_INFO: dict[int, tuple[bytes, bytes, bytes]] = {
    GRAPHICS_UTIL: (b"gr_util", b"graphics engine activity", b"%"),
    SM_UTIL: (b"sm_util", b"SM activity", b"%"),
    SM_OCCUPANCY: (b"sm_occupancy", b"SM occupancy", b"%"),
    INTEGER_UTIL: (b"int_util", b"integer pipe activity", b"%"),
    ANY_TENSOR_UTIL: (b"tensor_util", b"any tensor pipe activity", b"%"),
    DFMA_TENSOR_UTIL: (b"dfma_util", b"DFMA tensor pipe activity", b"%"),
    HMMA_TENSOR_UTIL: (b"hmma_util", b"HMMA tensor pipe activity", b"%"),
    IMMA_TENSOR_UTIL: (b"imma_util", b"IMMA tensor pipe activity", b"%"),
    DRAM_BW_UTIL: (b"dram_bw_util", b"DRAM bandwidth utilization", b"%"),
    FP64_UTIL: (b"fp64_util", b"FP64 pipe activity", b"%"),
    FP32_UTIL: (b"fp32_util", b"FP32 pipe activity", b"%"),
    FP16_UTIL: (b"fp16_util", b"FP16 pipe activity", b"%"),
    PCIE_TX_PER_SEC: (b"pcie_tx", b"PCIe transmit", b"MiB/s"),
    PCIE_RX_PER_SEC: (b"pcie_rx", b"PCIe receive", b"MiB/s"),
    NVLINK_TOTAL_RX_PER_SEC: (b"nvlink_rx", b"NVLink receive, all links", b"MiB/s"),
    NVLINK_TOTAL_TX_PER_SEC: (b"nvlink_tx", b"NVLink transmit, all links", b"MiB/s"),
}


@dataclass(frozen=True, slots=True)
class _Sample:
    gpu: int
    mig: int | None  # MIG device index, for a per-instance sample
    at: float  # scenario time
    busy: float  # integral of utilization (percent-seconds) up to `at`


class GpmCalls:
    def __init__(self, node: Node) -> None:
        self.node = node
        self._lock = threading.Lock()
        self._samples: dict[int, _Sample | None] = {}  # allocated samples; None until taken
        self._next = 1

    def plain_calls(self) -> dict[str, Call]:
        return {
            "nvmlGpmSampleAlloc": self.sample_alloc,
            "nvmlGpmSampleFree": self.sample_free,
            "nvmlGpmMetricsGet": self.metrics_get,
        }

    def device_calls(self) -> dict[str, Call]:
        return {
            "nvmlGpmQueryDeviceSupport": self.query_device_support,
            "nvmlGpmSampleGet": self.sample_get,
            "nvmlGpmMigSampleGet": self.mig_sample_get,
        }

    def query_device_support(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        s = target(out)
        if s.version != GPM_SUPPORT_VERSION:
            return cabi.ARGUMENT_VERSION_MISMATCH
        s.isSupportedDevice = 1 if gpu.model.gpm else 0
        return cabi.SUCCESS

    def sample_alloc(self, out: Any) -> int:
        with self._lock:
            n = self._next
            self._next += 1
            self._samples[n] = None
        set_pointer(out, cabi.gpm_sample_handle(n))
        return cabi.SUCCESS

    def sample_free(self, sample: Any) -> int:
        n = cabi.decode_gpm_sample(pointer_value(sample))
        with self._lock:
            if n is None or n not in self._samples:
                return cabi.INVALID_ARGUMENT
            del self._samples[n]
        return cabi.SUCCESS

    def _record(self, sample: Any, record: _Sample) -> int:
        n = cabi.decode_gpm_sample(pointer_value(sample))
        with self._lock:
            if n is None or n not in self._samples:
                return cabi.INVALID_ARGUMENT
            self._samples[n] = record
        return cabi.SUCCESS

    def sample_get(self, t: float, gpu: SimGpu, mig: SimMig | None, sample: Any) -> int:
        if not gpu.model.gpm:
            return cabi.NOT_SUPPORTED
        if mig is not None:  # nvml.h, nvmlGpmSampleGet: "The device handle or MIG device handle to get samples for"
            return self._record(sample, _Sample(gpu.index, mig.index, t, mig.integral.at(t)))
        return self._record(sample, _Sample(gpu.index, None, t, gpu.integral.at(t)))

    def mig_sample_get(self, t: float, gpu: SimGpu, mig: SimMig | None, gpu_instance_id: Any, sample: Any) -> int:
        if not gpu.model.gpm:
            return cabi.NOT_SUPPORTED
        if mig is not None or gpu.migs is None:
            return cabi.INVALID_ARGUMENT
        gi = as_int(gpu_instance_id)
        instance = next((m for m in gpu.migs.values() if m.gpu_instance_id == gi), None)
        if instance is None:
            return cabi.NOT_FOUND
        return self._record(sample, _Sample(gpu.index, instance.index, t, instance.integral.at(t)))

    def metrics_get(self, ref: Any) -> int:
        mg = target(ref)
        if mg.version != GPM_METRICS_GET_VERSION:
            return cabi.ARGUMENT_VERSION_MISMATCH
        with self._lock:
            first = self._samples.get(cabi.decode_gpm_sample(pointer_value(mg.sample1)) or 0)
            second = self._samples.get(cabi.decode_gpm_sample(pointer_value(mg.sample2)) or 0)
        if first is None or second is None or (first.gpu, first.mig) != (second.gpu, second.mig):
            return cabi.INVALID_ARGUMENT
        if second.at <= first.at:
            return cabi.INVALID_ARGUMENT
        if not 0 <= mg.numMetrics <= len(mg.metrics):
            return cabi.INVALID_ARGUMENT
        gpu = self.node.gpus[first.gpu]
        if gpu.lost:
            return cabi.GPU_IS_LOST
        activity = (second.busy - first.busy) / (second.at - first.at)  # mean utilization over the interval, %
        for i in range(mg.numMetrics):
            m = mg.metrics[i]
            metric_id = m.metricId
            configured = gpu.gpm_errors.get(metric_id)
            value = None if configured is not None else _metric(gpu, first.mig is not None, metric_id, activity)
            if value is None:
                m.nvmlReturn = configured if configured is not None else cabi.NOT_SUPPORTED
                m.value = 0.0
                continue
            m.nvmlReturn = cabi.SUCCESS
            m.value = value
            short, long, unit = _INFO[metric_id]
            m.metricInfo.shortName = short
            m.metricInfo.longName = long
            m.metricInfo.unit = unit
        return cabi.SUCCESS


def _metric(gpu: SimGpu, per_instance: bool, metric_id: int, activity: float) -> float | None:
    """A GPM metric for a mean utilization `activity` (%) over the sampled interval; None: not supported."""
    tensor = gpu.spec.tensor_fraction
    percent = {
        GRAPHICS_UTIL: activity,
        SM_UTIL: activity * 0.92,
        SM_OCCUPANCY: activity * 0.55,
        INTEGER_UTIL: activity * 0.08,
        ANY_TENSOR_UTIL: activity * 0.92 * tensor,
        HMMA_TENSOR_UTIL: activity * 0.92 * tensor,
        DFMA_TENSOR_UTIL: 0.0,
        IMMA_TENSOR_UTIL: 0.0,
        DRAM_BW_UTIL: min(100.0, activity * 0.6 + (2.0 if activity > 0 else 0.0)),
        FP64_UTIL: 0.0,
        FP32_UTIL: activity * 0.92 * (1.0 - tensor) * 0.7,
        FP16_UTIL: activity * 0.92 * (1.0 - tensor) * 0.2,
    }.get(metric_id)
    if percent is not None:
        return min(100.0, max(0.0, percent))
    if per_instance:
        return None  # bandwidth metrics are per GPU only
    if metric_id in (PCIE_TX_PER_SEC, PCIE_RX_PER_SEC):
        base = gpu.model.pcie_max_kb_per_s * (0.01 + 0.08 * activity / 100.0) / 1024.0
        return base * (0.8 if metric_id == PCIE_RX_PER_SEC else 1.0)
    if metric_id in (NVLINK_TOTAL_TX_PER_SEC, NVLINK_TOTAL_RX_PER_SEC):
        if gpu.model.nvlink_links == 0:
            return None
        total = gpu.model.nvlink_kib_per_s_per_link * gpu.model.nvlink_links * activity / 100.0 / 1024.0
        return total * (0.96 if metric_id == NVLINK_TOTAL_RX_PER_SEC else 1.0)
    return None
