"""When GPU time counts as idle, a workload as reclaimable, a smaller MIG profile as fitting, a GPU as shareable: the
thresholds the report applies and the waste recording rules and dashboard are generated with, so all three call the
same moments idle. Defaults and meanings: docs/rightsizing.md, "Thresholds"."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Thresholds(BaseModel):
    """When a workload is idle, fits a MIG profile, or may share a GPU. Ratios are 0-1."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    idle_utilization: float = Field(
        0.05, ge=0, le=1, description="A device whose utilization over a step is at most this is idle in that step."
    )
    reclaim_idle_share: float = Field(
        0.9, gt=0, le=1, description="Reclaim a workload idle for at least this share of the GPU-hours it held."
    )
    headroom: float = Field(
        0.2, ge=0, le=10, description="Margin on the observed p99 a smaller profile must leave (0.2: p99 x 1.2 fits)."
    )
    share_utilization: float = Field(
        0.3, gt=0, le=1, description="A whole-GPU workload whose utilization p95 is at most this may share a GPU."
    )
    max_sharing: int = Field(4, ge=2, le=48, description="Most workloads proposed to time-slice one GPU.")
    min_gpu_hours: float = Field(
        1.0, ge=0, description="Below this many GPU-hours held in the window, a workload is kept: too little to judge."
    )
