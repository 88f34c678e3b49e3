"""The prometheus source against a real `prometheus` process that scrapes the simulated nodes' exporter exposition."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from adapter.api.selfmetrics import AdapterMetrics
from adapter.metrics_config import MetricsConfigError, default_metrics_config, parse_metrics_config
from adapter.quantity import parse_quantity
from adapter.sources.prometheus import PrometheusSource, namespace_matcher
from tests.adapter.promserver import Prometheus
from tests.adapter.simcluster import AdapterFactory, Cluster
from tests.adapter.simnodes import engine
from tests.support.loopback import listening_socket, port_of, refused_port
from tests.support.waiting import eventually

V2 = "/apis/custom.metrics.k8s.io/v1beta2"
V1 = "/apis/custom.metrics.k8s.io/v1beta1"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    server = Prometheus(tmp_path_factory.mktemp("prometheus"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def node_listeners(prometheus: Prometheus) -> Iterator[dict[str, socket.socket]]:
    """Sockets the simulated nodes of every test here serve on, held for the whole module, so that Prometheus'
    targets never change and their addresses stay ours between tests."""
    listeners = {"gpu-1": listening_socket(), "gpu-2": listening_socket()}
    prometheus.set_targets([f"127.0.0.1:{port_of(listener)}" for listener in listeners.values()])
    yield listeners
    for listener in listeners.values():
        listener.close()


@pytest.fixture
async def scraped(prometheus: Prometheus, node_listeners: dict[str, socket.socket], cluster: Cluster) -> Prometheus:
    """Prometheus scraping this test's simulated nodes, with every pod's series present and fresh."""
    for name, node in cluster.nodes.items():
        await node.stop()
        node.listener = node_listeners[name]
        await node.start()
    started = time.time()

    def ready() -> bool:
        stamps = prometheus.query("timestamp(gpu_pulse_pod_gpu_utilization_ratio)")
        return len(stamps) == 5 and all(float(s["value"][1]) > started for s in stamps)

    await eventually(ready, "prometheus scraped every simulated node", timeout=20)
    return prometheus


def source_for(prometheus: Prometheus, **kwargs: Any) -> PrometheusSource:
    return PrometheusSource(prometheus.url, **kwargs)


async def get(client: Any, path: str, status: int = 200) -> dict[str, Any]:
    response = await client.get(path)
    body = await response.json()
    assert response.status == status, body
    return body  # type: ignore[no-any-return]


def values(body: dict[str, Any]) -> dict[str, Decimal]:
    return {item["describedObject"]["name"]: parse_quantity(item["value"]) for item in body["items"]}


async def test_both_sources_serve_the_same_answers(make_adapter: AdapterFactory, scraped: Prometheus) -> None:
    via_prometheus = await make_adapter(source=source_for(scraped), metrics=AdapterMetrics("prometheus"))
    direct = await make_adapter()
    paths = [
        f"{V2}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dinfer",
        f"{V1}/namespaces/ml/pods/*/gpu_utilization",
        f"{V2}/namespaces/ml/pods/*/gpu_memory_used_bytes",
        f"{V2}/namespaces/ml/pods/*/gpu_memory_utilization",
        f"{V2}/namespaces/ml/pods/*/gpu_power_watts",
        f"{V2}/namespaces/ml/pods/infer-b/gpu_utilization?metricLabelSelector=gpu%3D1",
        f"{V2}/namespaces/ml/deployments.apps/infer/gpu_utilization",
        f"{V2}/namespaces/*/gpu_utilization",
        f"{V2}/nodes/*/gpu_power_watts",
    ]
    for path in paths:
        expected = values(await get(direct, path))
        assert expected, path
        assert values(await get(via_prometheus, path)) == expected, path
    external = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/namespace_gpu_utilization?labelSelector=app%3Dinfer"
    got = (await get(via_prometheus, external))["items"][0]
    assert parse_quantity(got["value"]) == parse_quantity((await get(direct, external))["items"][0]["value"])


async def test_both_sources_serve_the_same_inference_answers(
    make_adapter: AdapterFactory, scraped: Prometheus, cluster: Cluster
) -> None:
    """The shipped inference metrics through Prometheus, over the exporter's `gpu_pulse_pod_inference_*` series
    (repeated on each device of a pod on two GPUs, as the per-pod series are), answer as the direct source does from
    `/pods`; a pod whose engine is warming has no figure in either."""
    gpu1, gpu2 = cluster.nodes["gpu-1"], cluster.nodes["gpu-2"]
    gpu1.set_inference("ml", "infer-a", engine(queued=3.0, running=6.0, kv=0.25, ttft=(0.1, 0.4, 2.0)))
    gpu2.set_inference("ml", "infer-b", engine(queued=5.0, running=2.0, kv=0.75, itl=(0.02, 0.05, 0.5)))
    gpu1.set_inference("ml", "train-0", engine(queued=11.0, state="warming"))
    await eventually(
        lambda: len(scraped.query("gpu_pulse_pod_inference_queued_requests")) == 3,  # infer-b's on each of its GPUs
        "prometheus scraped the inference series",
        timeout=20,
    )
    via_prometheus = await make_adapter(source=source_for(scraped))
    direct = await make_adapter()
    paths = [
        f"{V2}/namespaces/ml/pods/*/{name}{on}"
        for name in (
            "inference_queued_requests",
            "inference_running_requests",
            "inference_kv_cache_utilization",
            "inference_time_to_first_token_seconds",
            "inference_inter_token_latency_seconds",
        )
        for on in ("", "?labelSelector=app%3Dinfer")
    ]
    paths += [
        f"{V2}/namespaces/ml/deployments.apps/infer/inference_queued_requests",
        f"{V2}/namespaces/ml/deployments.apps/infer/inference_kv_cache_utilization",
        f"{V2}/namespaces/ml/deployments.apps/infer/inference_time_to_first_token_seconds",
        f"{V2}/namespaces/ml/pods/*/inference_queued_requests?metricLabelSelector=engine%3Dvllm",
    ]
    for path in paths:
        expected = values(await get(direct, path))
        assert expected, path
        assert "train-0" not in expected
        assert values(await get(via_prometheus, path)) == expected, path
    assert values(await get(direct, paths[-4])) == {"infer": Decimal(8)}  # one engine per pod, on two GPUs or one
    external = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/inference_queued_requests?labelSelector=app%3Dinfer"
    got = (await get(via_prometheus, external))["items"]
    assert [parse_quantity(item["value"]) for item in got] == [Decimal(8)]
    # tokens per second are a rate over the exporter's counter: served for the ready engines, once Prometheus holds two
    # samples of each pod's counter (the wait above saw one sample of infer-b's at least, not two)
    await eventually(
        lambda: len(scraped.query("rate(gpu_pulse_pod_inference_generated_tokens_total[1m]) > 0")) == 3,
        "prometheus holds two increasing samples of each ready engine's token counter",
        timeout=20,
    )
    tokens = values(await get(via_prometheus, f"{V2}/namespaces/ml/pods/*/inference_generated_tokens_per_second"))
    assert set(tokens) == {"infer-a", "infer-b"} and all(value > 0 for value in tokens.values())


# both pods' new signals, as this test sets them (infer-b's on each of its two GPUs)
SATURATION_SIGNALS = (
    "gpu_pulse_pod_inference_kv_cache_utilization_ratio == 0.25"
    " or gpu_pulse_pod_inference_kv_cache_utilization_ratio == 0.7"
)


async def test_both_sources_serve_the_same_saturation_and_its_driving_term(
    make_adapter: AdapterFactory, scraped: Prometheus, cluster: Cluster
) -> None:
    """`inference_saturation` through Prometheus, with the query the adapter builds from the shipped terms (queue 5, KV
    cache 0.8), answers as the direct source does, pod by pod, for the workload, and by driving term."""
    gpu1, gpu2 = cluster.nodes["gpu-1"], cluster.nodes["gpu-2"]
    gpu1.set_inference("ml", "infer-a", engine(queued=3.0, kv=0.25))  # 60 % of the queue target
    gpu2.set_inference("ml", "infer-b", engine(queued=1.0, kv=0.7))  # 87.5 % of the KV-cache target
    await eventually(
        lambda: {s["metric"]["pod"] for s in scraped.query(SATURATION_SIGNALS)} == {"infer-a", "infer-b"},
        "prometheus scraped the inference series",
        timeout=20,
    )
    via_prometheus = await make_adapter(source=source_for(scraped))
    direct = await make_adapter()
    paths = [
        f"{V2}/namespaces/ml/pods/*/inference_saturation",
        f"{V2}/namespaces/ml/deployments.apps/infer/inference_saturation",
        f"{V2}/namespaces/ml/pods/*/inference_saturation?metricLabelSelector=term%3Dkv_cache_utilization",
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/inference_saturation?labelSelector=app%3Dinfer",
    ]
    expected = [
        {"infer-a": Decimal(60), "infer-b": Decimal("87.5")},
        {"infer": Decimal("73.75")},
        {"infer-b": Decimal("87.5")},
    ]
    for path, want in zip(paths, expected, strict=False):
        assert values(await get(direct, path)) == want, path
        assert values(await get(via_prometheus, path)) == want, path
    for adapter in (direct, via_prometheus):
        got = (await get(adapter, paths[-1]))["items"]
        assert [parse_quantity(item["value"]) for item in got] == [Decimal("73.75")]


async def test_queries_select_by_namespace_only(make_adapter: AdapterFactory, scraped: Prometheus) -> None:
    client = await make_adapter(source=source_for(scraped))
    body = await get(client, f"{V2}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dinfer")
    assert {item["describedObject"]["name"] for item in body["items"]} == {"infer-a", "infer-b"}
    assert all(item["windowSeconds"] == 60 for item in body["items"])  # avg_over_time(...[1m]), as the default says
    queries = [q for q in scraped.logged_queries() if "$" not in q and "gpu_pulse_pod_" in q]
    assert any('namespace="ml"' in q for q in queries)
    assert not any("pod=" in q or "pod!" in q for q in queries)  # never a selection by pod name


async def test_timestamps_are_the_samples_not_now(
    make_adapter: AdapterFactory, cluster: Cluster, tmp_path: Path
) -> None:
    sampled = int(time.time()) - 20  # the exporters' samples carry a time 20 s ago: still fresh, but clearly not now
    for node in cluster.nodes.values():
        node.exposition_time = sampled
    prometheus = Prometheus(tmp_path)  # its own: samples older than those of earlier tests would be out of order
    try:
        prometheus.set_targets([node.url for node in cluster.nodes.values()])
        await eventually(
            lambda: len(prometheus.query("gpu_pulse_pod_gpu_utilization_ratio")) == 5, "prometheus scraped", timeout=20
        )
        client = await make_adapter(source=source_for(prometheus))
        body = await get(client, f"{V2}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dinfer")
        expected = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(sampled))
        assert [item["timestamp"] for item in body["items"]] == [expected, expected]
    finally:
        prometheus.stop()


async def test_a_stopped_exporter_drops_out(
    make_adapter: AdapterFactory, scraped: Prometheus, cluster: Cluster
) -> None:
    client = await make_adapter(source=source_for(scraped))
    assert set(values(await get(client, f"{V2}/namespaces/ml/pods/*/gpu_utilization"))) == {
        "infer-a",
        "infer-b",
        "train-0",
    }
    await cluster.nodes["gpu-2"].stop()  # its scrapes fail: Prometheus marks its series stale

    async def dropped() -> bool:
        return "infer-b" not in values(await get(client, f"{V2}/namespaces/ml/pods/*/gpu_utilization"))

    deadline = time.monotonic() + 10
    while not await dropped():
        assert time.monotonic() < deadline, "the stopped exporter's pod is still served"
        await asyncio.sleep(0.1)
    assert "infer-a" in values(await get(client, f"{V2}/namespaces/ml/pods/*/gpu_utilization"))


async def test_figures_older_than_max_age_are_left_out(make_adapter: AdapterFactory, scraped: Prometheus) -> None:
    late = source_for(scraped, max_age=30, clock=lambda: time.time() + 60)  # every sample looks a minute old
    client = await make_adapter(source=late)
    assert (await get(client, f"{V2}/namespaces/ml/pods/*/gpu_utilization"))["items"] == []


async def test_prometheus_down_is_service_unavailable(make_adapter: AdapterFactory) -> None:
    with refused_port() as port:
        client = await make_adapter(source=PrometheusSource(f"http://127.0.0.1:{port}", timeout=1))
        body = await get(client, f"{V2}/namespaces/ml/pods/*/gpu_utilization", status=503)
    assert body["reason"] == "ServiceUnavailable"
    assert "cannot reach prometheus" in body["message"]


async def test_a_query_prometheus_rejects_is_an_internal_error(
    make_adapter: AdapterFactory, prometheus: Prometheus
) -> None:
    config = parse_metrics_config(
        """
