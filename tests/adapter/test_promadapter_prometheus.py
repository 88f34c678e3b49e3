"""prometheus-adapter's configuration served by gpu-pulse against a real `prometheus`, beside the GPU metrics.

Prometheus scrapes a small application (the walkthrough's `http_requests_total` counter per pod, a `queue_length`
gauge per pod, and docs/externalmetrics.md's `queue_consumer_lag` by queue `name`), labelled with namespace and pod as
Kubernetes service discovery labels them. The adapter reads prometheus-adapter's chart default rules
(prometheus-community/helm-charts charts/prometheus-adapter, rules.default: true), the walkthrough's rule
(docs/walkthrough.md) and the external rule of docs/externalmetrics.md, all in one file as the chart writes it.

The referee is Prometheus: each value served equals the rule's metricsQuery, written out here by hand, evaluated by
Prometheus at the instant the adapter evaluated it (the adapter's clock is held still at that instant), truncated to
the milli-unit as prometheus-adapter truncates it; discovery lists what those rules give; and the GPU metrics answer
from the direct source of the same adapter at the same time.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from adapter.api.selfmetrics import AdapterMetrics
from adapter.application import build_app
from adapter.metrics_config import default_metrics_config
from adapter.promadapter.config import load_document, parse_prom_adapter_config
from adapter.promadapter.discovery import RuleDiscovery
from adapter.promadapter.naming import namers_from_config
from adapter.promadapter.promapi import PrometheusApi
from adapter.promadapter.registry import ExternalSeriesRegistry, SeriesRegistry
from adapter.promadapter.restmapper import RestMapper
from adapter.promadapter.serving import RuleMetrics
from adapter.quantity import parse_quantity
from adapter.sources.direct import DirectSource
from adapter.sources.nodefeeds import NodeFeeds
from tests.adapter.promserver import Prometheus
from tests.adapter.simcluster import Cluster
from tests.support.loopback import listening_socket, port_of
from tests.support.waiting import eventually, patience

V2 = "/apis/custom.metrics.k8s.io/v1beta2"
V1 = "/apis/custom.metrics.k8s.io/v1beta1"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"

CHART_DEFAULT_RULES = """
rules:
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  seriesFilters: []
  resources:
    overrides:
      namespace:
        resource: namespace
      pod:
        resource: pod
  name:
    matches: ^container_(.*)_seconds_total$
    as: ""
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>,container!="POD"}[5m]))
    by (<<.GroupBy>>)
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  seriesFilters:
  - isNot: ^container_.*_seconds_total$
  resources:
    overrides:
      namespace:
        resource: namespace
      pod:
        resource: pod
  name:
    matches: ^container_(.*)_total$
    as: ""
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>,container!="POD"}[5m]))
    by (<<.GroupBy>>)
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  seriesFilters:
  - isNot: ^container_.*_total$
  resources:
    overrides:
      namespace:
        resource: namespace
      pod:
        resource: pod
  name:
    matches: ^container_(.*)$
    as: ""
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>,container!="POD"}) by (<<.GroupBy>>)
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  seriesFilters:
  - isNot: .*_total$
  resources:
    template: <<.Resource>>
  name:
    matches: ""
    as: ""
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  seriesFilters:
  - isNot: .*_seconds_total
  resources:
    template: <<.Resource>>
  name:
    matches: ^(.*)_total$
    as: ""
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[5m])) by (<<.GroupBy>>)
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  seriesFilters: []
  resources:
    template: <<.Resource>>
  name:
    matches: ^(.*)_seconds_total$
    as: ""
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[5m])) by (<<.GroupBy>>)
"""
WALKTHROUGH_RULE = """
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  resources:
    template: "<<.Resource>>"
  name:
    matches: "^(.*)_total"
    as: ""
  metricsQuery: |
    sum by (<<.GroupBy>>) (
      irate (
        <<.Series>>{<<.LabelMatchers>>}[1m]
      )
    )
"""
EXTERNAL_RULE = """
externalRules:
- seriesQuery: '{__name__="queue_consumer_lag",name!=""}'
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (name)
  resources:
    overrides: { namespace: {resource: "namespace"} }
