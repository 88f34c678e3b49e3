"""Exporters and a Prometheus that misbehave on purpose: endless bodies, redirects, answers of the wrong shape,
numbers out of range or from the future, a node that keeps failing, and a node whose clock is off by a minute."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from adapter.api.selfmetrics import AdapterMetrics
from adapter.metrics_config import default_metrics_config
from adapter.quantity import parse_quantity
from adapter.sources import nodefeed
from adapter.sources.direct import DirectSource
from adapter.sources.exporters import StaticExporters
from adapter.sources.nodeanswer import exporter_clock_offset
from adapter.sources.nodefeeds import MISS, NodeFeeds
from adapter.sources.promanswers import SERIES_PER_BYTE, LargeAnswers
from adapter.sources.prometheus import PrometheusSource
from tests.adapter.simcluster import AdapterFactory, Cluster
from tests.adapter.simnodes import Gpu
from tests.adapter.test_direct_source import PODS, direct, served, timestamp
from tests.support.clocks import ManualClock
from tests.support.waiting import eventually
from toolkit.pods_contract import STREAM_CONTENT_TYPE, NodePods, PodView, encode_node_pods, stream_event

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Upstream:
    """A loopback HTTP server answering every path with `handler`, counting requests."""

    handler: Handler
    requests: int = 0
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: web.AppRunner | None = None
    url: str = ""

    async def start(self) -> Upstream:
        async def count(request: web.Request) -> web.StreamResponse:
            self.requests += 1
            try:
                return await self.handler(request)
            finally:
                self.finished.set()

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", count)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def upstreams() -> AsyncIterator[Callable[[Handler], Awaitable[Upstream]]]:
    started: list[Upstream] = []

    async def start(handler: Handler) -> Upstream:
        upstream = await Upstream(handler).start()
        started.append(upstream)
        return upstream

    yield start
    for upstream in started:
        await upstream.stop()


async def endless_chunks(request: web.Request) -> web.StreamResponse:
    """A body without Content-Length that never ends (until the reader goes away)."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    await response.write(b'{"pods": [')
    chunk = b'"' + b"x" * 65_536 + b'",'
    while True:
        await response.write(chunk)


def outcomes(metrics: AdapterMetrics, source: str) -> dict[str, float | None]:
    return {
        outcome: metrics.registry.get_sample_value(
            "gpu_pulse_adapter_source_duration_seconds_count", {"source": source, "outcome": outcome}
        )
        for outcome in ("ok", "error", "timeout")
    }


# ---- exporters -----------------------------------------------------------------------------------------------------
async def test_an_endless_chunked_document_is_cut_at_the_cap(
    make_adapter: AdapterFactory, cluster: Cluster, upstreams: Callable[[Handler], Awaitable[Upstream]]
) -> None:
    hostile = await upstreams(endless_chunks)
    metrics = AdapterMetrics("direct")
    locator = StaticExporters({"gpu-1": cluster.nodes["gpu-1"].url, "gpu-2": hostile.url})
    cache = NodeFeeds(timeout=30.0, max_document_bytes=256 * 1024, observe=metrics.observe_source_call)
    client = await make_adapter(source=DirectSource(locator, cache), metrics=metrics)
    assert set(await served(client)) == {"infer-a", "train-0"}  # gpu-2's pods left out, gpu-1's served
    # refused as too large as soon as the cap was passed, not read on until the (30 s) timeout
    assert outcomes(metrics, "direct") == {"ok": 1.0, "error": 1.0, "timeout": None}
    await asyncio.wait_for(hostile.finished.wait(), 10)  # the adapter hung up on it


