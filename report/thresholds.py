"""The rules' thresholds: defaults, a YAML file (`--thresholds FILE`) and flags, each checked with one clear line.

The defaults are documented in docs/rightsizing.md; the recording rules of the waste dashboard (rules/waste.py) are
generated from the same defaults, so the report and the dashboard call the same moments idle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from report.yamlinput import InputError, load_mapping


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


def load_thresholds(path: Path | None, overrides: dict[str, Any]) -> Thresholds:
    """Defaults, then the file's values, then `overrides` (flags that were given). InputError (one line) otherwise."""
    values: dict[str, Any] = load_mapping(path, "--thresholds") if path is not None else {}
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Thresholds.model_validate(values)
    except ValidationError as exc:
        problems = []
        for item in exc.errors():
            where = ".".join(str(p) for p in item.get("loc", ())) or "thresholds"
            problems.append(f"{where}: {item.get('msg', 'invalid')}, got {item.get('input')!r}")
        source = f"--thresholds {path}" if path is not None else "thresholds"
        raise InputError(f"{source}: " + "; ".join(problems)) from None
