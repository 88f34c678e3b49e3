"""Inference figures (what the serving engine in each pod reports: `/pods` `inference`) as metrics of the `direct`
source: the configuration that names them, each pod's value, and values combined over the demo's workloads, where a
pod whose engine is not ready is left out as the HPA leaves unready pods out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient
from hypothesis import given
from hypothesis import strategies as st

from adapter.api.selfmetrics import AdapterMetrics
from adapter.application import build_app
from adapter.metrics_config import (
    Figure,
    MetricDefinition,
    MetricsConfigError,
    Percentile,
    default_metrics_config,
    parse_metrics_config,
)
from adapter.podcache.cache import PodCache
from adapter.quantity import parse_quantity
from adapter.sources.direct import DirectSource
from adapter.sources.exporters import StaticExporters
from adapter.sources.metricsource import ServedValue
from simulation import load_scenario
from simulation.demo.cluster import demo_pods, populate
from simulation.demo.scenarios import DEPLOYMENT, NAMESPACE, STATEFUL_SET, write_scenarios
from simulation.kubeapi import KubeApiServer
from tests.adapter.scriptedfeeds import Figure as PodFigure
from tests.adapter.scriptedfeeds import ScriptedFeeds, node_document
from tests.adapter.simnodes import engine
from tests.support.clocks import ManualClock
from toolkit.backoff import Backoff
from toolkit.kubeclient import api_client
from toolkit.pods import Pod
from toolkit.pods_contract import InferenceFigures

SHIPPED = (
    "inference_queued_requests",
    "inference_running_requests",
    "inference_kv_cache_utilization",
    "inference_time_to_first_token_seconds",
    "inference_inter_token_latency_seconds",
    "inference_generated_tokens_per_second",
    "inference_saturation",  # the largest of the engine's signals over their targets (tests/adapter/test_saturation.py)
)


def shipped(name: str) -> MetricDefinition:
    metric = default_metrics_config().custom(name)
    assert metric is not None, name
    return metric


# ---- the configuration ----------------------------------------------------------------------------------------------
def _one_metric(body: str) -> str:
    return "metrics:\n  - name: m\n    combine: max\n" + "".join(f"    {line}\n" for line in body.strip().splitlines())


def test_the_shipped_defaults_serve_the_six_inference_metrics_in_both_apis() -> None:
    config = default_metrics_config()
    for names in ([m.name for m in config.metrics], [m.name for m in config.external]):
        assert [n for n in names if n.startswith("inference_")] == list(SHIPPED)
    assert shipped("inference_kv_cache_utilization").scale == 100  # percent of the engine's 0-1
    assert shipped("inference_kv_cache_utilization").unit == "percent"
    for latency in ("inference_time_to_first_token_seconds", "inference_inter_token_latency_seconds"):
        assert shipped(latency).percentile is Percentile.P90
        assert shipped(latency).combine == "max"  # the slowest pod's percentile: percentiles do not add up
    assert {shipped(n).combine for n in ("inference_queued_requests", "inference_running_requests")} == {"sum"}
    assert shipped("inference_generated_tokens_per_second").combine == "sum"
    assert config.without_prometheus_queries() == []


def test_a_latency_figure_says_which_percentile() -> None:
    with pytest.raises(MetricsConfigError, match="say which percentile"):
        parse_metrics_config(_one_metric("figure: time_to_first_token_seconds"))
    config = parse_metrics_config(_one_metric("figure: inter_token_latency_seconds\npercentile: p99"))
    assert config.metrics[0].percentile is Percentile.P99


@pytest.mark.parametrize("figure", ["queued_requests", "kv_cache_utilization", "utilization_percent"])
def test_a_percentile_of_a_figure_that_has_none_is_refused(figure: str) -> None:
    with pytest.raises(MetricsConfigError, match="has no percentile"):
        parse_metrics_config(_one_metric(f"figure: {figure}\npercentile: p90"))


def test_quantile_stands_only_for_a_latency_figure_s_percentile() -> None:
    body = """
figure: queued_requests
prometheus:
  query: gpu_pulse_pod_inference_queued_requests{$namespace_matcher, quantile="$quantile"}
  sample_time_query: timestamp(gpu_pulse_pod_inference_queued_requests{$namespace_matcher})
