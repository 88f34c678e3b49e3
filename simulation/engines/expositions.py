"""Each simulated engine's `/metrics` as the engine serves it: names, types, label names, units and buckets as its
upstream source declares them, in prometheus_client's text format 0.0.4 (what vLLM and SGLang serve through it:
`# HELP`, `# TYPE`, counters named `_total` on their TYPE line, `_created` series, floats written as Python's repr).

vLLM: vllm-project/vllm, vllm/v1/metrics/loggers.py (PrometheusStatLogger): labels `model_name` and `engine`; TTFT
buckets 0.001 ... 2560 s, inter-token 0.01 ... 80 s, request latency 0.3 ... 7680 s. TGI:
huggingface/text-generation-inference docs/source/reference/metrics.md (no labels on the queue and batch gauges).
SGLang, NIM, Triton with TensorRT-LLM and Dynamo's frontend: the sources cited in exporter/engines/mappings.py and
beside each function below.
The families no reader here needs are served too, at their real size: a reader must find its dozen among a thousand
lines.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence

from simulation.engines.model import EngineState, Histogram, ServingEngine

VLLM_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
)  # fmt: skip
VLLM_ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
VLLM_REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
)  # fmt: skip
VLLM_FINISH_REASONS = ("stop", "length", "abort")  # vllm/v1/engine/__init__.py FinishReason
# TGI's histograms use the `metrics` crate's default exporter buckets unless configured
TGI_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def py_float(value: float) -> str:
    """A value as prometheus_client writes it (utils.floatToGoString)."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in pairs)
    return "{" + inner + "}" if inner else ""


class _Writer:
    def __init__(self, created: float) -> None:
        self.lines: list[str] = []
        self.created = created

    def family(self, name: str, type_: str, help_: str) -> None:
        self.lines.append(f"# HELP {name} {help_}\n# TYPE {name} {type_}\n")

    def sample(self, name: str, labels: Sequence[tuple[str, str]], value: float) -> None:
        self.lines.append(f"{name}{_labels(labels)} {py_float(value)}\n")

    def gauge(self, name: str, help_: str, labels: Sequence[tuple[str, str]], value: float) -> None:
        self.family(name, "gauge", help_)
        self.sample(name, labels, value)

    def counter(self, name: str, help_: str, series: Sequence[tuple[Sequence[tuple[str, str]], float]]) -> None:
        """prometheus_client: `# TYPE x_total counter` in text format 0.0.4, then `x_total` and `x_created`."""
        self.family(f"{name}_total", "counter", help_)
        for labels, value in series:
            self.sample(f"{name}_total", labels, value)
        self.family(f"{name}_created", "gauge", help_)
        for labels, _ in series:
            self.sample(f"{name}_created", labels, self.created)

    def histogram(self, name: str, help_: str, labels: Sequence[tuple[str, str]], histogram: Histogram) -> None:
        self.histograms(name, help_, [(labels, histogram)])

    def histograms(self, name: str, help_: str, series: Sequence[tuple[Sequence[tuple[str, str]], Histogram]]) -> None:
        """One histogram family with a series per label set (prometheus_client writes each child's buckets, count
        and sum in turn, then the `_created` gauge family)."""
        self.family(name, "histogram", help_)
        for labels, histogram in series:
            for bound, count in zip(histogram.bounds, histogram.counts, strict=True):
                self.sample(f"{name}_bucket", (*labels, ("le", py_float(bound))), count)
            self.sample(f"{name}_bucket", (*labels, ("le", "+Inf")), histogram.total)
            self.sample(f"{name}_count", labels, histogram.total)
            self.sample(f"{name}_sum", labels, histogram.sum)
        self.family(f"{name}_created", "gauge", help_)
        for labels, _ in series:
            self.sample(f"{name}_created", labels, self.created)

    def text(self) -> str:
        return "".join(self.lines)


def _static_histogram(bounds: Sequence[float], total: int, typical: float) -> Histogram:
    """A histogram whose `total` observations all fell at `typical` (the families no reader here uses)."""
    histogram = Histogram(bounds)
    if total:
        histogram.observe(typical, total)
    return histogram


def _finished_at(bounds: Sequence[float], typical: Callable[[ServingEngine], float], core: ServingEngine) -> Histogram:
    """A static histogram of `core`'s finished requests, all at `typical(core)`."""
    return _static_histogram(bounds, core.state.finished, typical(core))


