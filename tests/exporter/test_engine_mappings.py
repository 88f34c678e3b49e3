"""Each engine's exposition, as simulation/engines serves it after upstream, read through its mapping into the same
normalised figures: what each engine's docs say its names mean, and how its series combine."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from exporter.engines.mappings import MARK_PREFIXES, WANTED
from exporter.engines.normalise import EngineFigures
from exporter.engines.textparse import parse_wanted
from simulation.engines import expositions as served
from simulation.engines.model import ServingEngine

START = 1_800_000_000.0
ENGINES: dict[str, tuple[Callable[[ServingEngine], str], tuple[float, ...], tuple[float, ...]]] = {
    "vllm": (lambda e: served.vllm_metrics(e, "m", START), served.VLLM_TTFT_BUCKETS, served.VLLM_ITL_BUCKETS),
    "sglang": (lambda e: served.sglang_metrics(e, "m", START), served.SGLANG_TTFT_BUCKETS, served.SGLANG_ITL_BUCKETS),
    "nim": (lambda e: served.nim_metrics(e, "m", START), served.VLLM_TTFT_BUCKETS, served.VLLM_ITL_BUCKETS),
    "triton-trtllm": (served.triton_trtllm_metrics, (), ()),
    "dynamo": (lambda e: served.dynamo_metrics(e, "m", START), served.VLLM_TTFT_BUCKETS, served.VLLM_ITL_BUCKETS),
    "tgi": (served.tgi_metrics, (), ()),
}
KV_CACHE = {"vllm", "sglang", "nim", "triton-trtllm"}  # Dynamo's frontend and TGI serve none
LATENCIES = {"vllm", "sglang", "nim", "dynamo"}  # Triton's are microsecond counters; TGI has no TTFT histogram


@pytest.mark.parametrize("engine", list(ENGINES))
def test_each_engine_reads_into_the_same_figures(engine: str) -> None:
    render, ttft, itl = ENGINES[engine]
    model = ServingEngine(lambda _: 150.0, ttft_buckets=ttft, itl_buckets=itl)
    figures = EngineFigures(interval=1.0)
    for second in range(1, 31):
        model.advance(float(second))
        inference = figures.read(START + second, parse_wanted(render(model), WANTED, MARK_PREFIXES))
    result = inference.figures
    assert result.state == "ready" and result.engine == engine, result.reason
    # SGLang reports its queue once per tensor-parallel rank: read once, not twice
    assert result.queued_requests == round(model.state.queued) > 0
    assert result.running_requests == round(model.state.running)
    if engine in KV_CACHE:
        assert result.kv_cache_utilization == pytest.approx(model.state.kv_usage, abs=1e-6)
    else:
        assert result.kv_cache_utilization is None
    if engine in LATENCIES:
        assert result.time_to_first_token_seconds is not None and result.time_to_first_token_seconds.p90 is not None
        assert result.inter_token_latency_seconds is not None and result.inter_token_latency_seconds.p50 is not None
    assert result.requests_per_second is not None and result.requests_per_second > 0
