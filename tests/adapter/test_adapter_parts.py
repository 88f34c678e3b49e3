"""The adapter as `gpu-pulse-adapter` assembles it: its parts built from settings (adapter/parts.py), then the aiohttp
application over those parts (adapter/application.py). Every part registers its own self-metrics as it is built."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

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
