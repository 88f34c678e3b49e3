"""The engine reader against real HTTP servers: a simulated vLLM read into the contract's figures, and hostile endpoints
(endless, dripping, redirecting, gzip-bombed, a million series, NaN/Inf/negative, wrong type, another host) each
refused or bounded with a reason, within bounded memory."""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from exporter.engines.reader import EngineReader
from exporter.snapshot import EngineReadStats, PodInference
from simulation.engines.expositions import VLLM_ITL_BUCKETS, VLLM_TTFT_BUCKETS, vllm_metrics
from simulation.engines.model import ServingEngine
from toolkit.boundedfetch import BoundedFetcher
from toolkit.pods import Pod
from toolkit.pods_contract import InferenceFigures

MAX_BYTES = 256 * 1024
TIMEOUT = 0.5
# the hostile endpoints' reads: long enough for this test's own server to make a quarter of a megabyte of series under
# tracemalloc (which slows every allocation several times), so that the bound that stops them is the size cap
HOSTILE_TIMEOUT = 3.0
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[int]]]:
    servers: list[TestServer] = []

    async def start(handler: Handler) -> int:
        app = web.Application()
        app.router.add_get("/metrics", handler)
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server()
        servers.append(server)
        assert server.port is not None
        return server.port

    yield start
    for server in servers:
        await server.close()


def engine_pod(port: int | str, **annotations: str) -> Pod:
    return Pod(
        "ml",
        "llm-0",
        uid="u1",
        pod_ip="127.0.0.1",
        ready=True,
        annotations={"gpu-pulse.dev/engine-port": str(port), **annotations},
    )


async def read_with_stats(pods: list[Pod], timeout: float = TIMEOUT) -> tuple[dict[str, PodInference], EngineReadStats]:
    """One cycle of a reader over `pods`: each pod's outcome by name, and the reader's stats."""
    reader = EngineReader(lambda: pods, interval=1.0, timeout=timeout, max_bytes=MAX_BYTES)
    async with BoundedFetcher(timeout=timeout, max_bytes=MAX_BYTES) as fetcher:
        readings = await reader.cycle(fetcher)
    return {name: inference for (_, name), inference in readings.pods.items()}, readings.stats


async def read(pods: list[Pod], timeout: float = TIMEOUT) -> dict[str, PodInference]:
    return (await read_with_stats(pods, timeout))[0]


async def test_a_simulated_vllm_is_read_into_the_contracts_figures(serve: Callable[[Handler], Awaitable[int]]) -> None:
    t = [0.0]
    engine = ServingEngine(lambda _: 150.0, ttft_buckets=VLLM_TTFT_BUCKETS, itl_buckets=VLLM_ITL_BUCKETS)

    async def metrics(_: web.Request) -> web.Response:
        engine.advance(t[0])
        return web.Response(text=vllm_metrics(engine, "llama", 1.7e9), content_type="text/plain")

    port = await serve(metrics)
    wall = [1_800_000_000.0]
    reader = EngineReader(lambda: [engine_pod(port)], interval=1.0, timeout=TIMEOUT, clock=lambda: wall[0])
    async with BoundedFetcher(timeout=TIMEOUT, max_bytes=MAX_BYTES) as fetcher:
        for _ in range(20):
            t[0] += 1.0
            wall[0] += 1.0
            readings = await reader.cycle(fetcher)
    inference = readings.pods[("ml", "llm-0")]
    figures = inference.figures
    assert figures.state == "ready", figures.reason
    assert figures.engine == "vllm" and figures.model == "llama"
    # what the engine showed at its last read (the queue grows: arrivals are 150% of what it can finish)
    assert figures.queued_requests == round(engine.state.queued) > 0
    assert figures.running_requests == round(engine.state.running)
    assert figures.kv_cache_utilization == pytest.approx(engine.state.kv_usage, abs=1e-6)
    assert figures.time_to_first_token_seconds is not None and figures.time_to_first_token_seconds.p90 is not None
    assert figures.inter_token_latency_seconds is not None and figures.inter_token_latency_seconds.p50 is not None
    assert figures.generated_tokens_per_second is not None and figures.generated_tokens_per_second > 0
    assert figures.window_seconds == 19.0
    assert inference.requests_total is not None and inference.requests_total > 0


