"""Demand at zero replicas (adapter/demand/): a gateway's waiting requests read directly, served as an External metric
and as KEDA activation, against the simulated EPP (simulation/gateway.py) and hostile endpoints."""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from decimal import Decimal
from typing import Any

import grpc
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from adapter.api.selfmetrics import AdapterMetrics
from adapter.application import build_app
from adapter.demand.config import GIE_QUEUE, LLM_D_QUEUE, DemandDefinition
from adapter.demand.reader import BAD_VALUE, REFUSED, WRONG_TYPE, DemandReader, DemandReadError, demand_in
from adapter.demand.signals import DemandCollector, DemandSignals, build_reader
from adapter.keda.activity import Hysteresis
from adapter.keda.followed_workloads import ActivityBoard
from adapter.keda.selfmetrics import KedaMetrics
from adapter.keda.servicer import ExternalScaler
from adapter.keda.serving import ExternalScalerServer
from adapter.keda.workload import WorkloadReader
from adapter.metrics_config import MetricsConfigError, default_metrics_config, parse_metrics_config
from adapter.quantity import parse_quantity
from adapter.selectors import EVERYTHING, parse_selector
from simulation.gateway import SimulatedGateway
from tests.adapter.simcluster import Cluster
from tests.support import keda
from tests.support.waiting import eventually, patience
from toolkit.boundedfetch import REDIRECT, TIMEOUT, TOO_LARGE
from toolkit.settings import ListenAddress

EXT = "/apis/external.metrics.k8s.io/v1beta1"
POOL = "llm-inference"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def definition(url: str, **extra: Any) -> DemandDefinition:
    fields: dict[str, Any] = {
        "name": "inference_pending_requests",
        "namespace": "demo",
        "url": url,
        "preset": "gateway-api-inference-extension",
    }
    return DemandDefinition.model_validate(fields | extra)


async def serve(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    sock = socket.create_server(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}/metrics"


@pytest.fixture
async def gateway() -> AsyncIterator[SimulatedGateway]:
    simulated = SimulatedGateway({POOL: MODEL}, ttl=120)
    await simulated.start()
    yield simulated
    await simulated.stop()


async def started(reader: DemandReader) -> DemandReader:
    await reader.start()
    return reader


# ---- the configuration -------------------------------------------------------------------------------------------


def test_a_demand_entry_needs_a_metric_and_a_namespace() -> None:
    base = "demand:\n  - name: inference_pending_requests\n    url: http://epp:9090/metrics\n"
    with pytest.raises(MetricsConfigError, match="namespace"):
        parse_metrics_config(base + "    preset: llm-d\n")
    with pytest.raises(MetricsConfigError, match="say which metric"):
        parse_metrics_config(base + "    namespace: demo\n")
    with pytest.raises(MetricsConfigError, match="http"):
        parse_metrics_config(base.replace("http://", "file://") + "    namespace: demo\n    preset: llm-d\n")
    clash = "external:\n  - {name: inference_pending_requests, figure: queued_requests, combine: sum}\n"
    with pytest.raises(MetricsConfigError, match="also an external metric"):
        parse_metrics_config(clash + base + "    namespace: demo\n    preset: llm-d\n")
    config = parse_metrics_config(base + "    namespace: demo\n    preset: llm-d\n")
    assert config.demand[0].metric_names == (LLM_D_QUEUE, GIE_QUEUE)


# ---- reading an exposition ---------------------------------------------------------------------------------------

_label_values = st.from_regex(r"[a-j]([a-j-]{0,6}[a-j])?", fullmatch=True)


@given(st.dictionaries(st.tuples(_label_values, _label_values), st.integers(0, 10_000), max_size=8), _label_values)
def test_the_waiting_requests_are_the_series_the_selector_picks_as_client_python_renders_them(
    queues: dict[tuple[str, str], int], wanted_pool: str
) -> None:
    """Referee: prometheus_client renders the gauge (as client_golang prints the EPP's); the sum over the picked pool
    is what the series say."""
    registry = CollectorRegistry()
    gauge = Gauge(GIE_QUEUE, "queue", ["fairness_id", "inference_pool"], registry=registry)
    for (flow, pool), value in queues.items():
        gauge.labels(flow, pool).set(value)
    reading = demand_in(generate_latest(registry).decode(), definition("http://x/metrics"), 0.0)
    selector = parse_selector(f"inference_pool={wanted_pool}")
    picked = sum(s.value for s in reading.series if selector.matches(s.labels))
    assert picked == sum(v for (_, pool), v in queues.items() if pool == wanted_pool)
    assert reading.family == GIE_QUEUE, "client_python declares the family even before its first child"


def test_the_first_name_served_is_read_never_both() -> None:
    """llm-d's EPP serves its new name and the deprecated one, mirroring each other (the preset's citation)."""
    body = f'{GIE_QUEUE}{{inference_pool="p"}} 3\n{LLM_D_QUEUE}{{inference_pool="p"}} 3\n'
    reading = demand_in(body, definition("http://x/metrics", preset="llm-d"), 0.0)
    assert reading.family == LLM_D_QUEUE and [s.value for s in reading.series] == [3.0]
    reading = demand_in(f'{GIE_QUEUE}{{inference_pool="p"}} 2\n', definition("http://x/metrics", preset="llm-d"), 0.0)
    assert reading.family == GIE_QUEUE


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (f'# TYPE {GIE_QUEUE} histogram\n{GIE_QUEUE}_bucket{{le="+Inf"}} 1\n', WRONG_TYPE),
        (f"# TYPE {GIE_QUEUE} counter\n{GIE_QUEUE} 1\n", WRONG_TYPE),
        (f"{GIE_QUEUE} NaN\n", BAD_VALUE),
        (f"{GIE_QUEUE} +Inf\n", BAD_VALUE),
        (f"{GIE_QUEUE} -2\n", BAD_VALUE),
    ],
)
def test_a_value_that_is_no_count_of_waiting_requests_fails_the_read(body: str, kind: str) -> None:
    with pytest.raises(DemandReadError) as failure:
        demand_in(body, definition("http://x/metrics"), 0.0)
    assert failure.value.kind == kind