"""
CONFIG = CHART_DEFAULT_RULES + WALKTHROUGH_RULE + EXTERNAL_RULE

# per pod: requests per second its counter grows by, its queue length, and its Deployment label
APP_PODS = {"infer-a": (10, 7, "infer"), "infer-b": (25, 12, "infer"), "web-0": (3, 1, "web")}
LAG = {"orders": 40, "emails": 5}


def exposition(started: float) -> str:
    elapsed = time.time() - started
    lines = ["# TYPE http_requests_total counter", "# TYPE queue_length gauge", "# TYPE queue_consumer_lag gauge"]
    for pod, (rate, queue, deployment) in APP_PODS.items():
        labels = f'namespace="ml",pod="{pod}",deployment="{deployment}"'
        lines.append(f"http_requests_total{{{labels}}} {rate * elapsed:.3f}")
        lines.append(f"queue_length{{{labels}}} {queue}")
    for name, lag in LAG.items():
        lines.append(f'queue_consumer_lag{{namespace="ml",name="{name}"}} {lag}')
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    server = Prometheus(tmp_path_factory.mktemp("prometheus"))
    yield server
    server.stop()


@pytest.fixture
async def application(prometheus: Prometheus) -> AsyncIterator[Prometheus]:
    """The application, scraped by Prometheus every 200 ms, with a few seconds of history."""
    started = time.time()

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=exposition(started), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    listener = listening_socket()
    await web.SockSite(runner, listener).start()
    prometheus.set_targets([f"127.0.0.1:{port_of(listener)}"])

    def scraped() -> bool:
        series = prometheus.query('count_over_time(http_requests_total{pod="infer-a"}[1m])')
        return bool(series) and float(series[0]["value"][1]) >= 5

    await eventually(scraped, "prometheus scraped the application five times", timeout=30)
    try:
        yield prometheus
    finally:
        prometheus.set_targets([])
        await runner.cleanup()
        listener.close()


def rule_metrics(prometheus: Prometheus, cluster: Cluster, at: float, path: Path) -> RuleMetrics:
    path.write_text(CONFIG)
    config = parse_prom_adapter_config(load_document(CONFIG, str(path)), str(path))
    mapper = RestMapper()
    discovery = RuleDiscovery(
        PrometheusApi(prometheus.url),
        SeriesRegistry(mapper),
        namers_from_config(config.rules, mapper),
        ExternalSeriesRegistry(),
        namers_from_config(config.external_rules, mapper),
        interval=3600,
        max_age=600,
    )
    return RuleMetrics(discovery, mapper, cluster.pods, clock=lambda: at)


def evaluated(prometheus: Prometheus, promql: str, at: float) -> dict[str, Decimal]:
    """The query evaluated by Prometheus at `at`: each series' value as prometheus-adapter serves it, by the value of
    its first label."""
    answer = prometheus.query_at(promql, at)
    # provider.go metricFor: resource.NewMilliQuantity(int64(value*1000.0), ...), Go's conversion truncating
    return {
        next(iter(series["metric"].values()), ""): Decimal(int(float(series["value"][1]) * 1000.0)) / 1000
        for series in answer
    }


def served(body: dict[str, Any]) -> dict[str, Decimal]:
    return {item["describedObject"]["name"]: parse_quantity(item["value"]) for item in body["items"]}


async def test_rules_served_beside_gpu_metrics_equal_prometheus(
    application: Prometheus, cluster: Cluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    at = round(time.time() - 0.5, 3)  # an instant Prometheus has samples on both sides of
    rules = rule_metrics(application, cluster, at, tmp_path / "prometheus-adapter.yaml")
    metrics = AdapterMetrics("direct")
    # a node's answer may take longer than a second while Prometheus and the rest of the slow lane share the cores
    source = DirectSource(cluster.locator(), NodeFeeds(timeout=patience(1.0), observe=metrics.observe_source_call))
    app = build_app(config=default_metrics_config(), pods=cluster.pods, source=source, metrics=metrics, rules=rules)
    client = await aiohttp_client(app)
    await eventually(lambda: len(rules.discovery.last_success) == 2, "both kinds of rules relisted", timeout=10)

    # discovery: every metric the rules give, beside the GPU metrics
    resources = {r["name"]: r["namespaced"] for r in (await (await client.get(V2)).json())["resources"]}
    for name, namespaced in {
        "pods/http_requests": True,
        "namespaces/http_requests": False,
        "deployments.apps/http_requests": True,
        "pods/queue_length": True,
        "namespaces/queue_length": False,
        "deployments.apps/queue_length": True,
        "namespaces/queue_consumer_lag": False,
        "jobs.batch/http_requests": True,  # the scrape's `job` label names a Job, as it does for prometheus-adapter
        "pods/gpu_utilization": True,
    }.items():
        assert resources.get(name) == namespaced, name
    assert not [name for name in resources if name.startswith("pods/") and "container" in name]
    externals = {r["name"] for r in (await (await client.get(EXTERNAL)).json())["resources"]}
    assert {"queue_consumer_lag", "namespace_gpu_utilization"} <= externals

    # pods by selector: the walkthrough's rule (the last to name pods/http_requests wins, as upstream's map does)
    body = await (await client.get(f"{V2}/namespaces/ml/pods/*/http_requests?labelSelector=app%3Dinfer")).json()
    want = evaluated(
        application,
        'sum by (pod) (irate(http_requests_total{namespace="ml",pod=~"infer-a|infer-b|infer-pending"}[1m]))',
        at,
    )
    assert served(body) == want and set(want) == {"infer-a", "infer-b"}
    item = body["items"][0]
    assert set(item) == {"describedObject", "metric", "timestamp", "value"}
    assert item["describedObject"]["apiVersion"] == "/v1" and item["describedObject"]["kind"] == "Pod"
    sample_times = application.query_at('max by (pod) (timestamp(http_requests_total{namespace="ml"}))', at)
    newest = {s["metric"]["pod"]: float(s["value"][1]) for s in sample_times}
    assert item["timestamp"] == time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(newest[item["describedObject"]["name"]]))
    )

    # one pod, in both versions
    for version in (V1, V2):
        body = await (await client.get(f"{version}/namespaces/ml/pods/infer-b/queue_length")).json()
        assert (
            served(body)
            == evaluated(application, 'sum(queue_length{namespace="ml",pod="infer-b"}) by (pod)', at)
            == {"infer-b": Decimal(12)}
        )

    # a namespace, and a Deployment by its label
    body = await (await client.get(f"{V2}/namespaces/ml/metrics/http_requests")).json()
    assert served(body) == evaluated(
        application, 'sum by (namespace) (irate(http_requests_total{namespace="ml"}[1m]))', at
    )
    body = await (await client.get(f"{V2}/namespaces/ml/deployments.apps/infer/queue_length")).json()
    assert (
        served(body)
        == evaluated(application, 'sum(queue_length{namespace="ml",deployment="infer"}) by (deployment)', at)
        == {"infer": Decimal(19)}
    )
    assert body["items"][0]["describedObject"] == {
        "kind": "Deployment", "namespace": "ml", "name": "infer", "apiVersion": "apps/v1"
    }  # fmt: skip

    # an external metric
    body = await (await client.get(f"{EXTERNAL}/namespaces/ml/queue_consumer_lag?labelSelector=name%3Dorders")).json()
    assert [(i["metricLabels"], parse_quantity(i["value"])) for i in body["items"]] == [
        ({"name": "orders"}, Decimal(40))
    ]

    # the GPU metrics from the direct source, in the same adapter
    body = await (await client.get(f"{V2}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dinfer")).json()
    assert served(body) == {"infer-a": Decimal(80), "infer-b": Decimal("50.25")}

    # what prometheus-adapter answers NotFound
    for path in (f"{V2}/namespaces/ml/pods/no-such-pod/http_requests", f"{V2}/namespaces/ml/pods/*/nothing"):
        assert (await client.get(path)).status == 404
