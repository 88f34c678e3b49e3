"""The `/pods` contract: the per-pod figures an exporter serves and the adapter's `direct` source reads.

One definition for both sides: msgspec structs that the exporter builds and encodes and a reader decodes, with their
version (`api_version`), their bounds, the stream's line format and the answer's clock header. Figures carry the time
they were sampled and the window they cover, so a reader can refuse stale numbers.

Every number is checked as well as its type, because a reader hands these figures to autoscalers: values are finite
and within what their unit allows, intervals and windows within sane bounds, times carry a zone, no pod was sampled
after the document was generated and none is listed twice. The bounds are msgspec `Meta` constraints, which msgspec
checks when it decodes but not when a struct is built; the checks across fields are `__post_init__`, which runs on
both. So the exporter reads each document it encodes back with `parse_node_pods` before publishing it: it cannot
publish what a reader would refuse.

The toolkit holds the contract because both services speak it and neither owns it (tests/test_layers.py). The structs
are invisible to the garbage collector (`gc=False`: plain values, no cycles), as an adapter following a fleet decodes
a document per node every few seconds.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Literal

import msgspec

SCHEMA_VERSION: Literal["gpu-pulse.dev/v1"] = "gpu-pulse.dev/v1"

# What each figure's unit allows. Byte counts stop at 2**50 (1 PiB, far above any GPU's framebuffer and still exact as
# a float); a GPU board draws at most a few kW.
MAX_BYTES = 2**50
MAX_WATTS = 10_000.0
MAX_JOULES = 1e15  # 10 kW for over 3,000 years
UTILIZATION_PERCENT_BOUNDS = (0.0, 100.0)
MEMORY_BYTES_BOUNDS = (0, MAX_BYTES)
POWER_WATTS_BOUNDS = (0.0, MAX_WATTS)
MAX_GPU_INDEX = 4096
MAX_SHARING_PODS = 1_000_000
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


# ---- the document ---------------------------------------------------------------------------------------------------
_Aware = Annotated[datetime, msgspec.Meta(tz=True)]
_GpuIndex = Annotated[int, msgspec.Meta(ge=0, le=MAX_GPU_INDEX)]
_Percent = Annotated[float, msgspec.Meta(ge=UTILIZATION_PERCENT_BOUNDS[0], le=UTILIZATION_PERCENT_BOUNDS[1])]
_Bytes = Annotated[int, msgspec.Meta(ge=MEMORY_BYTES_BOUNDS[0], le=MEMORY_BYTES_BOUNDS[1])]
_Watts = Annotated[float, msgspec.Meta(ge=POWER_WATTS_BOUNDS[0], le=POWER_WATTS_BOUNDS[1])]
_Joules = Annotated[float, msgspec.Meta(ge=0, le=MAX_JOULES)]


class _Figures(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    pass


class DeviceFigures(_Figures, frozen=True, kw_only=True):
    """One GPU or MIG instance as one container of a pod uses it."""

    uuid: Annotated[str, msgspec.Meta(description="GPU UUID, or MIG UUID for a MIG instance")]
    gpu: Annotated[_GpuIndex, msgspec.Meta(description="index of the physical GPU on the node")]
    gpu_uuid: Annotated[str, msgspec.Meta(description="UUID of the physical GPU")]
    model: str
    gpu_instance: Annotated[_GpuIndex | None, msgspec.Meta(description="MIG GPU instance id; None for a whole GPU")] = (
        None
    )
    mig_profile: str | None = None
    share: Literal["exclusive", "mig", "process", "unattributed"]
    sharing_pods: Annotated[
        int, msgspec.Meta(ge=1, le=MAX_SHARING_PODS, description="how many pods hold this device")
    ] = 1
    utilization_percent: Annotated[
        _Percent | None,
        msgspec.Meta(description="this pod's GPU utilization on the device, mean over window_seconds, 0-100"),
    ] = None
    memory_used_bytes: _Bytes | None = None
    memory_total_bytes: Annotated[
        _Bytes | None, msgspec.Meta(description="the device's (or MIG instance's) framebuffer size")
    ] = None
    power_watts: Annotated[_Watts | None, msgspec.Meta(description="this pod's part of the device's power draw")] = None
    energy_joules: Annotated[
        _Joules | None, msgspec.Meta(description="this pod's part of the energy since the exporter started")
    ] = None


# ---- what the serving engine in a pod knows -------------------------------------------------------------------------
# Normalised to the Gateway API Inference Extension's model-server protocol (queued requests, running requests, KV-cache
# utilization 0-1: https://github.com/kubernetes-sigs/gateway-api-inference-extension, docs/proposals/003-model-server-
# protocol), plus latency percentiles over a window and rates from counters. Which engine names map to which figure is
# the exporter's business (exporter/engines); this is only what crosses the wire.
MAX_REQUESTS = 1e9
MAX_LATENCY_SECONDS = 86_400.0
MAX_RATE_PER_SECOND = 1e9
MAX_REASON_CHARS = 200
MAX_ENGINE_MODEL_CHARS = 256
_Requests = Annotated[float, msgspec.Meta(ge=0, le=MAX_REQUESTS)]
_Latency = Annotated[float, msgspec.Meta(ge=0, le=MAX_LATENCY_SECONDS)]
_Rate = Annotated[float, msgspec.Meta(ge=0, le=MAX_RATE_PER_SECOND)]
_Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]

# ready: the engine answered with every figure it has; warming: the pod is not Ready, or its engine does not answer yet
# (left out of every combined figure, as the HPA leaves unready pods out for CPU); unreachable: it answered before and
# does not now; unrecognised: it answers, with no family an engine mapping knows (a renamed metric, an unknown engine);
# refused: the answer broke a bound (size, time, series, a redirect) or the endpoint is not the pod's own.
EngineState = Literal["ready", "warming", "unreachable", "unrecognised", "refused"]
EngineName = Literal["vllm", "sglang", "nim", "triton-trtllm", "dynamo", "tgi"]


class LatencyQuantiles(_Figures, frozen=True, kw_only=True):
    """Latency percentiles over `InferenceFigures.window_seconds`, from histogram bucket deltas (not since start);
    None where the window held no observation."""

    p50: _Latency | None = None
    p90: _Latency | None = None
    p99: _Latency | None = None


class InferenceFigures(_Figures, frozen=True, kw_only=True):
    """What the serving engine of one pod reported, normalised; every figure None when the engine does not give it or
    `state` is not "ready" (never a stale or guessed number)."""

    state: EngineState
    reason: Annotated[str, msgspec.Meta(max_length=MAX_REASON_CHARS)] | None = None
    engine: EngineName | None = None
    model: Annotated[str, msgspec.Meta(max_length=MAX_ENGINE_MODEL_CHARS)] | None = None
    sampled_at: Annotated[_Aware, msgspec.Meta(description="when the engine's endpoint was read (UTC)")]
    window_seconds: Annotated[
        float, msgspec.Meta(gt=0, le=MAX_WINDOW_SECONDS, description="the span percentiles and rates cover")
    ]
    queued_requests: _Requests | None = None
    running_requests: _Requests | None = None
    kv_cache_utilization: Annotated[_Fraction | None, msgspec.Meta(description="0-1, as the engine reports")] = None
    time_to_first_token_seconds: LatencyQuantiles | None = None
    inter_token_latency_seconds: LatencyQuantiles | None = None
    requests_per_second: _Rate | None = None
    generated_tokens_per_second: _Rate | None = None


class ContainerView(_Figures, frozen=True, kw_only=True):
    name: str
    devices: tuple[DeviceFigures, ...]


class PodView(_Figures, frozen=True, kw_only=True, omit_defaults=True):
    """One pod's figures. Fields at their default (None) are left out of the JSON (`omit_defaults`): readers from
    before engine figures decode strictly (`forbid_unknown_fields`) and would refuse even an `"inference":null`, so
    a document without them stays one those readers take."""

    namespace: str
    name: str
    uid: str | None = None
    containers: tuple[ContainerView, ...]
    sampled_at: Annotated[_Aware, msgspec.Meta(description="time of the newest sample behind these figures (UTC)")]
    window_seconds: Annotated[
        float, msgspec.Meta(gt=0, le=MAX_WINDOW_SECONDS, description="the span utilization_percent averages over")
    ]
    inference: Annotated[
        InferenceFigures | None,
        msgspec.Meta(description="what the pod's serving engine reports; None where engines are not read"),
    ] = None


class NodePods(_Figures, frozen=True, kw_only=True):
    """The whole `/pods` document of one node. `pods` stays the last field: an exporter joins documents from pods
    serialized once."""

    api_version: Literal["gpu-pulse.dev/v1"] = SCHEMA_VERSION
    node: str
    generated_at: Annotated[_Aware, msgspec.Meta(description="time of the snapshot this document was built from (UTC)")]
    interval_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=INTERVAL_SECONDS_BOUNDS[0], le=INTERVAL_SECONDS_BOUNDS[1], description="the exporter's poll interval"
        ),
    ]
    kubelet_up: bool | None = None
    pods: tuple[PodView, ...]

    def __post_init__(self) -> None:
        _check_sampled_by_generation(self.generated_at, self.pods)
        _check_each_pod_once(self.pods)


def _check_sampled_by_generation(generated_at: datetime, pods: tuple[PodView, ...]) -> None:
    """ValueError naming the first pod sampled after its document was generated (beyond rounding)."""
    latest = generated_at + SAMPLED_AFTER_GENERATED_TOLERANCE
    for index, pod in enumerate(pods):
        if pod.sampled_at > latest:
            raise ValueError(
                f"pods.{index}.sampled_at {pod.sampled_at.isoformat()} is after the document's generated_at "
                f"{generated_at.isoformat()}"
            )


def _check_each_pod_once(pods: tuple[PodView, ...]) -> None:
    """ValueError naming the first pod the document lists twice: a reader would have to pick one of the two sets of
    figures, and nothing says which is right."""
    seen: set[tuple[str, str]] = set()
    for index, pod in enumerate(pods):
        key = (pod.namespace, pod.name)
        if key in seen:
            raise ValueError(f"pods.{index}: {pod.namespace}/{pod.name} is listed twice")
        seen.add(key)


class PodsDocumentError(ValueError):
    """A body that is not a valid `/pods` document, as one line naming the first problem."""


# ---- reading and writing --------------------------------------------------------------------------------------------
_NODE_PODS = msgspec.json.Decoder(NodePods)
_ENCODER = msgspec.json.Encoder()


def _problem(exc: msgspec.MsgspecError, what: str) -> PodsDocumentError:
    """msgspec's "Expected `float` <= 100.0 - at `$.pods[0].window_seconds`" as "pods.0.window_seconds: Expected"."""
    message, _, path = str(exc).partition(" - at `")
    where = path.rstrip("`").removeprefix("$").replace("[", ".").replace("]", "").strip(".")
    message = " ".join(message.split())  # one line, whatever a message holds
    return PodsDocumentError(f"not a gpu-pulse {what}: {where + ': ' if where else ''}{message}")


