"""The per-pod view served at `/pods`: the document the adapter's `direct` source reads.

This module is the contract between exporter and adapter (the adapter imports it; nothing here imports the adapter).
Figures carry the time they were sampled and the window they cover, so a reader can refuse stale numbers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION: Literal["gpu-pulse.dev/v1"] = "gpu-pulse.dev/v1"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DeviceFigures(_Frozen):
    """One GPU or MIG instance as one container of a pod uses it."""

    uuid: str = Field(description="GPU UUID, or MIG UUID for a MIG instance")
    gpu: int = Field(description="index of the physical GPU on the node")
    gpu_uuid: str = Field(description="UUID of the physical GPU")
    model: str
    gpu_instance: int | None = Field(None, description="MIG GPU instance id; None for a whole GPU")
    mig_profile: str | None = None
    share: Literal["exclusive", "mig", "process", "unattributed"]
    sharing_pods: int = Field(1, ge=1, description="how many pods hold this device")
    utilization_percent: float | None = Field(
        None, description="this pod's GPU utilization on the device, mean over window_seconds, 0-100"
    )
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = Field(None, description="the device's (or MIG instance's) framebuffer size")
    power_watts: float | None = Field(None, description="this pod's part of the device's power draw")
    energy_joules: float | None = Field(None, description="this pod's part of the energy since the exporter started")


class ContainerView(_Frozen):
    name: str
    devices: tuple[DeviceFigures, ...]


class PodView(_Frozen):
    namespace: str
    name: str
    uid: str | None = None
    containers: tuple[ContainerView, ...]
    sampled_at: datetime = Field(description="time of the newest sample behind these figures (UTC)")
    window_seconds: float = Field(gt=0, description="the span utilization_percent averages over")


class NodePods(_Frozen):
    """The whole `/pods` document of one node."""

    api_version: Literal["gpu-pulse.dev/v1"] = SCHEMA_VERSION
    node: str
    generated_at: datetime = Field(description="time of the snapshot this document was built from (UTC)")
    interval_seconds: float = Field(gt=0, description="the exporter's poll interval")
    kubelet_up: bool | None = None
    pods: tuple[PodView, ...]