async def test_an_engine_that_has_not_answered_yet_is_warming_and_one_that_stops_is_unreachable(
    serve: Callable[[Handler], Awaitable[int]],
) -> None:
    up = [False]

    async def metrics(_: web.Request) -> web.Response:
        if not up[0]:
            raise web.HTTPServiceUnavailable()
        return web.Response(text='vllm:num_requests_waiting{model_name="m",engine="0"} 2.0\n')

    port = await serve(metrics)
    pods = [engine_pod(port)]
    reader = EngineReader(lambda: pods, interval=1.0, timeout=TIMEOUT)
    async with BoundedFetcher(timeout=TIMEOUT, max_bytes=MAX_BYTES) as fetcher:
        assert (await reader.cycle(fetcher)).pods[("ml", "llm-0")].figures.state == "warming"
        up[0] = True
        ready = (await reader.cycle(fetcher)).pods[("ml", "llm-0")].figures
        assert ready.state == "ready" and ready.queued_requests == 2.0
        up[0] = False
        gone = (await reader.cycle(fetcher)).pods[("ml", "llm-0")].figures
    assert gone.state == "unreachable" and gone.queued_requests is None and "503" in (gone.reason or "")


async def test_a_pod_that_is_not_ready_is_warming_and_not_read(serve: Callable[[Handler], Awaitable[int]]) -> None:
    asked = []

    async def metrics(request: web.Request) -> web.Response:
        asked.append(request)
        return web.Response(text="vllm:num_requests_waiting 1\n")

    port = await serve(metrics)
    pod = Pod("ml", "llm-0", uid="u1", pod_ip="127.0.0.1", ready=False,
              annotations={"gpu-pulse.dev/engine-port": str(port)})  # fmt: skip
    result = await read([pod])
    assert result["llm-0"].figures.state == "warming" and not asked


