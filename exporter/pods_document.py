"""The `/pods` document: the per-pod figures an exporter serves and the adapter's `direct` source reads.

This module is the whole contract between exporter and adapter, in one place: the model (with its version,
`api_version`), its serialization (each pod once, the whole document and one per namespace), and its parsing and
validation on the reading side. The adapter imports this module and nothing else of `exporter`; nothing here imports
either service. Figures carry the time they were sampled and the window they cover, so a reader can refuse stale
numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Literal

import pydantic
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


class PodsDocumentError(ValueError):
    """A body that is not a valid `/pods` document, as one line naming the first problem."""


def parse_node_pods(body: bytes | str) -> NodePods:
    """The document in `body`, validated against the model; PodsDocumentError (one line) otherwise."""
    try:
        return NodePods.model_validate_json(body)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "document"
        raise PodsDocumentError(f"not a gpu-pulse /pods document: {where}: {first['msg']}") from None


@dataclass(frozen=True, slots=True)
class SerializedPods:
    """The `/pods` JSON of one snapshot: the whole document, and the document filtered to each namespace."""

    full: bytes
    by_namespace: Mapping[str, bytes]
    no_pods: bytes  # the document for a namespace that has no pods on this node

    def for_namespace(self, namespace: str | None) -> bytes:
        if namespace is None:
            return self.full
        return self.by_namespace.get(namespace, self.no_pods)

    @classmethod
    def of(cls, document: NodePods) -> SerializedPods:
        """Serialize each pod once; the whole document and the per-namespace ones are joins of those pieces."""
        empty = document.model_copy(update={"pods": ()}).model_dump_json().encode()
        tail = b'"pods":[]}'
        if not empty.endswith(tail):  # `pods` must stay NodePods' last field for the joins below
            raise AssertionError("NodePods must end with its pods field")
        head = empty[: -len(tail)] + b'"pods":['
        serialized = [(pod.namespace, pod.model_dump_json().encode()) for pod in document.pods]
        pieces: dict[str, list[bytes]] = {}
        for namespace, piece in serialized:
            pieces.setdefault(namespace, []).append(piece)
        by_namespace = {ns: head + b",".join(parts) + b"]}" for ns, parts in sorted(pieces.items())}
        everything = head + b",".join(piece for _, piece in serialized) + b"]}"
        return cls(everything, MappingProxyType(by_namespace), empty)