def _as_believed(document: NodePods) -> NodePods:
    """The document with `interval_seconds` read as at most MAX_CLAIMED_INTERVAL_SECONDS (the exporter states what
    it does; a reader believes no more)."""
    if document.interval_seconds > MAX_CLAIMED_INTERVAL_SECONDS:
        msgspec.structs.force_setattr(document, "interval_seconds", MAX_CLAIMED_INTERVAL_SECONDS)
    return document


def parse_node_pods(body: bytes | str) -> NodePods:
    """The document in `body`, validated against the contract; PodsDocumentError (one line) otherwise."""
    try:
        return _as_believed(_NODE_PODS.decode(body))
    except msgspec.MsgspecError as exc:
        raise _problem(exc, "/pods document") from None


def encode_json(part: NodePods | PodView) -> bytes:
    """The JSON of a document or of one of its pods, as the exporter serves it; unchecked (see encode_node_pods)."""
    return _ENCODER.encode(part)


def encode_node_pods(document: NodePods) -> bytes:
    """The document's JSON, read back as a reader reads it first: PodsDocumentError when a reader would refuse it."""
    body = encode_json(document)
    parse_node_pods(body)
    return body


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


class _StreamEvent(_Figures, frozen=True, kw_only=True):
    answered_at: Annotated[float, msgspec.Meta(gt=0, lt=1e11)]  # the exporter's clock when it sent the line
    document: NodePods


_STREAM_EVENT = msgspec.json.Decoder(_StreamEvent)


def stream_event(answered_at: float, document: bytes) -> bytes:
    """One line of a `/pods` stream: the serialized `document` as the exporter sent it at `answered_at`."""
    return b'{"answered_at":%.3f,"document":%b}\n' % (answered_at, document)


def parse_stream_event(line: bytes | str) -> tuple[float, NodePods]:
    """One line of a `/pods` stream as (the exporter's clock when it sent it, the document); PodsDocumentError
    (one line) when it is not one."""
    try:
        event = _STREAM_EVENT.decode(line)
    except msgspec.MsgspecError as exc:
        raise _problem(exc, "/pods stream event") from None
    return event.answered_at, _as_believed(event.document)