def vllm_metrics(
    engine: ServingEngine | Sequence[ServingEngine], model: str, created: float, *, old_kv_name: bool = False
) -> str:
    """vLLM's `/metrics` serving `model`: one engine core (`engine="0"`), or a data-parallel deployment's cores, one
    series per core in every `vllm:` family, labelled `engine="0"`, `engine="1"`... (vllm/v1/metrics/loggers.py
    PrometheusStatLogger: `labelnames = ["model_name", "engine"]` and one label value set per index in
    `engine_indexes`, so one API server with `--data-parallel-size N` serves N series of each family).
    `old_kv_name`: serve the KV-cache use under its name before vllm PR #29330 (`vllm:gpu_cache_usage_perc`) as
    well, as releases before it did."""
    cores = [engine] if isinstance(engine, ServingEngine) else list(engine)
    w = _Writer(created)
    every = [(core, (("model_name", model), ("engine", str(index)))) for index, core in enumerate(cores)]

    def gauge(name: str, help_: str, value: Callable[[ServingEngine], float]) -> None:
        w.family(name, "gauge", help_)
        for core, labels in every:
            w.sample(name, labels, value(core))

    def counter(name: str, help_: str, value: Callable[[ServingEngine], float]) -> None:
        w.counter(name, help_, [(labels, value(core)) for core, labels in every])

    def histogram(name: str, help_: str, of: Callable[[ServingEngine], Histogram]) -> None:
        w.histograms(name, help_, [(labels, of(core)) for core, labels in every])

    gauge(
        "vllm:num_requests_running", "Number of requests in model execution batches.", lambda c: round(c.state.running)
    )
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", lambda c: round(c.state.queued))
    if old_kv_name:
        gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", lambda c: c.state.kv_usage)
    gauge(
        "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lambda c: round(c.state.kv_usage, 6)
    )
    counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
            lambda c: float(c.state.prompt_tokens))  # fmt: skip
    counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            lambda c: float(c.state.prompt_tokens // 4))  # fmt: skip
    counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", lambda c: 0.0)
    counter("vllm:prompt_tokens", "Number of prefill tokens processed.", lambda c: float(c.state.prompt_tokens))
    counter(
        "vllm:generation_tokens", "Number of generation tokens processed.", lambda c: float(c.state.generated_tokens)
    )

    def finished(s: EngineState) -> tuple[int, int, int]:
        return (s.finished * 8 // 10, s.finished - s.finished * 8 // 10 - s.finished // 100, s.finished // 100)

    w.counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        [
            ((*labels, ("finished_reason", r)), float(n))
            for core, labels in every
            for r, n in zip(VLLM_FINISH_REASONS, finished(core.state), strict=True)
        ],
    )
    tokens = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
    sizes: tuple[tuple[str, str, Callable[[ServingEngine], float]], ...] = (
        ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", lambda c: c.shape.prompt_tokens),
        ("vllm:request_generation_tokens", "Number of generation tokens processed.", lambda c: c.shape.output_tokens),
        ("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.",
         lambda c: c.shape.output_tokens),
        ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
         lambda c: 2 * c.shape.output_tokens),
    )  # fmt: skip
    for name, help_, typical in sizes:
        histogram(name, help_, functools.partial(_finished_at, tokens, typical))
    histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
              lambda c: _static_histogram((1, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136,
                                           144, 152, 160, 168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256,
                                           272, 288, 304, 320, 336, 352, 368, 384, 400, 416, 432, 448, 464, 480, 496,
                                           512), c.state.generated_tokens // 64, 64))  # fmt: skip
    histogram("vllm:request_params_n", "Histogram of the n request parameter.",
              lambda c: _static_histogram((1, 2, 5, 10, 20), c.state.finished, 1))  # fmt: skip
    histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lambda c: c.ttft)
    histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", lambda c: c.itl)

    def e2e(c: ServingEngine) -> float:
        return c.shape.output_tokens * c.shape.itl(c.state.running)

    latencies: tuple[tuple[str, str, Callable[[ServingEngine], float]], ...] = (
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e2e),
        ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", lambda c: 0.0),
        ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", e2e),
        ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", lambda c: 0.05),
        ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", e2e),
    )
    for name, help_, seconds in latencies:
        histogram(name, help_, functools.partial(_finished_at, VLLM_REQUEST_LATENCY_BUCKETS, seconds))
    histogram(
        "vllm:request_time_per_prefill_token_seconds",
        "Histogram of time spent per prefill token request in seconds.",
        lambda c: _static_histogram(
            (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0), c.state.finished, 0.001
        ),
    )
    w.family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
    for index, core in enumerate(cores):
        w.sample(
            "vllm:cache_config_info",
            (("block_size", "16"), ("cache_dtype", "auto"), ("enable_prefix_caching", "True"), ("engine", str(index)),
             ("gpu_memory_utilization", "0.9"), ("num_gpu_blocks", str(core.shape.kv_cache_tokens // 16)),
             ("prefix_caching_hash_algo", "sha256"), ("swap_space", "4")),
            1.0,
        )  # fmt: skip
    return _process_families(w, created) + w.text()


def _process_families(w: _Writer, created: float) -> str:
    """prometheus_client's default collectors (python_gc, python_info, process_*), which every engine on it serves."""
    out = _Writer(created)
    out.family("python_gc_objects_collected_total", "counter", "Objects collected during gc")
    for generation, value in (("0", 12345.0), ("1", 2345.0), ("2", 345.0)):
        out.sample("python_gc_objects_collected_total", (("generation", generation),), value)
    out.family("python_gc_collections_total", "counter", "Number of times this generation was collected")
    for generation, value in (("0", 1234.0), ("1", 112.0), ("2", 10.0)):
        out.sample("python_gc_collections_total", (("generation", generation),), value)
    out.gauge("python_info", "Python platform information",
              (("implementation", "CPython"), ("major", "3"), ("minor", "12"), ("patchlevel", "11"),
               ("version", "3.12.11")), 1.0)  # fmt: skip
    out.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", (), 9.1e10)
    out.gauge("process_resident_memory_bytes", "Resident memory size in bytes.", (), 4.2e9)
    out.gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", (), created)
    out.counter("process_cpu_seconds", "Total user and system CPU time spent in seconds.", [((), 1234.5)])
    out.gauge("process_open_fds", "Number of open file descriptors.", (), 120.0)
    out.gauge("process_max_fds", "Maximum number of open file descriptors.", (), 1048576.0)
    return out.text()


def tgi_metrics(engine: ServingEngine) -> str:
    """TGI's `/metrics` (the Rust `metrics` crate's Prometheus exporter: no `_total` suffix, no HELP lines, integer
    values without a fraction)."""
    s = engine.state
    lines = [
        "# TYPE tgi_queue_size gauge\n",
        f"tgi_queue_size {round(s.queued)}\n",
        "# TYPE tgi_batch_current_size gauge\n",
        f"tgi_batch_current_size {round(s.running)}\n",
        "# TYPE tgi_batch_current_max_tokens gauge\n",
        f"tgi_batch_current_max_tokens {round(s.running * engine.shape.output_tokens)}\n",
        "# TYPE tgi_request_count counter\n",
        f"tgi_request_count {s.finished}\n",
        "# TYPE tgi_request_success counter\n",
        f"tgi_request_success {s.finished}\n",
    ]
    duration = _static_histogram(TGI_DURATION_BUCKETS, s.finished, engine.shape.itl(s.running) * 64)
    lines.append("# TYPE tgi_request_duration histogram\n")
    for bound, count in zip(duration.bounds, duration.counts, strict=True):
        lines.append(f'tgi_request_duration_bucket{{le="{bound}"}} {count}\n')
    lines.append(f'tgi_request_duration_bucket{{le="+Inf"}} {duration.total}\n')
    lines.append(f"tgi_request_duration_sum {duration.sum}\ntgi_request_duration_count {duration.total}\n")
    return "".join(lines)


# SGLang (sgl-project/sglang python/sglang/srt/metrics/collector.py): scheduler gauges labelled with the scheduler's
# `model_name` and `tp_rank` (every tensor-parallel rank reports the same queue), tokenizer histograms and counters.
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
                      0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)  # fmt: skip


def sglang_metrics(engine: ServingEngine, model: str, created: float, *, tp_size: int = 2) -> str:
    s = engine.state
    w = _Writer(created)
    for name, help_, value in (
        ("sglang:num_running_reqs", "The number of running requests.", float(round(s.running))),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", float(round(s.queued))),
        ("sglang:token_usage", "The token usage.", round(s.kv_usage, 6)),
    ):
        w.family(name, "gauge", help_)
        for rank in range(tp_size):
            w.sample(name, (("model_name", model), ("tp_rank", str(rank))), value)
    labels = (("model_name", model),)
    w.histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels,
                engine.ttft)  # fmt: skip
    w.histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels,
                engine.itl)  # fmt: skip
    w.counter("sglang:num_requests", "Number of requests processed.", [(labels, float(s.finished))])
    w.counter("sglang:generation_tokens", "Number of generation tokens processed.",
              [(labels, float(s.generated_tokens))])  # fmt: skip
    return w.text()