metrics:
  - name: broken
    figure: utilization_percent
    combine: mean
    prometheus:
      query: sum by (pod (gpu_pulse_pod_gpu_utilization_ratio{$namespace_matcher})
      sample_time_query: timestamp(gpu_pulse_pod_gpu_utilization_ratio{$namespace_matcher})
"""
    )
    client = await make_adapter(source=source_for(prometheus), config=config)
    body = await get(client, f"{V2}/namespaces/ml/pods/*/broken", status=500)
    assert body["reason"] == "InternalError"
    assert "prometheus rejected the query" in body["message"]


async def test_the_served_window_is_the_one_the_query_reads(make_adapter: AdapterFactory, scraped: Prometheus) -> None:
    config = parse_metrics_config(
        """
metrics:
  - name: util_30s
    figure: utilization_percent
    combine: mean
    prometheus:
      query: avg_over_time(gpu_pulse_pod_gpu_utilization_ratio{$namespace_matcher}[30s]) * 100
      sample_time_query: max by (namespace, pod) (timestamp(gpu_pulse_pod_gpu_utilization_ratio{$namespace_matcher}))
      window_seconds: 30
"""
    )
    client = await make_adapter(source=source_for(scraped), config=config)
    body = await get(client, f"{V2}/namespaces/ml/pods/*/util_30s")
    assert body["items"] and all(item["windowSeconds"] == 30 for item in body["items"])


def test_a_range_query_must_say_its_window() -> None:
    text = """
metrics:
  - name: util
    figure: utilization_percent
    combine: mean
    prometheus:
      query: avg_over_time(gpu_pulse_pod_gpu_utilization_ratio{$namespace_matcher}[1m])
      sample_time_query: timestamp(gpu_pulse_pod_gpu_utilization_ratio{$namespace_matcher})
"""
    with pytest.raises(MetricsConfigError, match="window_seconds"):
        parse_metrics_config(text)


def test_the_default_utilization_averages_over_the_minute_the_exporter_averages_over() -> None:
    (utilization,) = [m for m in default_metrics_config().metrics if m.name == "gpu_utilization"]
    assert utilization.prometheus is not None and utilization.prometheus.window_seconds == 60
    assert "avg_over_time(" in utilization.prometheus.query and "[1m]" in utilization.prometheus.query


def test_the_default_queries_read_the_namespace_s_series_only() -> None:
    """Every series a default query reads is selected by namespace (the per-pod series, and the dcgm device series,
    which carry the labels of the pods using the device), so a query reads the namespace's pods and GPUs, not the
    fleet's; the one exception is nvidia_gpu_memory_total_bytes (prometheus dialect), which has no pod labels."""
    config = default_metrics_config()
    matcher = namespace_matcher(["ml"])
    selector = re.compile(r"\b((?:gpu_pulse_pod_|DCGM_FI_|nvidia_gpu_)\w+)(\{[^}]*\})?")
    unscoped: set[str] = set()
    for metric in [*config.metrics, *config.external]:
        assert metric.prometheus is not None
        for query in metric.prometheus_queries(matcher):
            selected = selector.findall(query)
            assert selected, query
            unscoped |= {name for name, labels in selected if not labels.startswith("{" + matcher)}
    assert unscoped == {"nvidia_gpu_memory_total_bytes"}


def test_metrics_without_a_query_are_not_served_by_prometheus() -> None:
    config = parse_metrics_config("metrics: [{name: plain, figure: power_watts, combine: sum}]")
    assert config.without_prometheus_queries() == ["plain"]
    assert not PrometheusSource("http://127.0.0.1:1").serves(config.metrics[0])
    assert all(PrometheusSource("http://127.0.0.1:1").serves(m) for m in default_metrics_config().metrics)


@pytest.mark.parametrize(
    ("namespaces", "matcher"),
    [
        (["ml"], 'namespace="ml"'),
        (["b", "a", "b"], 'namespace=~"a|b"'),
        ([f"ns-{i}" for i in range(30)], 'namespace!=""'),  # many namespaces: one short query, filtered here
    ],
)
def test_namespace_matcher(namespaces: list[str], matcher: str) -> None:
    assert namespace_matcher(namespaces) == matcher
