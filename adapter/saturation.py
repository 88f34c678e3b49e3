"""How saturated a pod's serving engine is: the `saturation` figure's configuration, its presets and its arithmetic.

A pod's saturation is the largest of its terms, each a signal of its engine over a target, in percent of that target,
so that an HPA targets `averageValue: "100"`: requests waiting over a queue target, KV-cache use over a target fill,
and, only where the configuration gives an SLO, a time-to-first-token or inter-token-latency percentile over it. A
term whose signal the engine does not give is left out; with no term left the pod has no value (never 0 by accident).
Which term is the largest is the pod's driving term.

GPU utilization is the idle floor: a pod whose GPUs all read below `idle_gpu_utilization_percent` with an empty queue
reads 0 whatever else reads (a latency percentile over a quiet window, a KV cache the engine has not freed yet), and
the driving term is then `idle`. Optionally it is a cap too: while the GPUs read below
`cap.gpu_utilization_below_percent` the pod reads at most `cap.percent` (a latency SLO missed on a GPU with headroom is
not one more replica's business).

Presets per engine (`PRESETS`) start a configuration; fields given beside `preset` override it. Their figures and
citations are in docs/llm-serving.md. The PromQL that computes the same figure from the exporter's series is built here
too (`prometheus_queries`), so both sources serve it from one configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Context, Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LatencyPercentile = Literal["p50", "p90", "p99"]
_QUANTILES: Mapping[str, str] = {"p50": "0.5", "p90": "0.9", "p99": "0.99"}

# The term names: a pod's driving term is one of these, or IDLE.
QUEUED_REQUESTS = "queued_requests"
KV_CACHE_UTILIZATION = "kv_cache_utilization"
TIME_TO_FIRST_TOKEN = "time_to_first_token"
INTER_TOKEN_LATENCY = "inter_token_latency"
IDLE = "idle"
TERMS = (QUEUED_REQUESTS, KV_CACHE_UTILIZATION, TIME_TO_FIRST_TOKEN, INTER_TOKEN_LATENCY)
DRIVERS = (*TERMS, IDLE)

MAX_PERCENT = Decimal(10) ** 15  # a signal at its bound over the smallest target stays far below
_ARITHMETIC = Context(prec=34, rounding=ROUND_HALF_EVEN)
_HUNDRED = Decimal(100)
_ZERO = Decimal(0)


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LatencySlo(_Strict):
    """A latency term: the percentile the exporter works out over its window, and the SLO it is held to."""

    slo_seconds: Annotated[Decimal, Field(gt=0, le=86_400)] = Field(description="the percentile's SLO, seconds")
    percentile: LatencyPercentile = Field(default="p90", description="which percentile (p50, p90, p99)")


class GpuCap(_Strict):
    """While every GPU of the pod reads below `gpu_utilization_below_percent`, the pod reads at most `percent`."""

    gpu_utilization_below_percent: Annotated[Decimal, Field(gt=0, le=100)]
    percent: Annotated[Decimal, Field(ge=0)] = Field(
        default=Decimal(100), description="the most the pod reads meanwhile"
    )


EnginePreset = Literal["vllm", "sglang", "nim", "triton-trtllm", "dynamo", "tgi"]


class SaturationSpec(_Strict):
    """The `saturation` block of a metric whose figure is `saturation`: its terms' targets, the idle floor, the cap."""

    preset: EnginePreset | None = Field(default=None, description="start from an engine's preset (docs/llm-serving.md)")
    queued_requests: Annotated[Decimal, Field(gt=0, le=1e9)] | None = Field(
        default=None, description="requests waiting in one pod's engine that read as 100 %"
    )
    kv_cache_utilization: Annotated[Decimal, Field(gt=0, le=1)] | None = Field(
        default=None, description="KV-cache fill (0-1, as the engine reports it) that reads as 100 %"
    )
    time_to_first_token: LatencySlo | None = None
    inter_token_latency: LatencySlo | None = None
    idle_gpu_utilization_percent: Annotated[Decimal, Field(ge=0, le=100)] = Field(
        default=Decimal(5), description="GPUs below this (percent) with an empty queue read as idle (0); 0 turns it off"
    )
    cap: GpuCap | None = None

    @model_validator(mode="after")
    def _some_term(self) -> SaturationSpec:
        if not self.resolved().terms():
            raise ValueError(
                "saturation: no term: give a preset or at least one of queued_requests, kv_cache_utilization, "
                "time_to_first_token, inter_token_latency"
            )
        return self

    def resolved(self) -> SaturationSpec:
        """The spec with its preset's values where it gives none of its own."""
        if self.preset is None:
            return self
        preset = PRESETS[self.preset]
        given = self.model_fields_set
        return self.model_copy(
            update={
                name: getattr(preset, name)
                for name in ("queued_requests", "kv_cache_utilization", "time_to_first_token", "inter_token_latency")
                if name not in given
            }
            | {"preset": None}
        )

    def terms(self) -> tuple[str, ...]:
        """The terms this spec computes, in TERMS order."""
        targets = (self.queued_requests, self.kv_cache_utilization, self.time_to_first_token, self.inter_token_latency)
        return tuple(term for term, target in zip(TERMS, targets, strict=True) if target is not None)


