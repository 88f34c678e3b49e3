"""The `/pods` document: the per-pod figures an exporter serves and the adapter's `direct` source reads.

This module is the whole contract between exporter and adapter, in one place: the model (with its version,
`api_version`), its serialization (each pod once, the whole document and one per namespace), and its parsing and
validation on the reading side. The adapter imports this module and nothing else of `exporter`; nothing here imports
either service. Figures carry the time they were sampled and the window they cover, so a reader can refuse stale
numbers.

Every number is checked as well as its type, because a reader hands these figures to autoscalers: values are finite
and within what their unit allows (`FIGURE_BOUNDS`), intervals and windows within sane bounds, times carry a zone and
no pod was sampled after the document was generated. The same model builds the exporter's document, so the exporter
cannot publish what a reader would refuse.

The model has two forms. The exporter builds and serializes pydantic models (`NodePods`), validated as they are built.
A reader parses into `Received*` structs (msgspec), which hold the same fields under the same bounds and refuse
everything the pydantic model refuses: an adapter following a fleet reads a thousand documents a second, and these
parse four times faster than the pydantic models and are invisible to the garbage collector (`gc=False`: plain
values, no cycles), so documents coming and going never make a collection pass longer.
tests/exporter/test_pods_received.py holds the two forms to the same fields and bounds, and to the same verdicts.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Annotated, Literal, Protocol, Self

import msgspec
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION: Literal["gpu-pulse.dev/v1"] = "gpu-pulse.dev/v1"

# What each figure's unit allows. Byte counts stop at 2**50 (1 PiB, far above any GPU's framebuffer and still exact as
# a float); a GPU board draws at most a few kW.
MAX_BYTES = 2**50
MAX_WATTS = 10_000.0
MAX_JOULES = 1e15  # 10 kW for over 3,000 years
UTILIZATION_PERCENT_BOUNDS = (0.0, 100.0)
MEMORY_BYTES_BOUNDS = (0, MAX_BYTES)
POWER_WATTS_BOUNDS = (0.0, MAX_WATTS)
# An exporter polls at most every 0.05 s and at least every hour (exporter.settings `--interval`); a window is at most a
# day.
INTERVAL_SECONDS_BOUNDS = (0.05, 3600.0)
MAX_WINDOW_SECONDS = 86_400.0
# What a reader believes of a node's interval: a reader derives how long figures stay fresh from it (direct source: 3
# intervals + 2 s), so a node claiming an hour would stretch that to three. Read as at most this; an exporter that
# really polls less often has its figures count as stale sooner, never later.
MAX_CLAIMED_INTERVAL_SECONDS = 30.0
# A pod's figures cannot be newer than the snapshot they are part of; this much is allowed for rounding.
SAMPLED_AFTER_GENERATED_TOLERANCE = timedelta(seconds=1)


# The exporter's clock when it answered, in Unix seconds (a decimal number), as an HTTP header of each `/pods` answer. A
# reader measures the age of the figures against it rather than against its own clock, so that clocks of different
# nodes need not agree (HTTP's `Date` says the same to the whole second; a reader uses that when this is missing).
ANSWERED_AT_HEADER = "Gpu-Pulse-Answered-At"


def answered_at_header(now: float) -> str:
    return f"{now:.3f}"


def parse_answered_at(value: str | None) -> float | None:
    """The header's time, or None when missing or not a finite, positive number of seconds."""
    if not value or len(value) > 32:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 < seconds < 1e11 else None


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class DeviceFigures(_Frozen):
    """One GPU or MIG instance as one container of a pod uses it."""

    uuid: str = Field(description="GPU UUID, or MIG UUID for a MIG instance")
    gpu: int = Field(ge=0, le=4096, description="index of the physical GPU on the node")
    gpu_uuid: str = Field(description="UUID of the physical GPU")
    model: str
    gpu_instance: int | None = Field(None, ge=0, le=4096, description="MIG GPU instance id; None for a whole GPU")
    mig_profile: str | None = None
    share: Literal["exclusive", "mig", "process", "unattributed"]
    sharing_pods: int = Field(1, ge=1, le=1_000_000, description="how many pods hold this device")
    utilization_percent: float | None = Field(
        None,
        ge=UTILIZATION_PERCENT_BOUNDS[0],
        le=UTILIZATION_PERCENT_BOUNDS[1],
        description="this pod's GPU utilization on the device, mean over window_seconds, 0-100",
    )
    memory_used_bytes: int | None = Field(None, ge=0, le=MAX_BYTES)
    memory_total_bytes: int | None = Field(
        None, ge=0, le=MAX_BYTES, description="the device's (or MIG instance's) framebuffer size"
    )
    power_watts: float | None = Field(
        None, ge=0, le=MAX_WATTS, description="this pod's part of the device's power draw"
    )
    energy_joules: float | None = Field(
        None, ge=0, le=MAX_JOULES, description="this pod's part of the energy since the exporter started"
    )