"""
    with pytest.raises(MetricsConfigError, match=r"\$quantile"):
        parse_metrics_config(_one_metric(body))
    with pytest.raises(MetricsConfigError, match="no other placeholder"):
        parse_metrics_config(_one_metric(body.replace("$quantile", "$percentile")))


@given(st.sampled_from(list(Percentile)), st.sampled_from([f for f in Figure if f.is_latency]))
def test_the_prometheus_query_reads_the_percentile_the_metric_names(percentile: Percentile, figure: Figure) -> None:
    body = f"""
figure: {figure}
percentile: {percentile}
prometheus:
  query: x{{$namespace_matcher, quantile="$quantile"}}
  sample_time_query: timestamp(x{{$namespace_matcher, quantile="$quantile"}})
  window_seconds: 60
"""
    metric = parse_metrics_config(_one_metric(body)).metrics[0]
    query, sample_time_query = metric.prometheus_queries('namespace="ml"')
    quantile = Decimal(int(str(percentile).removeprefix("p"))) / 100
    assert query == f'x{{namespace="ml", quantile="{quantile}"}}'
    assert sample_time_query == f'timestamp(x{{namespace="ml", quantile="{quantile}"}})'


def test_every_figure_is_of_one_kind() -> None:
    device = {Figure.UTILIZATION_PERCENT, Figure.MEMORY_USED_BYTES, Figure.MEMORY_UTILIZATION, Figure.POWER_WATTS}
    assert {f for f in Figure if not f.of_inference} == device
    assert {f for f in Figure if f.is_latency} <= {f for f in Figure if f.of_inference}


# ---- each pod's value, from the scripted nodes' documents ----------------------------------------------------------
NODE = "n1"
URL = "http://n1.exporters"


@dataclass
class Scripted:
    clock: ManualClock
    cache: ScriptedFeeds
    source: DirectSource

    async def send(self, pods: dict[str, PodFigure]) -> None:
        document = node_document(NODE, {("ml", name): figure for name, figure in pods.items()}, self.clock.now)
        await self.cache.send(URL, document)

    async def values(self, metric: MetricDefinition, *names: str) -> list[ServedValue | None]:
        pods = [Pod(namespace="ml", name=name, uid="", node=NODE, phase="Running") for name in names]
        return await self.source.pod_values(metric, pods)


@pytest.fixture
async def scripted() -> AsyncIterator[Scripted]:
    clock = ManualClock()
    cache = ScriptedFeeds(clock)
    await cache.start()
    try:
        yield Scripted(clock, cache, DirectSource(StaticExporters({NODE: URL}), cache, clock=clock.time))
    finally:
        await cache.close()


def numbers(values: list[ServedValue | None]) -> list[Decimal | None]:
    return [None if v is None else v.value for v in values]


async def test_each_pod_serves_its_engine_s_figure_while_the_engine_is_ready(scripted: Scripted) -> None:
    await scripted.send(
        {
            "ready": PodFigure(inference=engine(queued=3)),
            "warming": PodFigure(inference=engine(queued=7, state="warming")),
            "gone": PodFigure(inference=engine(queued=9, state="unreachable")),
            "plain": PodFigure(),  # a GPU pod without an engine the exporter reads
        }
    )
    names = ("ready", "warming", "gone", "plain")
    assert numbers(await scripted.values(shipped("inference_queued_requests"), *names)) == [3, None, None, None]
    assert numbers(await scripted.values(shipped("inference_running_requests"), *names)) == [8, None, None, None]
    assert numbers(await scripted.values(shipped("inference_kv_cache_utilization"), *names))[0] == Decimal("42.00")
    # the GPU figures of the same pods are served as before, the engine's state notwithstanding
    gpu = default_metrics_config().custom("gpu_utilization")
    assert gpu is not None
    assert numbers(await scripted.values(gpu, *names)) == [50, 50, 50, 50]


async def test_a_latency_metric_reads_its_percentile_over_the_engine_s_window(scripted: Scripted) -> None:
    await scripted.send({"a": PodFigure(inference=engine(ttft=(0.05, 0.25, 1.5), itl=(0.01, 0.02, 0.08)))})
    (ttft,) = await scripted.values(shipped("inference_time_to_first_token_seconds"), "a")
    assert ttft is not None and ttft.value == Decimal("0.25") and ttft.window_seconds == 60
    p99 = shipped("inference_inter_token_latency_seconds").model_copy(update={"percentile": Percentile.P99})
    assert numbers(await scripted.values(p99, "a")) == [Decimal("0.08")]
    (tokens,) = await scripted.values(shipped("inference_generated_tokens_per_second"), "a")
    assert tokens is not None and tokens.value == 1250


async def test_a_figure_the_engine_does_not_give_is_left_out(scripted: Scripted) -> None:
    # Triton with TensorRT-LLM gives no time to first token unless asked to; TGI gives no KV-cache use
    await scripted.send({"a": PodFigure(inference=engine(ttft=None, kv=None))})
    assert numbers(await scripted.values(shipped("inference_time_to_first_token_seconds"), "a")) == [None]
    assert numbers(await scripted.values(shipped("inference_kv_cache_utilization"), "a")) == [None]
    assert numbers(await scripted.values(shipped("inference_queued_requests"), "a")) == [3]


async def test_an_engine_figure_is_as_old_as_its_reading_and_never_stale(scripted: Scripted) -> None:
    await scripted.send({"a": PodFigure(age=2.0, inference=engine())})
    (value,) = await scripted.values(shipped("inference_queued_requests"), "a")
    assert value is not None and value.sampled_at == scripted.clock.now - 2.0
    scripted.clock.advance(10)  # no newer document: past 3 intervals + 2 s the figure is left out
    assert await scripted.values(shipped("inference_queued_requests"), "a") == [None]


async def test_an_engine_reading_is_never_newer_than_its_document(scripted: Scripted) -> None:
    document = node_document(NODE, {("ml", "a"): PodFigure(inference=engine())}, scripted.clock.now)
    (pod,) = document.pods
    assert pod.inference is not None
    later = datetime.fromtimestamp(scripted.clock.now + 30, UTC)
    dated = msgspec.structs.replace(pod, inference=msgspec.structs.replace(pod.inference, sampled_at=later))
    await scripted.cache.send(URL, msgspec.structs.replace(document, pods=(dated,)))
    (value,) = await scripted.values(shipped("inference_queued_requests"), "a")
    assert value is not None and value.sampled_at == scripted.clock.now


# ---- the demo's workloads, through the API ---------------------------------------------------------------------------
@dataclass
class Demo:
    client: TestClient  # type: ignore[type-arg]
    clock: ManualClock
    cache: ScriptedFeeds
    pods_by_node: dict[str, list[tuple[str, str]]]  # node -> its (namespace, pod) pairs
    workload: dict[str, str]  # pod name -> its workload's name

    async def send(self, figures: Callable[[str], InferenceFigures | None]) -> None:
        """Each node's document, each pod carrying what `figures(pod name)` gives its engine."""
        for node, pods in self.pods_by_node.items():
            listed = {key: PodFigure(inference=figures(key[1])) for key in pods}
            await self.cache.send(f"http://{node}.exporters", node_document(node, listed, self.clock.now))

    async def get(self, path: str) -> dict[str, Any]:
        response = await self.client.get(path)
        body: dict[str, Any] = await response.json()
        assert response.status == 200, body
        return body


