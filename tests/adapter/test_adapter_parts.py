"""The adapter as `gpu-pulse-adapter` assembles it: its parts built from settings (adapter/parts.py), then the aiohttp
application over those parts (adapter/application.py). Every part registers its own self-metrics as it is built."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from adapter.application import serving_app
from adapter.parts import build_parts
from adapter.self_metric_families import self_metric_families
from adapter.settings import load_settings
from simulation.kubeconfig import write_kubeconfig
from tests.adapter.simcluster import Cluster
from tests.support.waiting import eventually

# every self-metric family, by the part that serves it, with its type (the names and types dashboards and alerts read)
SELF_METRICS = {
    # adapter/api/selfmetrics.py, adapter/api/stalls.py
    "gpu_pulse_adapter_request_duration_seconds": "histogram",
    "gpu_pulse_adapter_source_duration_seconds": "histogram",
    "gpu_pulse_adapter_served_figure_age_seconds": "histogram",
    "gpu_pulse_adapter_served_values": "counter",
    "gpu_pulse_adapter_build_info": "gauge",
    "gpu_pulse_adapter_event_loop_lag_seconds": "histogram",
    "gpu_pulse_adapter_gc_pause_seconds": "histogram",
    "gpu_pulse_adapter_http_connections": "gauge",
    "gpu_pulse_adapter_http_connections_max": "gauge",
    "gpu_pulse_adapter_http_connections_accepted": "counter",
    "gpu_pulse_adapter_http_connections_closed": "counter",
    # the pod cache, the direct source's feeds
    "gpu_pulse_adapter_pod_cache_pods": "gauge",
    "gpu_pulse_adapter_pod_cache_synced": "gauge",
    "gpu_pulse_adapter_node_documents": "gauge",
    "gpu_pulse_adapter_node_documents_received": "counter",
    "gpu_pulse_adapter_exporter_requests": "counter",
    "gpu_pulse_adapter_saturation_driving_pods": "gauge",
    # authentication: the token reviewer and the trust reloader
    "gpu_pulse_adapter_authentication_errors": "counter",
    "gpu_pulse_adapter_trust_reload_errors": "counter",
    # KEDA's external scaler
    "gpu_pulse_adapter_keda_call_duration_seconds": "histogram",
    "gpu_pulse_adapter_keda_activity_changes": "counter",
    "gpu_pulse_adapter_keda_streams": "gauge",
    "gpu_pulse_adapter_keda_workloads": "gauge",
    "gpu_pulse_adapter_keda_calls_waiting": "gauge",
    "gpu_pulse_adapter_keda_calls_ended": "counter",
    "gpu_pulse_adapter_keda_connections": "gauge",
    "gpu_pulse_adapter_keda_connections_closed": "counter",
}
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


async def test_the_served_application_is_built_from_the_parts(
    cluster: Cluster,
    tmp_path: Path,
    aiohttp_client: Callable[..., Awaitable[TestClient]],  # type: ignore[type-arg]
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server=cluster.kube.url)
    endpoints = ",".join(f"{name}={node.url}" for name, node in cluster.nodes.items())
    argv = [
        f"--kubeconfig={kubeconfig}",
        f"--cert-dir={tmp_path / 'certs'}",
        f"--exporter-endpoints={endpoints}",
        "--keda-listen=127.0.0.1:0",
    ]
    parts = await build_parts(load_settings(argv, {}))
    try:
        # the KEDA port's connections are taken from --max-connections: the HTTP port keeps the rest
        assert parts.connections.limits.max_connections == 512 - 64
        registered = {f.name: f.type for f in parts.metrics.registry.collect()}
        assert {n: t for n, t in registered.items() if not n.startswith("process_")} == SELF_METRICS
        # what rules and dashboards are held to (rules/inventory.py) is what a built adapter registers
        assert {f.name: f.type for f in self_metric_families().collect()} == registered
        client = await aiohttp_client(serving_app(parts))  # /metrics is served without credentials by default

        async def pods_cached() -> float:
            response = await client.get("/metrics", headers={"Accept": PROMETHEUS_ACCEPT})
            assert response.headers["Content-Type"] == "application/openmetrics-text; version=1.0.0; charset=utf-8"
            families = {f.name: f for f in parse_openmetrics(await response.text())}
            return families["gpu_pulse_adapter_pod_cache_pods"].samples[0].value

        await eventually(lambda: parts.pods.synced, "the pod cache synced")
        assert await pods_cached() == 6, "read from the adapter's own pod cache at scrape time"
    finally:
        parts.api.close()  # type: ignore[no-untyped-call]


PROMETHEUS_ADAPTER_CONFIG = """
rules:
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  resources: {template: <<.Resource>>}
  name: {matches: ^(.*)_total$}
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[5m])) by (<<.GroupBy>>)
  # a label naming a custom resource: not served, and said
- seriesQuery: '{__name__="rollout_steps"}'
  resources: {overrides: {rollout: {group: argoproj.io, resource: rollout}}}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
resourceRules:
  cpu: {containerQuery: x, nodeQuery: y, containerLabel: container}
"""


async def test_prometheus_adapter_configuration_is_served_beside_the_gpu_metrics(
    cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server=cluster.kube.url)
    config = tmp_path / "config.yaml"
    config.write_text(PROMETHEUS_ADAPTER_CONFIG)
    argv = [
        f"--kubeconfig={kubeconfig}",
        f"--cert-dir={tmp_path / 'certs'}",
        f"--config={config}",
        "--prometheus-url=http://127.0.0.1:9",
        "--metrics-relist-interval=1m",
    ]
    parts = await build_parts(load_settings(argv, {}))
    try:
        assert parts.rules is not None
        assert parts.config.custom("gpu_utilization") is not None  # the shipped GPU metrics, beside the rules
        registered = {f.name for f in parts.metrics.registry.collect()}
        assert {
            "gpu_pulse_adapter_rules_relists",
            "gpu_pulse_adapter_rules_metrics",
            "gpu_pulse_adapter_rules_last_relist_timestamp_seconds",
        } <= registered
        said = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
        assert "not served by gpu-pulse: resourceRules (metrics.k8s.io" in said
        assert "rules[1].resources.overrides.rollout (rollout.argoproj.io)" in said
    finally:
        parts.api.close()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(
    ("text", "flags", "problem"),
    [
        ("rules: [{seriesQuery: x, name: {matches: '^(a)(b)$'}}]", ["--prometheus-url=http://p:9090"],
         r"--config .*config.yaml: rules\[0\]\.name\.as: must specify an 'as' value"),
        ("rules: []", [], r"is prometheus-adapter's configuration: it needs --prometheus-url"),
        ("rules: [{seriesQuery: x}]\nmetrics: []", ["--prometheus-url=http://p:9090"],
         "mixes gpu-pulse's keys .* with prometheus-adapter's"),
    ],
)  # fmt: skip
async def test_a_configuration_that_cannot_be_served_is_one_line(
    tmp_path: Path, text: str, flags: list[str], problem: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    with pytest.raises(ValueError, match=problem) as caught:
        await build_parts(load_settings([f"--config={config}", *flags], {}))
    assert "\n" not in str(caught.value)