def test_a_flood_of_series_is_refused_not_summed() -> None:
    """An endpoint serving the metric for ten thousand label sets (a million would only take longer to refuse)."""
    body = "".join(f'{GIE_QUEUE}{{fairness_id="f{i}"}} 1\n' for i in range(10_000))
    with pytest.raises(DemandReadError) as failure:
        demand_in(body, definition("http://x/metrics"), 0.0)
    assert failure.value.kind == REFUSED


def test_matchers_keep_only_their_series_and_labels_are_added_for_selectors() -> None:
    body = f'{GIE_QUEUE}{{inference_pool="a"}} 4\n{GIE_QUEUE}{{inference_pool="b"}} 5\n'
    spec = definition("http://x/metrics", matchers={"inference_pool": "b"}, labels={"service": "llm"})
    [series] = demand_in(body, spec, 0.0).series
    assert series.value == 5 and series.labels == {"inference_pool": "b", "service": "llm"}


# ---- hostile endpoints -------------------------------------------------------------------------------------------


async def endless(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    while True:
        await response.write(b"# more\n")
        await asyncio.sleep(0.01)


async def huge(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    for _ in range(200):
        await response.write(b"x" * 65536)
    return response


async def redirect(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("http://169.254.169.254/latest/meta-data")


async def gzip_bomb(request: web.Request) -> web.StreamResponse:
    return web.Response(body=gzip.compress(b"0" * 20_000_000), headers={"Content-Encoding": "gzip"})


@pytest.mark.parametrize(
    ("handler", "kind"), [(endless, TIMEOUT), (huge, TOO_LARGE), (redirect, REDIRECT), (gzip_bomb, TOO_LARGE)]
)
async def test_hostile_endpoints_give_no_value_and_a_reason(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]], kind: str
) -> None:
    runner, url = await serve(handler)
    spec = definition(url, timeout_seconds=0.5, max_bytes=1024 * 1024)
    signals = DemandSignals([build_reader(spec)])
    await signals.start()
    try:
        with pytest.raises(Exception, match=kind) as failure:
            await signals.value("demo", spec.name, EVERYTHING)
        assert type(failure.value).__name__ == "DemandUnavailableError"
        registry = CollectorRegistry()
        registry.register(DemandCollector(signals))
        labels = {"demand": spec.name, "namespace": "demo", "url": url}
        assert registry.get_sample_value("gpu_pulse_adapter_demand_read_failures_total", labels | {"kind": kind}) == 1
        assert registry.get_sample_value("gpu_pulse_adapter_demand_up", labels) == 0
    finally:
        await signals.close()
        await runner.cleanup()


async def test_a_failing_endpoint_never_serves_the_reading_before(gateway: SimulatedGateway) -> None:
    token = {"ok": True}

    async def flaky(request: web.Request) -> web.StreamResponse:
        if not token["ok"]:
            return web.Response(status=500)
        return web.Response(text=f'{GIE_QUEUE}{{inference_pool="{POOL}"}} 7\n')

    runner, url = await serve(flaky)
    reader = await started(build_reader(definition(url, refresh_seconds=0.1)))
    try:
        assert (await reader.reading()).series[0].value == 7
        token["ok"] = False
        await asyncio.sleep(0.15)  # past refresh_seconds: the next ask reads again
        with pytest.raises(DemandReadError, match="HTTP 500"):
            await reader.reading()
    finally:
        await reader.close()
        await runner.cleanup()


async def test_askers_share_one_read_per_refresh() -> None:
    hits = []

    async def counted(request: web.Request) -> web.StreamResponse:
        hits.append(1)
        await asyncio.sleep(0.05)
        return web.Response(text=f"{GIE_QUEUE} 1\n")

    runner, url = await serve(counted)
    reader = await started(build_reader(definition(url, refresh_seconds=60)))
    try:
        readings = await asyncio.gather(*(reader.reading() for _ in range(50)))
        assert {r.read_at for r in readings} == {readings[0].read_at} and len(hits) == 1
        await reader.reading()
        assert len(hits) == 1, "within refresh_seconds every asker has the same reading"
    finally:
        await reader.close()
        await runner.cleanup()


# ---- the External metric -----------------------------------------------------------------------------------------


@pytest.fixture
async def demand_adapter(
    cluster: Cluster,
    gateway: SimulatedGateway,
    aiohttp_client: Callable[..., Awaitable[TestClient]],  # type: ignore[type-arg]
) -> TestClient:  # type: ignore[type-arg]
    from adapter.sources.direct import DirectSource
    from adapter.sources.nodefeeds import NodeFeeds

    spec = definition(f"{gateway.url}/metrics", labels={"service": POOL}, refresh_seconds=0.1)
    signals = DemandSignals([build_reader(spec)])
    config = default_metrics_config().model_copy(update={"demand": (spec,)})
    source = DirectSource(cluster.locator(), NodeFeeds(timeout=1.0))
    app = build_app(config=config, pods=cluster.pods, source=source, metrics=AdapterMetrics("direct"), demand=signals)
    return await aiohttp_client(app)


async def value_of(client: Any, selector: str, namespace: str = "demo") -> Decimal:
    response = await client.get(f"{EXT}/namespaces/{namespace}/inference_pending_requests?labelSelector={selector}")
    body = await response.json()
    assert response.status == 200, body
    [item] = body["items"]
    return parse_quantity(item["value"])


async def test_the_external_metric_counts_requests_held_for_a_pool_with_no_pod(
    demand_adapter: Any, gateway: SimulatedGateway
) -> None:
    assert await value_of(demand_adapter, f"inference_pool%3D{POOL}") == 0, "nothing served yet: nothing waits"
    held = [asyncio.ensure_future(gateway.hold(POOL)) for _ in range(3)]
    await eventually(lambda: gateway.waiting(POOL) == 3, "three requests held")
    await asyncio.sleep(0.15)  # past refresh_seconds
    assert await value_of(demand_adapter, f"inference_pool%3D{POOL}") == 3
    assert await value_of(demand_adapter, f"service%3D{POOL}") == 3, "the entry's own labels select too"
    assert await value_of(demand_adapter, "inference_pool%3Dother") == 0
    elsewhere = await demand_adapter.get(f"{EXT}/namespaces/elsewhere/inference_pending_requests")
    assert elsewhere.status == 404, "no gateway is read for that namespace: no figure, not 0"
    discovery = await (await demand_adapter.get(EXT)).json()
    assert "inference_pending_requests" in {r["name"] for r in discovery["resources"]}
    gateway.set_ready_endpoints(POOL, 1)
    assert await asyncio.gather(*held) == [True, True, True]


async def test_a_gateway_that_fails_is_a_503_with_the_reason(
    cluster: Cluster,
    aiohttp_client: Callable[..., Awaitable[TestClient]],  # type: ignore[type-arg]
) -> None:
    from adapter.sources.direct import DirectSource
    from adapter.sources.nodefeeds import NodeFeeds

    gateway = SimulatedGateway({POOL: MODEL}, token="secret")  # the EPP's /metrics asks for a token
    await gateway.start()
    try:
        spec = definition(f"{gateway.url}/metrics")
        config = default_metrics_config().model_copy(update={"demand": (spec,)})
        app = build_app(
            config=config,
            pods=cluster.pods,
            source=DirectSource(cluster.locator(), NodeFeeds(timeout=1.0)),
            metrics=AdapterMetrics("direct"),
            demand=DemandSignals([build_reader(spec)]),
        )
        client = await aiohttp_client(app)
        response = await client.get(f"{EXT}/namespaces/demo/inference_pending_requests")
        body = await response.json()
        assert response.status == 503 and "HTTP 401" in body["message"], body
    finally:
        await gateway.stop()


# ---- KEDA --------------------------------------------------------------------------------------------------------

TRIGGER = {"metric": "inference_pending_requests", "selector": f"inference_pool={POOL}", "target": "4"}


@pytest.fixture
async def demand_scaler(cluster: Cluster, gateway: SimulatedGateway) -> AsyncIterator[keda.ScalerClient]:
    from adapter.sources.direct import DirectSource
    from adapter.sources.nodefeeds import NodeFeeds

    spec = definition(f"{gateway.url}/metrics")
    signals = DemandSignals([build_reader(spec)])
    await signals.start()
    config = default_metrics_config().model_copy(update={"demand": (spec,)})
    source = DirectSource(cluster.locator(), NodeFeeds(timeout=1.0))
    await source.start()
    registry = CollectorRegistry()
    reader = WorkloadReader(config, cluster.pods, source, signals)
    board = ActivityBoard(reader, Hysteresis(0, 60), interval=2.0)  # the adapter's default --keda-activity-interval
    servicer = ExternalScaler(reader, board, KedaMetrics(registry), registry=registry)
    server = ExternalScalerServer(servicer, ListenAddress("127.0.0.1", 0))
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield keda.ScalerClient.on(channel)
    await channel.close()
    await server.stop(grace=0.5)
    await source.close()
    await signals.close()


async def test_keda_wakes_a_pool_at_zero_within_a_second_of_one_request_waiting(
    demand_scaler: keda.ScalerClient, gateway: SimulatedGateway
) -> None:
    ref = keda.scaled_object("demo", TRIGGER)
    assert (await demand_scaler.is_active(ref)).result is False, "at zero with nothing waiting"
    stream = demand_scaler.stream_is_active(ref)
    assert (await stream.read()).result is False
    held = asyncio.ensure_future(gateway.hold(POOL))
    loop = asyncio.get_running_loop()
    queued_at = loop.time()
    pushed = await asyncio.wait_for(stream.read(), patience(1.0))
    assert pushed.result is True and loop.time() - queued_at <= patience(1.0)
    assert (await demand_scaler.is_active(ref)).result is True
    metrics = await demand_scaler.get_metrics(keda.metrics_request("demo", TRIGGER, "inference_pending_requests"))
    assert [v.metricValueFloat for v in metrics.metricValues] == [1.0]
    spec = await demand_scaler.get_metric_spec(ref)
    assert [(s.metricName, s.targetSizeFloat) for s in spec.metricSpecs] == [("inference_pending_requests", 4.0)]
    stream.cancel()
    gateway.set_ready_endpoints(POOL, 1)
    assert await held is True


async def test_a_demand_trigger_on_an_unknown_demand_is_not_found(demand_scaler: keda.ScalerClient) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await demand_scaler.is_active(keda.scaled_object("demo", TRIGGER | {"metric": "gpu_utilization"}))
    assert failure.value.code() is grpc.StatusCode.NOT_FOUND and "no demand" in failure.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as elsewhere:
        await demand_scaler.is_active(keda.scaled_object("elsewhere", TRIGGER))
    assert elsewhere.value.code() is grpc.StatusCode.NOT_FOUND and "namespace elsewhere" in elsewhere.value.details()


async def test_the_simulated_gateway_prints_the_epps_gauge(gateway: SimulatedGateway) -> None:
    """As client_golang prints flowControlQueueSize (gateway-api-inference-extension release-1.3
    pkg/epp/metrics/metrics.go): nothing before the first request; then a gauge with the upstream label names, whose
    child stays at 0 once its requests are gone. Referee: prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    assert gateway.exposition() == ""
    held = asyncio.ensure_future(gateway.hold(POOL))
    await eventually(lambda: gateway.waiting(POOL) == 1, "one request held")
    [family] = text_string_to_metric_families(gateway.exposition())
    assert (family.name, family.type) == (GIE_QUEUE, "gauge")
    [sample] = family.samples
    assert set(sample.labels) == {"fairness_id", "priority", "inference_pool", "model_name", "target_model_name"}
    assert sample.labels["fairness_id"] == "default-flow" and sample.value == 1
    gateway.set_ready_endpoints(POOL, 1)
    assert await held is True
    [family] = text_string_to_metric_families(gateway.exposition())
    assert [s.value for s in family.samples] == [0]