@pytest.fixture
async def demo(tmp_path: Path, aiohttp_client: Callable[..., Awaitable[TestClient]]) -> AsyncIterator[Demo]:  # type: ignore[type-arg]
    scenarios = {node: load_scenario(str(path)) for node, path in write_scenarios(tmp_path, seed=1).items()}
    kube = KubeApiServer(bookmark_interval=0.2)
    await kube.start()
    populate(kube, scenarios)
    cache = PodCache(api_client(base_url=kube.url), backoff=Backoff(initial=0.05, maximum=0.2))
    await cache.start()
    clock = ManualClock()
    feeds = ScriptedFeeds(clock)
    try:
        assert await cache.wait_synced(10), "the pod cache never synced"
        pods = demo_pods(scenarios)
        by_node: dict[str, list[tuple[str, str]]] = {}
        for pod in pods:
            by_node.setdefault(pod.node, []).append((pod.namespace, pod.name))
        locator = StaticExporters({node: f"http://{node}.exporters" for node in by_node})
        source = DirectSource(locator, feeds, clock=clock.time)
        app = build_app(
            config=default_metrics_config(), pods=cache, source=source, metrics=AdapterMetrics("direct"), clock=clock
        )
        client = await aiohttp_client(app)
        yield Demo(client, clock, feeds, by_node, {p.name: p.workload.name for p in pods})
    finally:
        await cache.stop()
        await kube.stop()