class ContainerView(_Frozen):
    name: str
    devices: tuple[DeviceFigures, ...]


class PodView(_Frozen):
    namespace: str
    name: str
    uid: str | None = None
    containers: tuple[ContainerView, ...]
    sampled_at: AwareDatetime = Field(description="time of the newest sample behind these figures (UTC)")
    window_seconds: float = Field(gt=0, le=MAX_WINDOW_SECONDS, description="the span utilization_percent averages over")


class NodePods(_Frozen):
    """The whole `/pods` document of one node."""

    api_version: Literal["gpu-pulse.dev/v1"] = SCHEMA_VERSION
    node: str
    generated_at: AwareDatetime = Field(description="time of the snapshot this document was built from (UTC)")
    interval_seconds: float = Field(
        ge=INTERVAL_SECONDS_BOUNDS[0], le=INTERVAL_SECONDS_BOUNDS[1], description="the exporter's poll interval"
    )
    kubelet_up: bool | None = None
    pods: tuple[PodView, ...]

    @model_validator(mode="after")
    def _pods_sampled_by_generation(self) -> Self:
        check_sampled_by_generation(self.generated_at, self.pods)
        check_each_pod_once(self.pods)
        return self


class _Sampled(Protocol):
    @property
    def sampled_at(self) -> datetime: ...


def check_sampled_by_generation(generated_at: datetime, pods: Iterable[_Sampled]) -> None:
    """ValueError naming the first pod sampled after its document was generated (beyond rounding): both forms of the
    document (the model and the reader's structs) refuse it."""
    latest = generated_at + SAMPLED_AFTER_GENERATED_TOLERANCE
    for index, pod in enumerate(pods):
        if pod.sampled_at > latest:
            raise ValueError(
                f"pods.{index}.sampled_at {pod.sampled_at.isoformat()} is after the document's generated_at "
                f"{generated_at.isoformat()}"
            )


class _Named(Protocol):
    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


def check_each_pod_once(pods: Iterable[_Named]) -> None:
    """ValueError naming the first pod the document lists twice: both forms refuse the document (a reader would have
    to pick one of the two sets of figures, and nothing says which is right)."""
    seen: set[tuple[str, str]] = set()
    for index, pod in enumerate(pods):
        key = (pod.namespace, pod.name)
        if key in seen:
            raise ValueError(f"pods.{index}: {pod.namespace}/{pod.name} is listed twice")
        seen.add(key)


class PodsDocumentError(ValueError):
    """A body that is not a valid `/pods` document, as one line naming the first problem."""


# ---- the reading side: the same document as msgspec structs ---------------------------------------------------------
_Aware = Annotated[datetime, msgspec.Meta(tz=True)]
_GpuIndex = Annotated[int, msgspec.Meta(ge=0, le=4096)]
_Percent = Annotated[float, msgspec.Meta(ge=UTILIZATION_PERCENT_BOUNDS[0], le=UTILIZATION_PERCENT_BOUNDS[1])]
_Bytes = Annotated[int, msgspec.Meta(ge=0, le=MAX_BYTES)]
_Watts = Annotated[float, msgspec.Meta(ge=0, le=MAX_WATTS)]
_Joules = Annotated[float, msgspec.Meta(ge=0, le=MAX_JOULES)]


