"""Which metric names of each serving engine give which normalised figure, and how their series combine.

An engine is recognised by the names it serves, never by configuration: the first mapping whose `marks` occur in an
exposition is the engine. Each figure lists the names that give it, newest first (a renamed metric keeps working under
its old name while engines that serve it run), and says how several series of it combine: engines that run several
schedulers in one pod (vLLM's data-parallel engines, SGLang's DP ranks) report one series per scheduler; queues and
batches add up, the KV-cache use of equal caches is their mean. A figure whose names are all missing is None with a
reason, never a number from another metric.

Figures are those of the Gateway API Inference Extension's model-server protocol (queued requests, running requests,
KV-cache utilization 0-1; gateway-api-inference-extension docs/proposals/003-model-server-protocol) plus latency
histograms and counters. Sources per engine are cited beside each mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from toolkit.pods_contract import EngineName

Combine = Literal["sum", "mean"]


@dataclass(frozen=True, slots=True)
class GaugeSource:
    """A gauge figure: the first of `names` the exposition has, its series filtered by `only` and combined."""

    names: tuple[str, ...]
    combine: Combine = "sum"
    only: Mapping[str, str] = field(default_factory=dict)  # label -> value a series must have ("" = label absent)
    scale: float = 1.0  # published = value * scale (a percentage 0-100 -> 0-1)


@dataclass(frozen=True, slots=True)
class EngineMapping:
    engine: EngineName
    marks: tuple[str, ...]  # a family name with one of these prefixes (or equal to one) makes the engine this one
    queued: GaugeSource | None
    running: GaugeSource | None
    kv_cache: GaugeSource | None
    ttft: tuple[str, ...] = ()  # histogram family names (without `_bucket`)
    itl: tuple[str, ...] = ()
    requests: tuple[str, ...] = ()  # counter sample names (with `_total`), summed over their series
    generated_tokens: tuple[str, ...] = ()
    model_label: str | None = None  # the label naming the served model
    only: Mapping[str, str] = field(default_factory=dict)  # applies to histograms and counters too

    def histograms(self) -> tuple[str, ...]:
        return self.ttft + self.itl

    def gauges(self) -> tuple[GaugeSource, ...]:
        return tuple(g for g in (self.queued, self.running, self.kv_cache) if g is not None)


# vLLM (vllm-project/vllm, vllm/v1/metrics/loggers.py, PrometheusStatLogger): every family labelled `model_name` and
# `engine` (the data-parallel engine index: one series per EngineCore, each with its own scheduler and KV cache).
# `vllm:kv_cache_usage_perc` is 0-1 ("1 means 100 percent usage") and replaced `vllm:gpu_cache_usage_perc` (removed by
# vllm PR #29330); `vllm:inter_token_latency_seconds` replaced `vllm:time_per_output_token_seconds` (deprecated, same
# buckets); `vllm:request_success_total` is one series per `finished_reason`.
VLLM = EngineMapping(
    engine="vllm",
    marks=("vllm:",),
    queued=GaugeSource(("vllm:num_requests_waiting",)),
    running=GaugeSource(("vllm:num_requests_running",)),
    kv_cache=GaugeSource(("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), combine="mean"),
    ttft=("vllm:time_to_first_token_seconds",),
    itl=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    requests=("vllm:request_success_total",),
    generated_tokens=("vllm:generation_tokens_total",),
    model_label="model_name",
)

# SGLang (sgl-project/sglang, python/sglang/srt/metrics/collector.py): SchedulerMetricsCollector's gauges
# `sglang:num_queue_reqs`, `sglang:num_running_reqs`, `sglang:token_usage` (used / total KV tokens, 0-1), labelled
# with the scheduler's `tp_rank` (and `pp_rank`, `dp_rank` where set): each tensor-parallel rank of one scheduler
# reports the same queue, so only rank 0's series are read and DP ranks add up. TokenizerMetricsCollector's
# histograms `sglang:time_to_first_token_seconds`, `sglang:inter_token_latency_seconds` and counters
# `sglang:num_requests_total`, `sglang:generation_tokens_total`. Served with `--enable-metrics`.
SGLANG = EngineMapping(
    engine="sglang",
    marks=("sglang:",),
    queued=GaugeSource(("sglang:num_queue_reqs",), only={"tp_rank": "0"}),
    running=GaugeSource(("sglang:num_running_reqs",), only={"tp_rank": "0"}),
    kv_cache=GaugeSource(("sglang:token_usage",), combine="mean", only={"tp_rank": "0"}),
    ttft=("sglang:time_to_first_token_seconds",),
    itl=("sglang:inter_token_latency_seconds",),
    requests=("sglang:num_requests_total",),
    generated_tokens=("sglang:generation_tokens_total",),
    model_label="model_name",
)

# NVIDIA Dynamo's HTTP frontend (ai-dynamo/dynamo, lib/llm/src/http/service/metrics.rs; its metrics catalog):
# `dynamo_frontend_queued_requests`, `dynamo_frontend_inflight_requests`, histograms
# `dynamo_frontend_time_to_first_token_seconds` and `dynamo_frontend_inter_token_latency_seconds`, counters
# `dynamo_frontend_requests_total` and `dynamo_frontend_output_tokens_total`, all labelled `model`. The frontend has
# no KV cache of its own (the workers do).
DYNAMO = EngineMapping(
    engine="dynamo",
    marks=("dynamo_frontend_",),
    queued=GaugeSource(("dynamo_frontend_queued_requests",)),
    running=GaugeSource(("dynamo_frontend_inflight_requests",)),
    kv_cache=None,
    ttft=("dynamo_frontend_time_to_first_token_seconds",),
    itl=("dynamo_frontend_inter_token_latency_seconds",),
    requests=("dynamo_frontend_requests_total",),
    generated_tokens=("dynamo_frontend_output_tokens_total",),
    model_label="model",
)

# Triton Inference Server with the TensorRT-LLM backend (triton-inference-server/server docs/user_guide/metrics.md;
# tensorrtllm_backend docs, "Triton Metrics"): `nv_trt_llm_request_metrics{request_type="waiting"|"scheduled"|
# "context"|"active"|"max"}` and `nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"|"used"|"free"|
# "max"|"tokens_per"}`, labelled `model` and `version`. Triton's latencies are cumulative microsecond counters, not
# histograms: no TTFT or inter-token percentiles. `nv_inference_request_success` counts successful requests.
TRITON_TRTLLM = EngineMapping(
    engine="triton-trtllm",
    marks=("nv_trt_llm_",),
    queued=GaugeSource(("nv_trt_llm_request_metrics",), only={"request_type": "waiting"}),
    running=GaugeSource(("nv_trt_llm_request_metrics",), only={"request_type": "scheduled"}),
    kv_cache=GaugeSource(
        ("nv_trt_llm_kv_cache_block_metrics",), combine="mean", only={"kv_cache_block_type": "fraction"}
    ),
    requests=("nv_inference_request_success",),
    model_label="model",
)

# Hugging Face Text Generation Inference (huggingface/text-generation-inference, docs/source/reference/metrics.md;
# archived 2026-03): gauges `tgi_queue_size` and `tgi_batch_current_size`, the counter `tgi_request_success` (the
# Rust `metrics` crate: no `_total`); generated tokens are only a per-request histogram (no counter), there is no
# KV-cache gauge and no TTFT histogram;
# `tgi_request_mean_time_per_token_duration` is a per-request mean, not an inter-token histogram, so it is not read.
TGI = EngineMapping(
    engine="tgi",
    marks=("tgi_",),
    queued=GaugeSource(("tgi_queue_size",)),
    running=GaugeSource(("tgi_batch_current_size",)),
    kv_cache=None,
    requests=("tgi_request_success",),
)

# NVIDIA NIM for LLMs (docs.nvidia.com/nim/large-language-models, "Observability"): unprefixed names on `/v1/metrics`:
# `num_requests_waiting`, `num_requests_running`, `gpu_cache_usage_perc` (0-1), histograms
# `time_to_first_token_seconds` and `time_per_output_token_seconds`, counters `request_success_total` and
# `generation_tokens_total`, labelled `model_name`.
NIM = EngineMapping(
    engine="nim",
    marks=("num_requests_waiting", "gpu_cache_usage_perc"),
    queued=GaugeSource(("num_requests_waiting",)),
    running=GaugeSource(("num_requests_running",)),
    kv_cache=GaugeSource(("gpu_cache_usage_perc",), combine="mean"),
    ttft=("time_to_first_token_seconds",),
    itl=("time_per_output_token_seconds",),
    requests=("request_success_total",),
    generated_tokens=("generation_tokens_total",),
    model_label="model_name",
)

MAPPINGS: tuple[EngineMapping, ...] = (VLLM, SGLANG, DYNAMO, TRITON_TRTLLM, TGI, NIM)
BY_ENGINE: Mapping[str, EngineMapping] = {m.engine: m for m in MAPPINGS}


def _sample_names(mapping: EngineMapping) -> dict[str, str]:
    """sample name -> family name, for every name the mapping reads."""
    names: dict[str, str] = {}
    for gauge in mapping.gauges():
        for name in gauge.names:
            names[name] = name
    for family in mapping.histograms():
        names[family] = family
        for suffix in ("_bucket", "_count", "_sum"):
            names[family + suffix] = family
    for name in (*mapping.requests, *mapping.generated_tokens):
        names[name] = name
    return names


# every sample name any mapping reads -> its family: the parser keeps only these lines
WANTED: Mapping[str, str] = {k: v for m in MAPPINGS for k, v in _sample_names(m).items()}


# the prefixes that mark an engine's names, most specific engine first (a Dynamo worker passes vLLM's names through):
# the parser reports the first of them that begins a sample's name (a renamed family still shows its engine)
MARK_PREFIXES: tuple[str, ...] = tuple(mark for m in MAPPINGS for mark in m.marks)


def recognise(mark: str | None) -> EngineMapping | None:
    """The engine whose mark (one of MARK_PREFIXES) an exposition showed first; None for none."""
    for mapping in MAPPINGS:
        if mark in mapping.marks:
            return mapping
    return None
