"""Catalogue rows of GPM (GPU Performance Monitoring, Hopper and newer): the activity dcgm-exporter's DCGM_FI_PROF_*
fields give, per GPU and per MIG instance. Metric ids: nvml.h nvmlGpmMetricId_t; all in percent."""

from __future__ import annotations

from exporter.catalogue.model import Measurement, MetricType, Need
from exporter.catalogue.model import constant_labels as labels
from exporter.catalogue.model import rendering as r

G = MetricType.GAUGE
_HOPPER = frozenset({Need.HOPPER})
_RATIO = (
    "DCGM's profiling module (perfworks) counts the cycles itself; gpu-pulse takes NVML GPM's metric of the same name, "
    "a percentage over the poll interval, as a ratio (/ 100)."
)


def _pipe(key: str, metric: str, dcgm_id: int, pipe: str) -> Measurement:
    return Measurement(
        key,
        "%",
        f"nvmlGpmMetricsGet(NVML_GPM_METRIC_{metric})",
        mig=True,
        dcgm=r(f"DCGM_FI_PROF_PIPE_{pipe.upper()}_ACTIVE", G, f"Ratio of cycles the {pipe} pipes are active.", 0.01),
        prometheus=r(
            "nvidia_gpu_pipe_active_ratio",
            G,
            "Fraction of the poll interval the SMs were doing non-tensor math of the named precision (GPM).",
            0.01,
            const_labels=labels(pipe=pipe),
        ),
        dcgm_fields=(dcgm_id,),
        needs=_HOPPER,
        dcgm_computes=_RATIO,
    )


GPM: tuple[Measurement, ...] = (
    Measurement(
        "gr_engine_active",
        "%",
        "nvmlGpmMetricsGet(NVML_GPM_METRIC_GRAPHICS_UTIL)",
        mig=True,
        dcgm=r("DCGM_FI_PROF_GR_ENGINE_ACTIVE", G, "Ratio of time the graphics engine is active.", 0.01),
        prometheus=r(
            "nvidia_gpu_graphics_engine_active_ratio",
            G,
            "Fraction of time the graphics/compute engine was active (GPM).",
            0.01,
        ),
        dcgm_fields=(1001,),
        needs=_HOPPER,
        dcgm_computes=_RATIO,
    ),
    Measurement(
        "sm_active",
        "%",
        "nvmlGpmMetricsGet(NVML_GPM_METRIC_SM_UTIL)",
        mig=True,
        dcgm=r("DCGM_FI_PROF_SM_ACTIVE", G, "The ratio of cycles an SM has at least 1 warp assigned.", 0.01),
        prometheus=r(
            "nvidia_gpu_sm_active_ratio",
            G,
            "Fraction of cycles an SM had at least one warp assigned (GPM).",
            0.01,
        ),
        dcgm_fields=(1002,),
        needs=_HOPPER,
        dcgm_computes=_RATIO,
    ),
    Measurement(
        "sm_occupancy",
        "%",
        "nvmlGpmMetricsGet(NVML_GPM_METRIC_SM_OCCUPANCY)",
        mig=True,
        dcgm=r("DCGM_FI_PROF_SM_OCCUPANCY", G, "The ratio of number of warps resident on an SM.", 0.01),
        prometheus=r(
            "nvidia_gpu_sm_occupancy_ratio",
            G,
            "Warps resident on an SM as a fraction of the theoretical maximum (GPM).",
            0.01,
        ),
        dcgm_fields=(1003,),
        needs=_HOPPER,
        dcgm_computes=_RATIO,
    ),
    Measurement(
        "tensor_active",
        "%",
        "nvmlGpmMetricsGet(NVML_GPM_METRIC_ANY_TENSOR_UTIL)",
        mig=True,
        dcgm=r("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", G, "Ratio of cycles the tensor (HMMA) pipe is active.", 0.01),
        prometheus=r("nvidia_gpu_tensor_active_ratio", G, "Fraction of cycles a tensor pipe was active (GPM).", 0.01),
        dcgm_fields=(1004,),
        needs=_HOPPER,
        dcgm_computes=_RATIO,
    ),
    Measurement(
        "dram_active",
        "%",
        "nvmlGpmMetricsGet(NVML_GPM_METRIC_DRAM_BW_UTIL)",
        mig=True,
        dcgm=r("DCGM_FI_PROF_DRAM_ACTIVE", G, "Ratio of cycles the device memory interface is active.", 0.01),
        prometheus=r(
            "nvidia_gpu_dram_active_ratio",
            G,
            "Fraction of cycles the device memory interface was active (GPM).",
            0.01,
        ),
        dcgm_fields=(1005,),
        needs=_HOPPER,
        dcgm_computes=_RATIO,
    ),
    _pipe("fp64_active", "FP64_UTIL", 1006, "fp64"),
    _pipe("fp32_active", "FP32_UTIL", 1007, "fp32"),
    _pipe("fp16_active", "FP16_UTIL", 1008, "fp16"),
)
