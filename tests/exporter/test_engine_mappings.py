"""Each engine's exposition, as simulation/engines serves it after upstream, read through its mapping into the same
normalised figures: what each engine's docs say its names mean, and how its series combine."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from exporter.engines.mappings import MARK_PREFIXES, WANTED
from exporter.engines.normalise import EngineFigures
from simulation.curves import constant
from simulation.engines import expositions as served
from simulation.engines.model import ServingEngine
from simulation.engines.server import simulated_engine
from simulation.scenario import Pod
from toolkit.textparse import parse_wanted

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


def test_a_data_parallel_vllm_reads_as_one_engine_over_its_cores() -> None:
    """vLLM with `--data-parallel-size 2` serves every family once per engine core (`engine="0"`, `engine="1"`:
    vllm/v1/metrics/loggers.py PrometheusStatLogger); the pod's queue and batch are the cores' sums, its KV-cache use
    their mean, and its latency percentiles come from their buckets together."""
    cores = [
        ServingEngine(load, ttft_buckets=served.VLLM_TTFT_BUCKETS, itl_buckets=served.VLLM_ITL_BUCKETS)
        for load in (constant(150.0), constant(60.0))
    ]
    figures = EngineFigures(interval=1.0)
    for second in range(1, 31):
        for core in cores:
            core.advance(float(second))
        text = served.vllm_metrics(cores, "m", START)
        inference = figures.read(START + second, parse_wanted(text, WANTED, MARK_PREFIXES))
    assert {'engine="0"', 'engine="1"'} <= {part for line in text.splitlines() for part in line.split(",")}
    assert text.count("\n") > 800  # two cores' families, as a real two-rank vLLM serves: about a thousand lines
    result = inference.figures
    assert result.state == "ready" and result.engine == "vllm", result.reason
    assert result.queued_requests == sum(round(c.state.queued) for c in cores)
    assert result.running_requests == sum(round(c.state.running) for c in cores) > round(cores[0].state.running)
    mean_kv = sum(round(c.state.kv_usage, 6) for c in cores) / 2
    assert result.kv_cache_utilization == pytest.approx(mean_kv, abs=1e-6)
    assert result.time_to_first_token_seconds is not None and result.time_to_first_token_seconds.p90 is not None


def test_a_scenario_pod_serves_a_data_parallel_vllm() -> None:
    pod = Pod.model_validate(
        {"namespace": "ns", "name": "llm", "containers": [{"name": "vllm"}],
         "engine": {"kind": "vllm", "data_parallel": 3, "arrivals": {"baseline": 50}}}
    )  # fmt: skip
    engine = simulated_engine(pod, lambda _: 50.0, START)
    text = engine.metrics(20.0).decode()
    running = [line for line in text.splitlines() if line.startswith("vllm:num_requests_running{")]
    assert [line.split('engine="')[1][0] for line in running] == ["0", "1", "2"]
    assert all(line.endswith(running[0].rsplit(" ", 1)[1]) for line in running)  # the server balances them evenly
