"""GPU Performance Monitoring (Hopper and newer): SM, tensor, DRAM and graphics-engine activity without DCGM.

Activity is the difference of two GPM samples taken more than 100 ms apart; the sampler keeps the previous sample of
its device (a GPU, or a MIG instance sampled through its parent) and reuses two sample buffers. Best effort: a device
that says NOT_SUPPORTED is off for GPM for good.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from exporter.nvml.errors import SUCCESS, Disposition, disposition, status_code
from exporter.nvml.faults import DeviceFaults

MIN_SPACING_SECONDS = 0.1  # NVML needs the two samples more than 100 ms apart

GPM = "gpm"  # the name GPM goes by in a device's "unsupported" set

# catalogue key -> nvmlGpmMetricId_t (nvml.h), all in percent
METRICS: Mapping[str, int] = MappingProxyType(
    {
        "gr_engine_active": 1,  # NVML_GPM_METRIC_GRAPHICS_UTIL
        "sm_active": 2,  # NVML_GPM_METRIC_SM_UTIL
        "sm_occupancy": 3,  # NVML_GPM_METRIC_SM_OCCUPANCY
        "tensor_active": 5,  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
        "dram_active": 10,  # NVML_GPM_METRIC_DRAM_BW_UTIL
        "fp64_active": 11,  # NVML_GPM_METRIC_FP64_UTIL
        "fp32_active": 12,  # NVML_GPM_METRIC_FP32_UTIL
        "fp16_active": 13,  # NVML_GPM_METRIC_FP16_UTIL
    }
)


# catalogue key -> (nvmlGpmMetricId_t, factor to the catalogue's unit): per-GPU rates, the mean over the interval
# between two samples. PCIe: NVML_GPM_METRIC_PCIE_TX_PER_SEC / _RX_PER_SEC (nvml.h: "in MiB/sec") -> KB/s (x 1024).
RATES: Mapping[str, tuple[int, float]] = MappingProxyType({"pcie_tx": (20, 1024.0), "pcie_rx": (21, 1024.0)})


def gpm_supported(nvml: Any, handle: Any, faults: DeviceFaults) -> bool:
    """Whether the GPU supports GPM; a refusal is recorded so it is not asked again. A lost GPU raises."""
    if GPM in faults.unsupported:
        return False
    try:
        support = nvml.nvmlGpmQueryDeviceSupport(handle)
    except nvml.NVMLError as exc:
        if faults.record(GPM, exc) is Disposition.LOST:
            raise
        return False
    if not int(support.isSupportedDevice):
        faults.unsupported.add(GPM)
        return False
    return True


class GpmSampler:
    """GPM activity of one GPU, or of one MIG instance of it (`mig_handle` and `gpu_instance_id` given).

    A MIG instance is sampled through its own handle (nvml.h, nvmlGpmSampleGet: "The device handle or MIG device
    handle to get samples for"); a driver that refuses that gets nvmlGpmMigSampleGet on the parent with the instance's
    GPU instance id instead, from then on.
    """

    def __init__(
        self,
        nvml: Any,
        parent_handle: Any,
        keys: tuple[str, ...],
        clock: Callable[[], float],
        *,
        gpu_instance_id: int | None = None,
        mig_handle: Any = None,
    ) -> None:
        self._nvml = nvml
        self._handle = parent_handle
        self._gpu_instance_id = gpu_instance_id
        self._mig_handle = mig_handle  # None: sample the parent (a whole GPU, or per instance through the parent)
        self._clock = clock
        self._keys = tuple(key for key in (*METRICS, *RATES) if key in keys)
        self._samples: list[Any] = []
        self._previous_at: float | None = None  # when samples[0] was taken
        self._request: Any = None
        self._last: dict[str, float] = {}

    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys

    def read(self, faults: DeviceFaults, into: dict[str, float]) -> bool:
        """Add this cycle's activity to `into` (nothing on the first cycle). False when GPM failed this cycle.

        A lost GPU raises NVMLError; NOT_SUPPORTED switches GPM off for the device (recorded in `faults`).
        """
        if not self._keys or GPM in faults.unsupported:
            return True
        nvml = self._nvml
        try:
            self._read(nvml)
        except nvml.NVMLError as exc:
            kind = faults.record(GPM, exc)
            if kind is Disposition.LOST:
                raise
            if kind is Disposition.UNSUPPORTED:
                self.close()
                self._last.clear()
                return True
            return False
        into.update(self._last)
        return True

    def _read(self, nvml: Any) -> None:
        if not self._samples:
            self._samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
        now = self._clock()
        if self._previous_at is not None and now - self._previous_at <= MIN_SPACING_SECONDS:
            return  # too soon for a new difference: report the last one again
        current = self._samples[1]
        self._take(nvml, current)
        if self._previous_at is not None:
            self._last = self._difference(nvml, self._samples[0], current)
        self._samples.reverse()  # the sample just taken becomes the previous one
        self._previous_at = now

    def _take(self, nvml: Any, sample: Any) -> None:
        if self._mig_handle is not None:
            try:
                nvml.nvmlGpmSampleGet(self._mig_handle, sample)
                return
            except nvml.NVMLError as exc:
                if disposition(status_code(exc)) is Disposition.LOST or self._gpu_instance_id is None:
                    raise
                self._mig_handle = None  # an older driver: sample the instance through its parent from now on
        if self._gpu_instance_id is None:
            nvml.nvmlGpmSampleGet(self._handle, sample)
        else:
            nvml.nvmlGpmMigSampleGet(self._handle, self._gpu_instance_id, sample)

    def _difference(self, nvml: Any, earlier: Any, later: Any) -> dict[str, float]:
        request = self._request
        if request is None:
            request = self._request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(self._keys)
            for i, key in enumerate(self._keys):
                request.metrics[i].metricId = METRICS[key] if key in METRICS else RATES[key][0]
        request.sample1 = earlier
        request.sample2 = later
        nvml.nvmlGpmMetricsGet(request)
        values: dict[str, float] = {}
        for i, key in enumerate(self._keys):
            metric = request.metrics[i]
            if int(metric.nvmlReturn) == SUCCESS:
                values[key] = float(metric.value) * (RATES[key][1] if key in RATES else 1.0)
        return values

    def close(self) -> None:
        """Free the sample buffers (they live in the NVML library)."""
        samples, self._samples = self._samples, []
        self._previous_at = None
        for sample in samples:
            try:
                self._nvml.nvmlGpmSampleFree(sample)
            except self._nvml.NVMLError:
                pass