def by_pod(body: dict[str, Any]) -> dict[str, Decimal]:
    return {item["describedObject"]["name"]: parse_quantity(item["value"]) for item in body["items"]}


CUSTOM = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NAMESPACE}"
EXTERNAL = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}"


async def test_the_demo_s_pods_serve_their_engines_figures_as_soon_as_their_documents_carry_them(demo: Demo) -> None:
    hpa_query = f"{CUSTOM}/pods/*/inference_queued_requests?labelSelector=app%3D{DEPLOYMENT}"
    await demo.send(lambda pod: None)  # exporters that read no engine yet: GPU figures only
    assert (await demo.get(hpa_query))["items"] == []
    serving = sorted(p for p, w in demo.workload.items() if w == DEPLOYMENT)
    assert len(serving) == 4
    queued = {pod: float(i * 2 + 1) for i, pod in enumerate(serving)}
    await demo.send(lambda pod: engine(queued=queued.get(pod, 0.0), kv=0.5 if pod in queued else 0.25))
    assert by_pod(await demo.get(hpa_query)) == {pod: Decimal(value) for pod, value in queued.items()}
    kv = by_pod(await demo.get(f"{CUSTOM}/pods/*/inference_kv_cache_utilization?labelSelector=app%3D{DEPLOYMENT}"))
    assert kv == dict.fromkeys(serving, Decimal(50))  # percent of vllm:kv_cache_usage_perc's 0-1


async def test_a_workload_combines_its_ready_pods_only(demo: Demo) -> None:
    serving = sorted(p for p, w in demo.workload.items() if w == DEPLOYMENT)
    embeddings = sorted(p for p, w in demo.workload.items() if w == STATEFUL_SET)
    assert len(embeddings) == 2
    warming = serving[0]
    figures = {pod: engine(queued=10.0, state="warming", ttft=(9, 9, 9)) for pod in (warming,)}
    figures |= {pod: engine(queued=float(i + 1), ttft=(0.1, 0.2 * (i + 1), 1.0)) for i, pod in enumerate(serving[1:])}
    figures |= {embeddings[0]: engine(queued=2.0, kv=0.2), embeddings[1]: engine(queued=0.0, kv=0.6)}
    await demo.send(figures.get)
    deployment = f"{CUSTOM}/deployments.apps/{DEPLOYMENT}"
    assert by_pod(await demo.get(f"{deployment}/inference_queued_requests")) == {DEPLOYMENT: Decimal(1 + 2 + 3)}
    slowest = by_pod(await demo.get(f"{deployment}/inference_time_to_first_token_seconds"))
    assert slowest == {DEPLOYMENT: Decimal("0.6")}  # the slowest ready pod's p90; the warming pod's 9 s left out
    statefulset = f"{CUSTOM}/statefulsets.apps/{STATEFUL_SET}"
    assert by_pod(await demo.get(f"{statefulset}/inference_kv_cache_utilization")) == {STATEFUL_SET: Decimal(40)}
    pods = by_pod(await demo.get(f"{CUSTOM}/pods/*/inference_queued_requests?labelSelector=app%3D{DEPLOYMENT}"))
    assert warming not in pods and len(pods) == 3
    external = (await demo.get(f"{EXTERNAL}/inference_queued_requests?labelSelector=app%3D{DEPLOYMENT}"))["items"]
    assert [parse_quantity(item["value"]) for item in external] == [Decimal(6)]
    assert external[0]["metricLabels"] == {"app": DEPLOYMENT}