def nim_metrics(engine: ServingEngine, model: str, created: float) -> str:
    """NVIDIA NIM for LLMs' `/v1/metrics`: vLLM's families without the `vllm:` prefix, labelled `model_name`."""
    s = engine.state
    labels = (("model_name", model),)
    w = _Writer(created)
    w.gauge("num_requests_running", "Number of requests currently running on GPU.", labels, float(round(s.running)))
    w.gauge("num_requests_waiting", "Number of requests waiting.", labels, float(round(s.queued)))
    w.gauge("gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", labels, round(s.kv_usage, 6))
    w.histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels, engine.ttft)
    w.histogram("time_per_output_token_seconds", "Histogram of time per output token in seconds.", labels, engine.itl)
    w.counter("request_success", "Count of successfully processed requests.", [(labels, float(s.finished))])
    w.counter("generation_tokens", "Number of generation tokens processed.", [(labels, float(s.generated_tokens))])
    return w.text()


def triton_trtllm_metrics(engine: ServingEngine) -> str:
    """Triton with the TensorRT-LLM backend (its C++ metrics: integers, labels `model` and `version`)."""
    s = engine.state
    shape = engine.shape
    blocks = shape.kv_cache_tokens // 64
    used = round(s.kv_usage * blocks)
    lines = ["# HELP nv_trt_llm_request_metrics TRT LLM request metrics\n",
             "# TYPE nv_trt_llm_request_metrics gauge\n"]  # fmt: skip
    for kind, value in (("waiting", round(s.queued)), ("scheduled", round(s.running)), ("context", 0),
                        ("active", round(s.running)), ("max", shape.max_num_seqs)):  # fmt: skip
        lines.append(f'nv_trt_llm_request_metrics{{model="tensorrt_llm",request_type="{kind}",version="1"}} {value}\n')
    lines += ["# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics\n",
              "# TYPE nv_trt_llm_kv_cache_block_metrics gauge\n"]  # fmt: skip
    block_figures: tuple[tuple[str, float], ...] = (
        ("max", blocks), ("free", blocks - used), ("used", used), ("tokens_per", 64),
        ("fraction", round(s.kv_usage, 6)),
    )  # fmt: skip
    for kind, figure in block_figures:
        lines.append(
            f'nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type="{kind}",model="tensorrt_llm",version="1"}} '
            f"{figure}\n"
        )
    lines += ["# HELP nv_inference_request_success Number of successful inference requests, all batch sizes\n",
              "# TYPE nv_inference_request_success counter\n",
              f'nv_inference_request_success{{model="ensemble",version="1"}} {s.finished}\n']  # fmt: skip
    return "".join(lines)


def dynamo_metrics(engine: ServingEngine, model: str, created: float) -> str:
    """Dynamo's HTTP frontend (lib/llm/src/http/service/metrics.rs), labelled `model`."""
    s = engine.state
    labels = (("model", model),)
    w = _Writer(created)
    w.gauge("dynamo_frontend_inflight_requests", "Inflight requests at the HTTP frontend", labels,
            float(round(s.running)))  # fmt: skip
    w.gauge("dynamo_frontend_queued_requests", "Queued requests at the HTTP frontend", labels, float(round(s.queued)))
    w.histogram("dynamo_frontend_time_to_first_token_seconds", "Time to first token", labels, engine.ttft)
    w.histogram("dynamo_frontend_inter_token_latency_seconds", "Inter-token latency", labels, engine.itl)
    w.counter("dynamo_frontend_requests", "Total LLM requests processed", [(labels, float(s.finished))])
    w.counter("dynamo_frontend_output_tokens", "Total output tokens", [(labels, float(s.generated_tokens))])
    return w.text()