async def test_an_endless_stream_line_is_cut_at_the_cap(
    make_adapter: AdapterFactory, cluster: Cluster, upstreams: Callable[[Handler], Awaitable[Upstream]]
) -> None:
    async def endless_line(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": STREAM_CONTENT_TYPE})
        await response.prepare(request)
        while True:
            await response.write(b"x" * 65_536)  # one line that never ends

    hostile = await upstreams(endless_line)
    metrics = AdapterMetrics("direct")
    locator = StaticExporters({"gpu-1": cluster.nodes["gpu-1"].url, "gpu-2": hostile.url})
    cache = NodeFeeds(timeout=30.0, max_document_bytes=256 * 1024, observe=metrics.observe_source_call)
    client = await make_adapter(source=DirectSource(locator, cache), metrics=metrics)
    assert set(await served(client)) == {"infer-a", "train-0"}
    assert outcomes(metrics, "direct") == {"ok": 1.0, "error": 1.0, "timeout": None}
    await asyncio.wait_for(hostile.finished.wait(), 10)  # the adapter hung up on it


async def test_a_stalled_or_garbled_stream_drops_its_node_until_it_streams_again(
    cluster: Cluster, upstreams: Callable[[Handler], Awaitable[Upstream]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nodefeed, "STALL_SECONDS", 0.3)
    good = encode_node_pods(cluster.nodes["gpu-2"].document(None))
    behaviour = {"next": "stall"}

    async def moody(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": STREAM_CONTENT_TYPE})
        await response.prepare(request)
        await response.write(stream_event(time.time(), good))
        if behaviour["next"] == "garble":
            await response.write(b'{"answered_at": 1, "document": {"node": "gpu-2"}}\n')
        while True:
            await asyncio.sleep(0.02 if behaviour["next"] == "stream" else 3600)
            await response.write(stream_event(time.time(), good))

    hostile = await upstreams(moody)
    cache = NodeFeeds(failure_ttl=0.05, max_failure_ttl=0.05)
    await cache.start()
    try:
        assert await cache.answer("gpu-2", hostile.url, None) is not None
        await eventually(lambda: cache.cached("gpu-2", hostile.url, None) is None, "a stalled stream drops the node")
        behaviour["next"] = "garble"
        await eventually(lambda: hostile.requests >= 3, "asked again after the stall")
        await eventually(lambda: cache.cached("gpu-2", hostile.url, None) is None, "a garbled line drops the node")
        behaviour["next"] = "stream"
        await eventually(lambda: cache.cached("gpu-2", hostile.url, None) is not None, "back once it streams")
    finally:
        await cache.close()


async def test_redirects_from_an_exporter_are_not_followed(
    make_adapter: AdapterFactory, cluster: Cluster, upstreams: Callable[[Handler], Awaitable[Upstream]]
) -> None:
    elsewhere_body = encode_node_pods(cluster.nodes["gpu-2"].document(None)).decode()

    async def elsewhere_handler(request: web.Request) -> web.Response:
        return web.Response(text=elsewhere_body, content_type="application/json")

    elsewhere = await upstreams(elsewhere_handler)

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(f"{elsewhere.url}/pods")

    hostile = await upstreams(redirect)
    locator = StaticExporters({"gpu-1": cluster.nodes["gpu-1"].url, "gpu-2": hostile.url})
    client = await make_adapter(locator=locator)
    assert set(await served(client)) == {"infer-a", "train-0"}
    assert hostile.requests == 1
    assert elsewhere.requests == 0


async def test_a_failing_node_is_asked_again_less_and_less_often(
    cluster: Cluster, upstreams: Callable[[Handler], Awaitable[Upstream]]
) -> None:
    async def failing(request: web.Request) -> web.Response:
        return web.Response(status=500, text="broken\n")

    hostile = await upstreams(failing)
    cache = NodeFeeds(failure_ttl=0.1, max_failure_ttl=3.0)
    await cache.start()
    try:
        assert await cache.answer("gpu-2", hostile.url, None) is None
        for _ in range(16):  # 1.6 s of queries, some every 0.1 s
            assert cache.cached("gpu-2", hostile.url, None) is None  # answered at once: the node does not answer
            await asyncio.sleep(0.1)
        # asked at 0, then 0.1, 0.2, 0.4, 0.8 s after each failure: at 0, 0.1, 0.3, 0.7, 1.5 s; never every 0.1 s
        assert 3 <= hostile.requests <= 6, hostile.requests
    finally:
        await cache.close()


@pytest.mark.parametrize("skew", [-60.0, 60.0])
async def test_a_node_whose_clock_is_a_minute_off_is_served_by_its_own_ages(
    make_adapter: AdapterFactory, cluster: Cluster, skew: float
) -> None:
    clock = ManualClock(time.time())
    skewed, right = cluster.nodes["gpu-1"], cluster.nodes["gpu-2"]
    skewed.clock = lambda: clock.now + skew
    right.clock = clock.time
    client = await make_adapter(source=direct(cluster, clock, max_age=3.0))
    items = await served(client)
    assert set(items) == {"infer-a", "train-0", "infer-b"}
    for item in items.values():  # served times are on the adapter's clock: sample time = now - lag (0.5 s)
        assert clock.now - 2.0 <= timestamp(item) <= clock.now
    skewed.freeze()  # its figures stop advancing: on its own clock they age, whatever that clock says
    clock.advance(2.0)
    await cluster.next_documents()
    assert {"infer-a", "train-0"} <= set(await served(client))
    clock.advance(2.0)
    await cluster.next_documents()
    assert set(await served(client)) == {"infer-b"}


# ---- prometheus ----------------------------------------------------------------------------------------------------
def prometheus_answer(result: object, result_type: object = "vector") -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": result_type, "result": result}}


def answering(body: Callable[[str], object]) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(body(request.query.get("query", ""))), content_type="application/json")

    return handler


async def prometheus_client(make_adapter: AdapterFactory, url: str, **options: Any) -> Any:
    metrics = AdapterMetrics("prometheus")
    source = PrometheusSource(url, observe=metrics.observe_source_call, **options)
    return await make_adapter(source=source, config=default_metrics_config(), metrics=metrics)


@pytest.mark.parametrize(
    "body",
    [
        {"status": "success", "data": []},
        {"status": "success", "data": {"resultType": "vector", "result": {"a": 1}}},
        prometheus_answer([{"metric": [], "value": [1, "1"]}]),
        prometheus_answer([{"metric": {"namespace": "ml", "pod": "infer-a"}, "value": 5}]),
        prometheus_answer([{"metric": {"namespace": "ml", "pod": "infer-a"}, "value": {"a": 1}}]),
        prometheus_answer([{"metric": {"namespace": 7, "pod": "infer-a"}, "value": [1, "1"]}]),
        prometheus_answer([{"metric": {"namespace": "ml", "pod": "infer-a"}, "value": [1, 1]}]),
        prometheus_answer(["not a series"]),
        prometheus_answer([], result_type=["vector"]),
        {"status": "error", "errorType": {"x": 1}, "error": []},
        "[" * 50_000 + "]" * 50_000,
        [1, 2, 3],
    ],
    ids=[
        "data-a-list",
        "result-a-dict",
        "metric-a-list",
        "value-an-int",
        "value-a-dict",
        "namespace-an-int",
        "value-text-an-int",
        "series-a-string",
        "resultType-a-list",
        "error-fields-not-strings",
        "deep-nesting",
        "not-an-object",
    ],
)
async def test_a_prometheus_answer_of_the_wrong_shape_is_source_unavailable(
    make_adapter: AdapterFactory, upstreams: Callable[[Handler], Awaitable[Upstream]], body: object
) -> None:
    if isinstance(body, str):  # raw text, not JSON-encoded again
        text = body

        async def raw(request: web.Request) -> web.Response:
            return web.Response(text=text, content_type="application/json")

        prometheus = await upstreams(raw)
    else:
        prometheus = await upstreams(answering(lambda _: body))
    client = await prometheus_client(make_adapter, prometheus.url)
    response = await client.get(PODS)
    status = await response.json()
    assert response.status == 503, status
    assert status["kind"] == "Status" and "source is unavailable" in status["message"]


async def test_an_endless_prometheus_answer_is_cut_at_the_cap(
    make_adapter: AdapterFactory, upstreams: Callable[[Handler], Awaitable[Upstream]]
) -> None:
    prometheus = await upstreams(endless_chunks)
    client = await prometheus_client(make_adapter, prometheus.url, timeout=30.0, max_response_bytes=256 * 1024)
    response = await client.get(PODS)
    assert response.status == 503
    assert "larger than 262144 bytes" in (await response.json())["message"]


async def test_prometheus_redirects_are_not_followed(
    make_adapter: AdapterFactory, upstreams: Callable[[Handler], Awaitable[Upstream]]
) -> None:
    elsewhere = await upstreams(answering(lambda _: prometheus_answer([])))

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"{elsewhere.url}/api/v1/query?{request.query_string}")

    prometheus = await upstreams(redirect)
    client = await prometheus_client(make_adapter, prometheus.url)
    response = await client.get(PODS)
    assert response.status == 503
    assert elsewhere.requests == 0


async def test_numbers_from_prometheus_are_checked(
    make_adapter: AdapterFactory, upstreams: Callable[[Handler], Awaitable[Upstream]]
) -> None:
    """Out-of-range values and sample times in the future never reach an HPA; sound figures next to them do."""
    now = ManualClock(time.time()).now
    values = {"infer-a": "1e300", "infer-b": "42.5", "train-0": "-1e300"}
    times = {"infer-a": now - 1, "infer-b": now - 1, "train-0": now - 1}

    def body(query: str) -> object:
        if "timestamp(" in query:
            figures = {pod: str(at) for pod, at in times.items()}
        else:
            figures = values
        return prometheus_answer(
            [{"metric": {"namespace": "ml", "pod": pod}, "value": [now, text]} for pod, text in figures.items()]
        )

    prometheus = await upstreams(answering(body))
    client = await prometheus_client(make_adapter, prometheus.url)
    items = await served(client)
    assert set(items) == {"infer-b"}
    assert parse_quantity(items["infer-b"]["value"]) == Decimal("42.5")
    times["infer-b"] = 9_999_999_999
    assert await served(client) == {}


@given(
    skew=st.floats(min_value=-86_400, max_value=86_400),
    age=st.floats(min_value=0, max_value=3_600),
    document_age=st.floats(min_value=0, max_value=10),
    said=st.sampled_from(["answered-at", "nothing"]),
)
def test_ages_are_the_exporters_own_whatever_its_clock(skew: float, age: float, document_age: float, said: str) -> None:
    """A figure `age` seconds old on the exporter's clock is placed `age` seconds before the answer arrived."""
    received = 1_800_000_000.0  # adapter's clock
    exporter_now = received + skew
    generated = exporter_now - document_age
    sampled = generated - age
    document = NodePods(
        node="n",
        generated_at=datetime.fromtimestamp(generated, UTC),
        interval_seconds=1.0,
        pods=(
            PodView(
                namespace="ml",
                name="p",
                containers=(),
                sampled_at=datetime.fromtimestamp(sampled, UTC),
                window_seconds=1,
            ),
        ),
    )
    offset = exporter_clock_offset(document, exporter_now if said == "answered-at" else None, received)
    placed = document.pods[0].sampled_at.timestamp() + offset
    if said == "answered-at":
        assert placed == pytest.approx(received - (age + document_age), abs=1e-3)
    else:  # taken as answering at once: the document's own age is not known
        assert placed == pytest.approx(received - age, abs=1e-3)


async def test_a_backlog_of_stream_lines_is_skipped_to_the_newest(
    cluster: Cluster, upstreams: Callable[[Handler], Awaitable[Upstream]]
) -> None:
    node = cluster.nodes["gpu-2"]

    def line(utilization: float) -> bytes:
        node.set_pod("other", "solo", [Gpu(utilization=utilization)])
        return stream_event(time.time(), encode_node_pods(node.document(None)))

    async def behind(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": STREAM_CONTENT_TYPE})
        await response.prepare(request)
        await response.write(line(10.0) + line(20.0) + line(30.0))  # three documents arrive at once
        await asyncio.sleep(3600)
        return response

    hostile = await upstreams(behind)
    cache = NodeFeeds()
    await cache.start()
    try:
        answer = await cache.answer("gpu-2", hostile.url, None)
        assert answer is not None
        metric = default_metrics_config().custom("gpu_utilization")
        assert metric is not None
        assert answer.values(metric)["other"]["solo"].value.value == Decimal(30)  # the newest
        assert cache.documents == 1  # the two older ones were not even parsed
    finally:
        await cache.close()


async def test_a_node_that_answered_too_late_many_times_is_followed_once_it_answers(
    cluster: Cluster, upstreams: Callable[[Handler], Awaitable[Upstream]]
) -> None:
    good = encode_node_pods(cluster.nodes["gpu-2"].document(None))
    late = {"requests": 8}

    async def slow_then_fine(request: web.Request) -> web.StreamResponse:
        if late["requests"] > 0:
            late["requests"] -= 1
            await asyncio.sleep(3600)  # never answers: the adapter gives up on it
        response = web.StreamResponse(headers={"Content-Type": STREAM_CONTENT_TYPE})
        await response.prepare(request)
        while True:
            await response.write(stream_event(time.time(), good))
            await asyncio.sleep(0.05)

    hostile = await upstreams(slow_then_fine)
    cache = NodeFeeds(timeout=0.1, failure_ttl=0.02, max_failure_ttl=0.05)
    await cache.start()
    try:
        assert await cache.answer("gpu-2", hostile.url, None) is None
        # every timed-out attempt must give its connection back: more than four of them must not block the node
        await eventually(lambda: cache.cached("gpu-2", hostile.url, None) not in (None, MISS), "followed at last")
        assert hostile.requests > 8
    finally:
        await cache.close()


# ---- prometheus answers that cost memory (issue 21, items 4 and 9) ---------------------------------------------------
def minimal_series(count: int) -> bytes:
    """`count` series of 30-odd bytes each: sound in shape, far more than any real answer of that size holds."""
    one = b'{"metric":{},"value":[1,"1"]}'
    return b'{"status":"success","data":{"resultType":"vector","result":[' + b",".join([one] * count) + b"]}}"


def raw_answer(body: bytes) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    return handler


async def test_an_answer_of_empty_lists_is_refused_before_it_is_built(
    make_adapter: AdapterFactory, upstreams: Callable[[Handler], Awaitable[Upstream]]
) -> None:
    """15 MiB of `"result":[[],[],...]` was decoded into 5 million lists (885 MiB for one query): the first `[]` where
    a series belongs ends the decoding now."""
    body = b'{"status":"success","data":{"resultType":"vector","result":[' + b",".join([b"[]"] * 5_000_000) + b"]}}"
    prometheus = await upstreams(raw_answer(body))
    client = await prometheus_client(make_adapter, prometheus.url, timeout=30.0)
    response = await client.get(PODS)
    status = await response.json()
    assert response.status == 503 and "malformed vector" in status["message"], status


async def test_an_answer_with_more_series_than_its_size_allows_is_refused(
    make_adapter: AdapterFactory, upstreams: Callable[[Handler], Awaitable[Upstream]]
) -> None:
    """Sound series, but more than one per 160 bytes of the cap (a real series is 250 bytes or more): the decoder
    stops at the bound instead of building them all (520,000 series peaked at 575 MiB)."""
    cap = 256 * 1024
    limit = max(1000, int(cap * SERIES_PER_BYTE))
    prometheus = await upstreams(raw_answer(minimal_series(limit + 1)))
    client = await prometheus_client(make_adapter, prometheus.url, max_response_bytes=cap)
    response = await client.get(PODS)
    status = await response.json()
    assert response.status == 503 and f"more than {limit} series" in status["message"], status


async def test_large_answers_are_read_and_decoded_two_at_a_time() -> None:
    answers = LargeAnswers(at_once=2, threshold=1000)
    async with answers.admission() as first, answers.admission() as second, answers.admission() as third:
        await first.grown(500)
        assert not first.large, "below the threshold: no slot taken"
        await first.grown(2000)
        await second.grown(2000)
        waiting = asyncio.create_task(third.grown(2000))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not waiting.done(), "a third large answer waits for a slot"
        answers.slots.release()  # as `first` would on leaving
        first.large = False
        await asyncio.wait_for(waiting, 5)
        assert third.large
    assert not answers.slots.locked()


async def test_a_pod_whose_series_repeat_a_label_set_is_left_out(
    make_adapter: AdapterFactory, upstreams: Callable[[Handler], Awaitable[Upstream]]
) -> None:
    """A vector never holds one label set twice (Prometheus' engine refuses to build one); two such series for a pod
    were averaged into a figure nobody measured. The pod is left out, the others are served."""
    now = time.time()
    series = [
        ({"namespace": "ml", "pod": "infer-a", "gpu": "0"}, "10"),
        ({"namespace": "ml", "pod": "infer-a", "gpu": "0"}, "90"),
        ({"namespace": "ml", "pod": "infer-b", "gpu": "0"}, "42"),
        ({"namespace": "ml", "pod": "infer-b", "gpu": "1"}, "44"),  # two devices of one pod: a mean, as ever
    ]

    def body(query: str) -> object:
        if "timestamp(" in query:
            return prometheus_answer([{"metric": labels, "value": [now, str(now - 1)]} for labels, _ in series])
        return prometheus_answer([{"metric": labels, "value": [now, value]} for labels, value in series])

    prometheus = await upstreams(answering(body))
    client = await prometheus_client(make_adapter, prometheus.url)
    items = await served(client)
    assert set(items) == {"infer-b"}
    assert parse_quantity(items["infer-b"]["value"]) == Decimal("43")
