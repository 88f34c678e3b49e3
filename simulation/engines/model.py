"""A serving engine's scheduler as a fluid model: requests arrive, wait, run in a batch bounded by the KV cache, and
finish; the simulated GPU's utilization follows the batch.

What it reproduces is what makes GPU utilization a poor autoscaling signal for LLM serving (GKE's inference
autoscaling best practices; llm-d's autoscaling docs: "GPU utilization is often pegged near 100% during active
batching regardless of actual load"): a decode step launches kernels for the whole step whatever the batch size, so
one running request already keeps the GPU busy most of the time, and from a modest batch on the duty cycle pins near
100%; past saturation the batch stops growing (the KV cache is full: vLLM admits a request only when its blocks fit,
vllm/v1/core/sched/scheduler.py), the queue keeps growing, TTFT grows with the wait, and tokens/s flattens. The KV
cache is preallocated (`--gpu-memory-utilization`), so framebuffer use stays flat while its use inside moves.

Time advances in fixed steps from the last call to `advance(t)`: the same arrival curve gives the same figures.
Observations (TTFT, inter-token latency) are whole requests and tokens, carried over in fractions between steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

STEP_S = 0.1


@dataclass(frozen=True, slots=True)
class EngineShape:
    """What one engine replica can do; defaults are of a 7-8B model on one H100-class GPU."""

    max_num_seqs: int = 256  # vLLM's default cap on the running batch (`--max-num-seqs`)
    kv_cache_tokens: int = 400_000  # what the preallocated KV cache holds
    prompt_tokens: int = 1024  # mean prompt length
    output_tokens: int = 256  # mean generated length
    base_itl_s: float = 0.010  # one decode step with a batch of one
    itl_per_seq_s: float = 0.00012  # what each further running request adds to a decode step
    prefill_tokens_per_s: float = 20_000.0

    def itl(self, batch: float) -> float:
        return self.base_itl_s + self.itl_per_seq_s * max(0.0, batch - 1.0)

    @property
    def kv_batch_cap(self) -> float:
        """How many requests fit in the KV cache at their mean mid-generation length."""
        return self.kv_cache_tokens / (self.prompt_tokens + self.output_tokens / 2)

    @property
    def batch_cap(self) -> float:
        return min(float(self.max_num_seqs), self.kv_batch_cap)

    def service_rate(self, batch: float) -> float:
        """Requests finished per second with `batch` running."""
        return 0.0 if batch <= 0 else batch / (self.itl(batch) * self.output_tokens)

    @property
    def saturation_rate(self) -> float:
        return self.service_rate(self.batch_cap)


def gpu_utilization(batch: float) -> float:
    """The GPU's duty cycle with `batch` requests running, in percent: near 60% with one, pinned near 100% from a
    batch of about ten (every decode step runs kernels for its whole length; NVML's utilization is the share of time
    some kernel ran, nvml.h nvmlUtilization_t)."""
    if batch <= 0:
        return 0.0
    return min(100.0, 100.0 - 40.0 * math.exp(-(batch - 1.0) / 3.0))


@dataclass(slots=True)
class Histogram:
    """Cumulative bucket counts as prometheus_client keeps them."""

    bounds: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: int = 0
    sum: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, value: float, times: int = 1) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += times
        self.total += times
        self.sum += value * times


@dataclass(slots=True)
class EngineState:
    """One engine's scheduler state and cumulative counters."""

    queued: float = 0.0
    running: float = 0.0
    finished: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    kv_usage: float = 0.0
    gpu_percent: float = 0.0
    t: float = 0.0
    _admitted: float = 0.0  # fractions of requests and tokens carried to the next step
    _finished: float = 0.0
    _tokens: float = 0.0


class ServingEngine:
    """The fluid model of one engine, driven by `arrivals(t)`: percent of the engine's saturation rate (100: as many
    requests arrive as it can finish at its largest batch)."""

    def __init__(
        self,
        arrivals: Callable[[float], float],
        *,
        shape: EngineShape | None = None,
        ttft_buckets: Sequence[float] = (),
        itl_buckets: Sequence[float] = (),
        start: float = 0.0,
    ) -> None:
        self.shape = shape or EngineShape()
        self.arrivals = arrivals
        self.state = EngineState(t=start)
        self.ttft = Histogram(ttft_buckets)
        self.itl = Histogram(itl_buckets)

    def arrival_rate(self, t: float) -> float:
        return max(0.0, self.arrivals(t)) / 100.0 * self.shape.saturation_rate

    def advance(self, t: float) -> EngineState:
        """Run the scheduler up to scenario time `t` (never backwards)."""
        s, shape = self.state, self.shape
        while s.t + STEP_S <= t:
            s.t += STEP_S
            s.queued += self.arrival_rate(s.t) * STEP_S
            admit = max(0.0, min(s.queued, shape.batch_cap - s.running))
            s.queued -= admit
            s.running += admit
            itl = shape.itl(s.running)
            wait = s.queued / max(self.arrival_rate(s.t), shape.service_rate(s.running), 1e-9)
            s._admitted += admit
            whole = int(s._admitted)
            if whole:
                s._admitted -= whole
                self.ttft.observe(wait + shape.prompt_tokens / shape.prefill_tokens_per_s, whole)
                s.prompt_tokens += whole * shape.prompt_tokens
            tokens = s.running * STEP_S / itl if s.running > 0 else 0.0
            s._tokens += tokens
            whole_tokens = int(s._tokens)
            if whole_tokens:
                s._tokens -= whole_tokens
                s.generated_tokens += whole_tokens
                self.itl.observe(itl, whole_tokens)
            done = min(s.running, shape.service_rate(s.running) * STEP_S)
            s.running -= done
            s._finished += done
            whole_done = int(s._finished)
            if whole_done:
                s._finished -= whole_done
                s.finished += whole_done
            mid_length = shape.prompt_tokens + shape.output_tokens / 2
            s.kv_usage = min(1.0, s.running * mid_length / shape.kv_cache_tokens)
            s.gpu_percent = gpu_utilization(s.running)
        return s