@dataclass(frozen=True, slots=True)
class _Preset:
    queued_requests: Decimal | None
    kv_cache_utilization: Decimal | None
    time_to_first_token: LatencySlo | None = None
    inter_token_latency: LatencySlo | None = None


# llm-d's workload-variant-autoscaler calls a vLLM replica saturated at a KV-cache use of 0.80 or 5 requests waiting
# (its capacity-scaling ConfigMap defaults kvCacheThreshold 0.80, queueLengthThreshold 5: docs/capacity-scaling-
# config.md of llm-d-incubation/workload-variant-autoscaler); GKE's "Best practices for autoscaling LLM inference
# workloads with GPUs" scales on the server's queue size to keep throughput within a latency target, for vLLM, TGI
# and Triton alike. Engines whose exporter mapping has no KV-cache figure (exporter/engines/mappings.py: TGI, Dynamo's
# frontend) get the queue term only. No preset sets a latency SLO: an SLO is the user's promise, not the engine's.
_QUEUE = Decimal(5)
_KV = Decimal("0.8")
PRESETS: Mapping[str, _Preset] = {
    "vllm": _Preset(_QUEUE, _KV),
    "sglang": _Preset(_QUEUE, _KV),
    "nim": _Preset(_QUEUE, _KV),
    "triton-trtllm": _Preset(_QUEUE, _KV),
    "dynamo": _Preset(_QUEUE, None),
    "tgi": _Preset(_QUEUE, None),
}


@dataclass(frozen=True, slots=True)
class Signals:
    """One pod's signals, in their /pods units; None where the engine (or the GPU) does not give one. The latencies are
    the percentiles the spec's latency terms name."""

    queued_requests: Decimal | None = None
    kv_cache_utilization: Decimal | None = None
    time_to_first_token_seconds: Decimal | None = None
    inter_token_latency_seconds: Decimal | None = None
    gpu_utilization_percent: Decimal | None = None  # the pod's busiest GPU, 0-100


@dataclass(frozen=True, slots=True)
class Reading:
    """A pod's saturation, percent of target, and the term that drives it (`idle` when the idle floor applies)."""

    percent: Decimal
    driver: str


def _percent_of(signal: Decimal, target: Decimal) -> Decimal:
    return _ARITHMETIC.multiply(_ARITHMETIC.divide(signal, target), _HUNDRED)


def saturation(signals: Signals, spec: SaturationSpec) -> Reading | None:
    """The largest of the spec's terms over the pod's `signals` (a resolved spec: `SaturationSpec.resolved`), the idle
    floor and cap applied; None when no term has its signal."""
    candidates: list[tuple[Decimal, str]] = []
    ttft, itl = spec.time_to_first_token, spec.inter_token_latency
    if spec.queued_requests is not None and signals.queued_requests is not None:
        candidates.append((_percent_of(signals.queued_requests, spec.queued_requests), QUEUED_REQUESTS))
    if spec.kv_cache_utilization is not None and signals.kv_cache_utilization is not None:
        candidates.append((_percent_of(signals.kv_cache_utilization, spec.kv_cache_utilization), KV_CACHE_UTILIZATION))
    if ttft is not None and signals.time_to_first_token_seconds is not None:
        candidates.append((_percent_of(signals.time_to_first_token_seconds, ttft.slo_seconds), TIME_TO_FIRST_TOKEN))
    if itl is not None and signals.inter_token_latency_seconds is not None:
        candidates.append((_percent_of(signals.inter_token_latency_seconds, itl.slo_seconds), INTER_TOKEN_LATENCY))
    if not candidates:
        return None
    percent, driver = max(candidates, key=lambda candidate: candidate[0])  # the first of equals: TERMS order
    gpu = signals.gpu_utilization_percent
    if gpu is not None and signals.queued_requests is not None and signals.queued_requests == _ZERO:
        if gpu < spec.idle_gpu_utilization_percent:
            return Reading(_ZERO, IDLE)
    if spec.cap is not None and gpu is not None and gpu < spec.cap.gpu_utilization_below_percent:
        percent = min(percent, spec.cap.percent)
    return Reading(min(percent, MAX_PERCENT), driver)


