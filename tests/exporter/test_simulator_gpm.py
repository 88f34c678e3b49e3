"""GPM (GPU Performance Monitoring) through the real pynvml: support per model, metrics from two samples."""

from __future__ import annotations

from collections.abc import Iterator

import pynvml
import pytest

from simulation import Simulator, install
from tests.support.clocks import ManualClock

METRICS = (
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
    pynvml.NVML_GPM_METRIC_SM_UTIL,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
)


@pytest.fixture
def h100(clock: ManualClock) -> Iterator[Simulator]:
    s = Simulator("h100x8", clock=clock)
    with install(s):
        pynvml.nvmlInit()
        yield s
        pynvml.nvmlShutdown()


def metrics(first: object, second: object, ids: tuple[int, ...] = METRICS) -> dict[int, tuple[int, float]]:
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = len(ids)
    mg.sample1 = first
    mg.sample2 = second
    for i, metric_id in enumerate(ids):
        mg.metrics[i].metricId = metric_id
    pynvml.nvmlGpmMetricsGet(mg)
    return {mg.metrics[i].metricId: (mg.metrics[i].nvmlReturn, mg.metrics[i].value) for i in range(len(ids))}


@pytest.mark.parametrize(("scenario", "supported"), [("h100x8", 1), ("a100-mig", 0)])
def test_gpm_support_per_model(scenario: str, supported: int) -> None:
    with install(Simulator(scenario, clock=ManualClock())):
        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            assert pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == supported
            sample = pynvml.nvmlGpmSampleAlloc()
            if supported:
                pynvml.nvmlGpmSampleGet(h, sample)
            else:
                with pytest.raises(pynvml.NVMLError_NotSupported):
                    pynvml.nvmlGpmSampleGet(h, sample)
            pynvml.nvmlGpmSampleFree(sample)
        finally:
            pynvml.nvmlShutdown()


def test_metrics_from_two_samples_follow_the_load(h100: Simulator, clock: ManualClock) -> None:
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    try:
        pynvml.nvmlGpmSampleGet(h, s1)
        clock.now += 10
        pynvml.nvmlGpmSampleGet(h, s2)
        busy = metrics(s1, s2)
        assert all(ret == pynvml.NVML_SUCCESS for ret, _ in busy.values())
        graphics = busy[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL][1]
        assert 70 <= graphics <= 100  # GPU 0 runs the training job
        assert 0 < busy[pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL][1] < busy[pynvml.NVML_GPM_METRIC_SM_UTIL][1] <= graphics
        h100.set_load(0, 10)
        clock.now += 10
        pynvml.nvmlGpmSampleGet(h, s1)
        clock.now += 10
        pynvml.nvmlGpmSampleGet(h, s2)
        quiet = metrics(s1, s2)
        assert quiet[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL][1] == pytest.approx(10)
        assert all(0 <= v <= 100 for _, v in quiet.values())
        # a metric the simulator does not model says so per entry
        other = metrics(s1, s2, (pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL,))
        assert other[pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL][0] == pynvml.NVML_ERROR_NOT_SUPPORTED
    finally:
        pynvml.nvmlGpmSampleFree(s1)
        pynvml.nvmlGpmSampleFree(s2)


def test_samples_must_be_apart_in_time_and_from_one_device(h100: Simulator, clock: ManualClock) -> None:
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(pynvml.nvmlDeviceGetHandleByIndex(0), s1)
    pynvml.nvmlGpmSampleGet(pynvml.nvmlDeviceGetHandleByIndex(0), s2)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        metrics(s1, s2)
    clock.now += 1
    pynvml.nvmlGpmSampleGet(pynvml.nvmlDeviceGetHandleByIndex(1), s2)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        metrics(s1, s2)
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version = 99
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlGpmMetricsGet(mg)


def test_per_gpu_instance_metrics_on_an_h100_in_mig_mode() -> None:
    clock = ManualClock()
    sim = Simulator("h100-mig", clock=clock)
    with install(sim):
        pynvml.nvmlInit()
        try:
            parent = pynvml.nvmlDeviceGetHandleByIndex(0)
            mig0 = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
            mig6 = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 6)
            gis = [pynvml.nvmlDeviceGetGpuInstanceId(m) for m in (mig0, mig6)]
            samples = [pynvml.nvmlGpmSampleAlloc() for _ in range(4)]
            for gi, s in zip(gis, samples[:2], strict=True):
                pynvml.nvmlGpmMigSampleGet(parent, gi, s)
            clock.now += 30
            for gi, s in zip(gis, samples[2:], strict=True):
                pynvml.nvmlGpmMigSampleGet(parent, gi, s)
            busy = metrics(samples[0], samples[2])[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL][1]
            light = metrics(samples[1], samples[3])[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL][1]
            assert busy > light  # instance 0 carries more load than instance 6 in the scenario
            with pytest.raises(pynvml.NVMLError_NotFound):
                pynvml.nvmlGpmMigSampleGet(parent, 99, samples[0])
            for s in samples:
                pynvml.nvmlGpmSampleFree(s)
        finally:
            pynvml.nvmlShutdown()
