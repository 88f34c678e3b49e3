"""The adapter's real application behind the Kubernetes-side auth, over TLS, as the aggregator reaches it."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import pytest
from aiohttp import web

from adapter.api.paths import resource_attributes
from adapter.api.selfmetrics import AdapterMetrics
from adapter.application import build_app
from adapter.auth.config import AuthenticationFlags, load_authentication_config
from adapter.auth.requests import DelegatingAuthenticator, auth_middleware
from adapter.auth.sar import SubjectAccessReviewer
from adapter.auth.tokenreview import TokenReviewer
from adapter.metrics_config import default_metrics_config
from adapter.podcache.cache import PodCache
from adapter.promadapter.config import load_document, parse_prom_adapter_config
from adapter.promadapter.discovery import RuleDiscovery
from adapter.promadapter.naming import SeriesName, namers_from_config
from adapter.promadapter.promapi import Answer, Sample
from adapter.promadapter.registry import ExternalSeriesRegistry, SeriesRegistry
from adapter.promadapter.restmapper import RestMapper
from adapter.promadapter.serving import RuleMetrics
from adapter.sources.direct import DirectSource
from adapter.sources.exporters import StaticExporters
from adapter.sources.nodefeeds import NodeFeeds
from simulation.kubeapi import KubeApiServer
from toolkit.certs import CertificateAuthority
from toolkit.kubeclient import api_client
from toolkit.selfsigned import build_server_ssl_context

WILDCARD = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dinfer"
RULE_METRIC = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/http_requests?labelSelector=app%3Dinfer"
RULE = """
rules:
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  resources: {template: "<<.Resource>>"}
  name: {matches: "^(.*)_total"}
  metricsQuery: sum by (<<.GroupBy>>) (irate(<<.Series>>{<<.LabelMatchers>>}[1m]))
"""


class _Prometheus:
    """A Prometheus HTTP API answering the rule's calls: one series, every pod at 3 requests a second."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def series(self, selector: str, start: float) -> list[SeriesName]:
        return [SeriesName("http_requests_total", frozenset({"namespace", "pod"}))]

    async def query(self, expr: str, at: float) -> Answer:
        pods = ("infer-a", "infer-b", "infer-pending")
        return Answer("vector", tuple(Sample({"pod": pod}, at, 3.0 if "irate" in expr else at - 1) for pod in pods))


def rule_metrics(pods: Any) -> RuleMetrics:
    config = parse_prom_adapter_config(load_document(RULE, "rules"), "rules")
    mapper = RestMapper()
    discovery = RuleDiscovery(
        _Prometheus(),  # type: ignore[arg-type]
        SeriesRegistry(mapper),
        namers_from_config(config.rules, mapper),
        ExternalSeriesRegistry(),
        [],
        interval=3600,
        max_age=600,
    )
    return RuleMetrics(discovery, mapper, pods)


class Cluster(Protocol):
    """The `cluster` fixture of this folder's conftest: the test API server, the pod cache, simulated nodes."""

    kube: KubeApiServer
    pods: PodCache

    def locator(self) -> StaticExporters: ...


@dataclass
class Served:
    url: str
    cert_dir: Path
    proxy: tuple[Path, Path]
    reviews: list[Mapping[str, Any]]

    async def get(
        self, path: str, *, cert: tuple[Path, Path] | None = None, headers: Mapping[str, str] | None = None
    ) -> tuple[int, Any]:
        context = ssl.create_default_context(cafile=self.cert_dir / "apiserver.crt")
        if cert is not None:
            context.load_cert_chain(*cert)
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url + path, ssl=context, headers=headers) as response,
        ):
            text = await response.text()
            return response.status, json.loads(text) if text.startswith("{") else text


@pytest.fixture
async def served(cluster: Cluster, tmp_path: Path) -> AsyncIterator[Served]:
    front_proxy_ca = CertificateAuthority.create("front-proxy-ca")
    client_ca = CertificateAuthority.create("kubernetes-ca")
    proxy = (tmp_path / "proxy.crt", tmp_path / "proxy.key")
    front_proxy_ca.issue_client("front-proxy-client").write(*proxy)
    cluster.kube.set_authentication_configmap(
        {
            "client-ca-file": client_ca.cert_pem.decode(),
            "requestheader-client-ca-file": front_proxy_ca.cert_pem.decode(),
            "requestheader-allowed-names": '["front-proxy-client"]',
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
        }
    )
    reviews: list[Mapping[str, Any]] = []

    def policy(spec: Mapping[str, Any]) -> bool:
        reviews.append(spec)
        return spec.get("user") != "mallory"

    cluster.kube.set_authorization(policy)
    client = api_client(base_url=cluster.kube.url)
    auth_config = await load_authentication_config(client, AuthenticationFlags())
    context = build_server_ssl_context(None, None, tmp_path / "serving", (), client_ca_data=auth_config.ca_bundles())
    metrics = AdapterMetrics("direct")
    app = build_app(
        config=default_metrics_config(),
        pods=cluster.pods,
        source=DirectSource(cluster.locator(), NodeFeeds(timeout=1.0), max_age=None),
        metrics=metrics,
        auth=auth_middleware(
            DelegatingAuthenticator.from_config(auth_config, TokenReviewer(client)),
            SubjectAccessReviewer(client),
            resource_attributes,
        ),
        rules=rule_metrics(cluster.pods),
    )
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        yield Served(
            f"https://127.0.0.1:{runner.addresses[0][1]}",
            tmp_path / "serving",
            proxy,
            reviews,
        )
    finally:
        await runner.cleanup()


async def test_the_aggregator_reaches_the_metrics_for_a_user(served: Served) -> None:
    status, body = await served.get(
        WILDCARD,
        cert=served.proxy,
        headers={"X-Remote-User": "system:serviceaccount:kube-system:horizontal-pod-autoscaler"},
    )
    assert status == 200, body
    assert body["kind"] == "MetricValueList"
    assert sorted(item["describedObject"]["name"] for item in body["items"]) == ["infer-a", "infer-b"]
    spec = served.reviews[-1]
    assert spec["user"] == "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
    assert spec["resourceAttributes"]["group"] == "custom.metrics.k8s.io"
    assert spec["resourceAttributes"]["resource"] == "pods"
    assert spec["resourceAttributes"]["subresource"] == "gpu_utilization"
    assert spec["resourceAttributes"]["namespace"] == "ml"


async def test_the_adapter_refuses_strangers_and_the_denied(served: Served) -> None:
    status, body = await served.get(
        WILDCARD, headers={"X-Remote-User": "alice"}
    )  # headers without the proxy's certificate
    assert (status, body["reason"]) == (401, "Unauthorized")
    status, body = await served.get(WILDCARD, cert=served.proxy, headers={"X-Remote-User": "mallory"})
    assert (status, body["reason"]) == (403, "Forbidden")
    assert 'User "mallory" cannot get resource "pods/gpu_utilization"' in body["message"]
    # a metric of prometheus-adapter's rules is authorized as prometheus-adapter's is: the same resource attributes
    status, body = await served.get(RULE_METRIC, cert=served.proxy, headers={"X-Remote-User": "mallory"})
    assert (status, body["reason"]) == (403, "Forbidden")
    assert 'User "mallory" cannot get resource "pods/http_requests"' in body["message"]
    status, body = await served.get(RULE_METRIC, cert=served.proxy, headers={"X-Remote-User": "hpa"})
    assert status == 200, body
    assert [item["value"] for item in body["items"]] == ["3", "3", "3"]
    assert await served.get("/healthz") == (200, "ok")