# ---- the same figure in PromQL, over the exporter's series -----------------------------------------------------------
_BY_POD = "namespace, pod"


def _series(name: str, extra: str = "") -> str:
    return f"max by ({_BY_POD}) ({name}{{$namespace_matcher{extra}}})"


def _term(expression: str, target: Decimal, term: str) -> str:
    # times 100 before the division: 3 requests over a target of 5 is 60, where 3 / 5 * 100 is 60.00000000000001
    return f'label_replace({expression} * 100 / {target}, "term", "{term}", "", "")'


def _gpu_busiest() -> str:
    # the pod's busiest GPU, mean over the last minute as the exporter's /pods gives it, percent
    return f"max by ({_BY_POD}) (avg_over_time(gpu_pulse_pod_gpu_utilization_ratio{{$namespace_matcher}}[1m])) * 100"


def prometheus_queries(spec: SaturationSpec) -> tuple[str, str]:
    """The (value query, sample-time query) templates (with $namespace_matcher) that compute a resolved spec's
    saturation from the exporter's `gpu_pulse_pod_inference_*` and `gpu_pulse_pod_gpu_utilization_ratio` series: one
    series per pod, labelled `term` with its driving term (`topk` keeps the largest term's series)."""
    queue = _series("gpu_pulse_pod_inference_queued_requests")
    parts: list[str] = []
    times: list[str] = []
    if spec.queued_requests is not None:
        parts.append(_term(queue, spec.queued_requests, QUEUED_REQUESTS))
        times.append("gpu_pulse_pod_inference_queued_requests")
    if spec.kv_cache_utilization is not None:
        kv = _series("gpu_pulse_pod_inference_kv_cache_utilization_ratio")
        parts.append(_term(kv, spec.kv_cache_utilization, KV_CACHE_UTILIZATION))
        times.append("gpu_pulse_pod_inference_kv_cache_utilization_ratio")
    for slo, family, term in (
        (spec.time_to_first_token, "gpu_pulse_pod_inference_time_to_first_token_seconds", TIME_TO_FIRST_TOKEN),
        (spec.inter_token_latency, "gpu_pulse_pod_inference_inter_token_latency_seconds", INTER_TOKEN_LATENCY),
    ):
        if slo is not None:
            quantile = f', quantile="{_QUANTILES[slo.percentile]}"'
            parts.append(_term(_series(family, quantile), slo.slo_seconds, term))
            times.append(family)
    terms = f"topk by ({_BY_POD}) (1, {' or '.join(parts)})"
    gpu = _gpu_busiest()
    if spec.cap is not None:
        low = f"({gpu} < {spec.cap.gpu_utilization_below_percent})"
        capped = f"clamp_max({terms}, {spec.cap.percent})"
        terms = f"(({terms}) unless on ({_BY_POD}) {low}) or ({capped} and on ({_BY_POD}) {low})"
    if spec.idle_gpu_utilization_percent > _ZERO:
        idle = f"(({gpu} < {spec.idle_gpu_utilization_percent}) and on ({_BY_POD}) ({queue} == 0))"
        terms = (
            f"(({terms}) unless on ({_BY_POD}) {idle}) "
            f'or label_replace(max by ({_BY_POD}) ({terms}) * 0 and on ({_BY_POD}) {idle}, "term", "{IDLE}", "", "")'
        )
    sample_time = f"min by ({_BY_POD}) ({' or '.join(f'timestamp({name}{{$namespace_matcher}})' for name in times)})"
    return terms, sample_time