async def endless(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    line = b'vllm:num_requests_waiting{engine="0"} 1\n' * 1000
    while True:
        await response.write(line)


async def dripping(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    while True:
        await response.write(b"v")
        await asyncio.sleep(0.05)


async def redirecting(_: web.Request) -> web.Response:
    raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")


GZIP_BOMB = gzip.compress(b"\n" * (64 * 1024 * 1024), compresslevel=9)  # 64 MiB of newlines in ~64 KiB


async def gzip_bombed(_: web.Request) -> web.Response:
    return web.Response(body=GZIP_BOMB, headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"})


# the first ten thousand of the million series, made once: more than the size cap, sent at once
FIRST_SERIES = "".join(f'vllm:num_requests_waiting{{engine="{i}"}} 1\n' for i in range(10_000)).encode()


async def million_series(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    await response.write(FIRST_SERIES)
    for start in range(10_000, 1_000_000, 1000):
        chunk = "".join(f'vllm:num_requests_waiting{{engine="{i}"}} 1\n' for i in range(start, start + 1000))
        await response.write(chunk.encode())
    await response.write_eof()
    return response


@pytest.mark.parametrize(
    ("handler", "says"),
    [
        (endless, "larger than"),
        (dripping, "within"),
        (redirecting, "redirect"),
        (gzip_bombed, "inflates"),
        (million_series, "larger than"),
    ],
)
async def test_hostile_endpoints_are_refused_within_bounded_memory(
    serve: Callable[[Handler], Awaitable[int]], handler: Handler, says: str
) -> None:
    port = await serve(handler)
    tracemalloc.start()
    try:
        result = await read([engine_pod(port)], HOSTILE_TIMEOUT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    figures = result["llm-0"].figures
    assert figures.state == "refused"
    assert says in (figures.reason or ""), figures.reason
    assert figures.queued_requests is None
    # the body is never held beyond its cap (plus what the server side of this test holds meanwhile)
    assert peak < 8 * MAX_BYTES + 4 * 1024 * 1024, peak


async def test_a_million_series_within_the_byte_cap_are_refused_by_the_series_bound(
    serve: Callable[[Handler], Awaitable[int]],
) -> None:
    body = "".join(f'vllm:num_requests_waiting{{e="{i}"}} 1\n' for i in range(6000))

    async def many(_: web.Request) -> web.Response:
        return web.Response(text=body)

    port = await serve(many)
    reader = EngineReader(lambda: [engine_pod(port)], interval=1.0, timeout=TIMEOUT, max_bytes=len(body) + 1)
    async with BoundedFetcher(timeout=TIMEOUT, max_bytes=len(body) + 1) as fetcher:
        readings = await reader.cycle(fetcher)
    figures = readings.pods[("ml", "llm-0")].figures
    assert figures.state == "refused" and "samples" in (figures.reason or "")
    assert readings.stats.failures_total["series"] == 1


async def served(serve: Callable[[Handler], Awaitable[int]], body: str) -> InferenceFigures:
    async def answer(_: web.Request) -> web.Response:
        return web.Response(text=body)

    return (await read([engine_pod(await serve(answer))]))["llm-0"].figures


async def test_nan_inf_and_negative_values_give_no_figure_and_a_reason(
    serve: Callable[[Handler], Awaitable[int]],
) -> None:
    figures = await served(
        serve,
        'vllm:num_requests_waiting{model_name="m",engine="0"} NaN\n'
        'vllm:num_requests_running{model_name="m",engine="0"} -3.0\n'
        'vllm:kv_cache_usage_perc{model_name="m",engine="0"} +Inf\n',
    )
    assert figures.state == "ready"
    assert figures.queued_requests is None and figures.running_requests is None
    assert figures.kv_cache_utilization is None
    reason = figures.reason or ""
    assert "vllm:num_requests_waiting is not a finite number" in reason
    assert "vllm:num_requests_running is not a finite number" in reason


async def test_a_family_of_the_wrong_type_gives_no_figure_and_a_reason(
    serve: Callable[[Handler], Awaitable[int]],
) -> None:
    figures = await served(
        serve,
        "# TYPE vllm:num_requests_waiting histogram\n"
        'vllm:num_requests_waiting{model_name="m",engine="0"} 4.0\n'
        'vllm:num_requests_running{model_name="m",engine="0"} 2.0\n',
    )
    assert figures.state == "ready"
    assert figures.queued_requests is None and figures.running_requests == 2.0
    assert "vllm:num_requests_waiting is a histogram" in (figures.reason or "")


async def test_a_renamed_family_is_unrecognised_not_a_wrong_number(serve: Callable[[Handler], Awaitable[int]]) -> None:
    async def renamed(_: web.Request) -> web.Response:
        return web.Response(text='vllm:scheduler_waiting_requests{model_name="m"} 4.0\n')

    port = await serve(renamed)
    figures = (await read([engine_pod(port)]))["llm-0"].figures
    assert figures.state == "unrecognised" and figures.engine == "vllm"
    assert figures.queued_requests is None and "vllm:num_requests_waiting" in (figures.reason or "")


async def test_an_unknown_engine_is_unrecognised(serve: Callable[[Handler], Awaitable[int]]) -> None:
    async def other(_: web.Request) -> web.Response:
        return web.Response(text="http_requests_total 4.0\n")

    port = await serve(other)
    assert (await read([engine_pod(port)]))["llm-0"].figures.state == "unrecognised"


async def test_annotations_naming_another_host_are_refused_without_a_request() -> None:
    pod = engine_pod(8000, **{"gpu-pulse.dev/engine-path": "http://10.1.2.3:8000/metrics"})
    result, stats = await read_with_stats([pod])
    assert result["llm-0"].figures.state == "refused"
    assert stats.reads_total == 0
    assert stats.failures_total == {"annotation": 1}


async def test_figures_of_a_reader_that_stopped_are_not_served_as_current(
    serve: Callable[[Handler], Awaitable[int]],
) -> None:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text='vllm:num_requests_waiting{model_name="m",engine="0"} 2.0\n')

    port = await serve(metrics)
    wall = [1_800_000_000.0]
    reader = EngineReader(lambda: [engine_pod(port)], interval=1.0, timeout=TIMEOUT, clock=lambda: wall[0])
    async with BoundedFetcher(timeout=TIMEOUT, max_bytes=MAX_BYTES) as fetcher:
        await reader.cycle(fetcher)
    pods, _ = reader.view()
    assert pods[("ml", "llm-0")].figures.queued_requests == 2.0
    wall[0] += 60.0  # no cycle since
    pods, _ = reader.view()
    stale = pods[("ml", "llm-0")].figures
    assert stale.state == "unreachable" and stale.queued_requests is None
    assert "60 s old" in (stale.reason or "")