class _Received(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    pass


class ReceivedDevice(_Received, frozen=True, kw_only=True):
    """DeviceFigures as a reader receives it."""

    uuid: str
    gpu: _GpuIndex
    gpu_uuid: str
    model: str
    gpu_instance: _GpuIndex | None = None
    mig_profile: str | None = None
    share: Literal["exclusive", "mig", "process", "unattributed"]
    sharing_pods: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 1
    utilization_percent: _Percent | None = None
    memory_used_bytes: _Bytes | None = None
    memory_total_bytes: _Bytes | None = None
    power_watts: _Watts | None = None
    energy_joules: _Joules | None = None


class ReceivedContainer(_Received, frozen=True, kw_only=True):
    """ContainerView as a reader receives it."""

    name: str
    devices: tuple[ReceivedDevice, ...]


class ReceivedPod(_Received, frozen=True, kw_only=True):
    """PodView as a reader receives it."""

    namespace: str
    name: str
    uid: str | None = None
    containers: tuple[ReceivedContainer, ...]
    sampled_at: _Aware
    window_seconds: Annotated[float, msgspec.Meta(gt=0, le=MAX_WINDOW_SECONDS)]


class ReceivedNodePods(_Received, frozen=True, kw_only=True):
    """NodePods as a reader receives it; `interval_seconds` read as at most MAX_CLAIMED_INTERVAL_SECONDS."""

    api_version: Literal["gpu-pulse.dev/v1"] = SCHEMA_VERSION
    node: str
    generated_at: _Aware
    interval_seconds: Annotated[float, msgspec.Meta(ge=INTERVAL_SECONDS_BOUNDS[0], le=INTERVAL_SECONDS_BOUNDS[1])]
    kubelet_up: bool | None = None
    pods: tuple[ReceivedPod, ...]

    def __post_init__(self) -> None:
        check_sampled_by_generation(self.generated_at, self.pods)
        check_each_pod_once(self.pods)
        if self.interval_seconds > MAX_CLAIMED_INTERVAL_SECONDS:
            msgspec.structs.force_setattr(self, "interval_seconds", MAX_CLAIMED_INTERVAL_SECONDS)


_NODE_PODS = msgspec.json.Decoder(ReceivedNodePods)


def _problem(exc: msgspec.MsgspecError, what: str) -> PodsDocumentError:
    """msgspec's "Expected `float` <= 100.0 - at `$.pods[0].window_seconds`" as "pods.0.window_seconds: Expected"."""
    message, _, path = str(exc).partition(" - at `")
    where = path.rstrip("`").removeprefix("$").replace("[", ".").replace("]", "").strip(".")
    message = " ".join(message.split())  # one line, whatever a message holds
    return PodsDocumentError(f"not a gpu-pulse {what}: {where + ': ' if where else ''}{message}")


def parse_node_pods(body: bytes | str) -> ReceivedNodePods:
    """The document in `body`, validated against the model; PodsDocumentError (one line) otherwise."""
    try:
        return _NODE_PODS.decode(body)
    except msgspec.MsgspecError as exc:
        raise _problem(exc, "/pods document") from None


# ---- the stream: `/pods?watch=1` ------------------------------------------------------------------------------------
# Instead of one document per request, a reader may ask for a stream: one line of JSON per snapshot the exporter
# publishes (at most one per `every` seconds, when asked), each line an event holding the exporter's clock when it was
# sent and the document. The exporter ends a stream after about STREAM_SECONDS (a reader reconnects; a long-lived
# connection is rebalanced that way, as kube-apiserver ends watches after a timeout). A reader that finds a plain
# `application/json` answer instead is talking to an exporter without streams and has the one document.
STREAM_CONTENT_TYPE = "application/x-ndjson"
STREAM_SECONDS = 300.0
# An exporter serves at most this many streams at once (an adapter replica holds one per exporter); more get 429.
MAX_STREAMS = 16


class _StreamEvent(_Received, frozen=True, kw_only=True):
    answered_at: Annotated[float, msgspec.Meta(gt=0, lt=1e11)]  # the exporter's clock when it sent the line
    document: ReceivedNodePods


_STREAM_EVENT = msgspec.json.Decoder(_StreamEvent)


def stream_event(answered_at: float, document: bytes) -> bytes:
    """One line of a `/pods` stream: the serialized `document` as the exporter sent it at `answered_at`."""
    return b'{"answered_at":%.3f,"document":%b}\n' % (answered_at, document)


def parse_stream_event(line: bytes | str) -> tuple[float, ReceivedNodePods]:
    """One line of a `/pods` stream as (the exporter's clock when it sent it, the document); PodsDocumentError
    (one line) when it is not one."""
    try:
        event = _STREAM_EVENT.decode(line)
    except msgspec.MsgspecError as exc:
        raise _problem(exc, "/pods stream event") from None
    return event.answered_at, event.document


@dataclass(frozen=True, slots=True)
class SerializedPods:
    """The `/pods` JSON of one snapshot: the whole document, and the document filtered to each namespace."""

    full: bytes
    by_namespace: Mapping[str, bytes]
    no_pods: bytes  # the document for a namespace that has no pods on this node
    head: bytes  # the document up to its pods: `head + pods + b"]}"` is a document
    namespace_pods: Mapping[str, bytes]  # each namespace's pods, serialized and joined

    def for_namespace(self, namespace: str | None) -> bytes:
        if namespace is None:
            return self.full
        return self.by_namespace.get(namespace, self.no_pods)

    def for_namespaces(self, namespaces: Collection[str] | None) -> bytes:
        """The document filtered to `namespaces` (the whole document for None)."""
        if namespaces is None:
            return self.full
        if len(namespaces) == 1:
            return self.for_namespace(next(iter(namespaces)))
        parts = [self.namespace_pods[n] for n in sorted(set(namespaces)) if n in self.namespace_pods]
        return self.head + b",".join(parts) + b"]}"

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
        joined = {ns: b",".join(parts) for ns, parts in sorted(pieces.items())}
        by_namespace = {ns: head + pods + b"]}" for ns, pods in joined.items()}
        everything = head + b",".join(piece for _, piece in serialized) + b"]}"
        return cls(everything, MappingProxyType(by_namespace), empty, head, MappingProxyType(joined))
