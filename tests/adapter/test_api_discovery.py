"""Discovery, OpenAPI, health and the adapter's own /metrics."""

from __future__ import annotations

from typing import Any

import pytest
from openapi_spec_validator import validate
from prometheus_client.parser import text_string_to_metric_families

from adapter.metrics_config import default_metrics_config, parse_metrics_config
from tests.adapter.simcluster import AdapterFactory
from toolkit.process import PROCESS_SERIES

V2 = "/apis/custom.metrics.k8s.io/v1beta2"


async def get_json(client: Any, path: str, status: int = 200) -> dict[str, Any]:
    response = await client.get(path)
    body = await response.json()
    assert response.status == status, body
    return body  # type: ignore[no-any-return]


async def test_group_list_prefers_v1beta2(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    body = await get_json(client, "/apis")
    assert body["kind"] == "APIGroupList"
    groups = {g["name"]: g for g in body["groups"]}
    custom = groups["custom.metrics.k8s.io"]
    assert [v["version"] for v in custom["versions"]] == ["v1beta2", "v1beta1"]
    assert custom["preferredVersion"] == {"groupVersion": "custom.metrics.k8s.io/v1beta2", "version": "v1beta2"}
    assert groups["external.metrics.k8s.io"]["preferredVersion"]["version"] == "v1beta1"
    group = await get_json(client, "/apis/custom.metrics.k8s.io")
    assert group["kind"] == "APIGroup"
    assert group["name"] == "custom.metrics.k8s.io"
    await get_json(client, "/apis/apps", status=404)


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
async def test_resource_list_names_every_metric_for_every_described_resource(
    make_adapter: AdapterFactory, version: str
) -> None:
    client = await make_adapter()
    body = await get_json(client, f"/apis/custom.metrics.k8s.io/{version}")
    assert body["kind"] == "APIResourceList"
    assert body["groupVersion"] == f"custom.metrics.k8s.io/{version}"
    resources = {r["name"]: r for r in body["resources"]}
    for metric in ("gpu_utilization", "gpu_memory_used_bytes", "gpu_memory_utilization", "gpu_power_watts"):
        assert resources[f"pods/{metric}"] == {
            "name": f"pods/{metric}",
            "singularName": "",
            "namespaced": True,
            "kind": "MetricValueList",
            "verbs": ["get"],
        }
        assert resources[f"namespaces/{metric}"]["namespaced"] is False
        assert resources[f"nodes/{metric}"]["namespaced"] is False
        assert resources[f"deployments.apps/{metric}"]["namespaced"] is True
        assert resources[f"statefulsets.apps/{metric}"]["namespaced"] is True
    assert len(resources) == len(default_metrics_config().metrics) * 5
    assert "deployments.apps/inference_queued_requests" in resources


async def test_external_resource_list(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    body = await get_json(client, "/apis/external.metrics.k8s.io/v1beta1")
    assert body["resources"] == [
        {
            "name": name,
            "singularName": "",
            "namespaced": True,
            "kind": "ExternalMetricValueList",
            "verbs": ["get"],
        }
        for name in [m.name for m in default_metrics_config().external]
    ]
    assert body["resources"][0]["name"] == "namespace_gpu_utilization"
    await get_json(client, "/apis/external.metrics.k8s.io/v1beta2", status=404)


async def test_discovery_follows_the_configured_metrics(make_adapter: AdapterFactory) -> None:
    config = parse_metrics_config("metrics: [{name: hot_gpus, figure: utilization_percent, combine: max}]")
    client = await make_adapter(config=config)
    body = await get_json(client, V2)
    assert {r["name"] for r in body["resources"]} == {
        f"{resource}/hot_gpus" for resource in ("pods", "namespaces", "nodes", "deployments.apps", "statefulsets.apps")
    }
    body = await get_json(client, f"{V2}/namespaces/ml/pods/infer-b/hot_gpus")
    assert body["items"][0]["value"] == "60500m"
    await get_json(client, f"{V2}/namespaces/ml/pods/infer-b/gpu_utilization", status=404)
    assert (await get_json(client, "/apis/external.metrics.k8s.io/v1beta1"))["resources"] == []


async def test_openapi_documents_are_valid_and_describe_the_types(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    v2 = await get_json(client, "/openapi/v2")
    validate(v2)
    assert "io.k8s.metrics.pkg.apis.custom_metrics.v1beta2.MetricValueList" in v2["definitions"]
    assert "io.k8s.metrics.pkg.apis.custom_metrics.v1beta1.MetricValue" in v2["definitions"]
    assert "io.k8s.metrics.pkg.apis.external_metrics.v1beta1.ExternalMetricValueList" in v2["definitions"]
    assert "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/{resource}/{name}/{metric}" in v2["paths"]
    index = await get_json(client, "/openapi/v3")
    assert set(index["paths"]) == {
        "apis/custom.metrics.k8s.io/v1beta1",
        "apis/custom.metrics.k8s.io/v1beta2",
        "apis/external.metrics.k8s.io/v1beta1",
    }
    for entry in index["paths"].values():
        url = entry["serverRelativeURL"]
        response = await client.get(url)
        document = await response.json()
        validate(document)
        assert document["openapi"].startswith("3.")
        assert response.headers["Cache-Control"] == "public, immutable"  # the hash pins this version
        again = await client.get(url, headers={"If-None-Match": response.headers["ETag"]})
        assert again.status == 304
    v1beta2 = await get_json(client, "/openapi/v3/apis/custom.metrics.k8s.io/v1beta2")
    value = v1beta2["components"]["schemas"]["io.k8s.metrics.pkg.apis.custom_metrics.v1beta2.MetricValue"]
    assert set(value["properties"]) == {"describedObject", "metric", "timestamp", "windowSeconds", "value"}
    await get_json(client, "/openapi/v3/apis/apps/v1", status=404)


async def test_health_endpoints(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    for path in ("/healthz", "/livez", "/readyz"):
        response = await client.get(path)
        assert response.status == 200
        assert await response.text() == "ok"
    response = await client.get("/readyz?verbose")
    assert "[+]pod-cache ok" in await response.text()


async def test_self_metrics(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    await client.get(f"{V2}/namespaces/ml/pods/*/gpu_utilization")
    await client.get(f"{V2}/namespaces/ml/pods/*/nope")
    await client.get("/apis/made.up/v1/x/y/z")
    response = await client.get("/metrics")
    assert response.status == 200
    families = {f.name: f for f in text_string_to_metric_families(await response.text())}
    process = {name for name in families if name.startswith("process_")}
    assert all(name.startswith("gpu_pulse_adapter_") for name in families.keys() - process)
    # prometheus-client's process collector: the same six series the exporter serves (toolkit.process)
    assert process == {name.removesuffix("_total") for name in PROCESS_SERIES}
    assert families["process_resident_memory_bytes"].samples[0].value > 1_000_000
    assert 0 < families["process_open_fds"].samples[0].value <= families["process_max_fds"].samples[0].value
    requests = families["gpu_pulse_adapter_request_duration_seconds"]
    counts = {
        (s.labels["group"], s.labels["version"], s.labels["code"]): s.value
        for s in requests.samples
        if s.name.endswith("_count")
    }
    assert counts[("custom.metrics.k8s.io", "v1beta2", "200")] == 1
    assert counts[("custom.metrics.k8s.io", "v1beta2", "404")] == 1
    assert counts[("other", "other", "404")] == 1  # unknown groups do not make new label values
    assert families["gpu_pulse_adapter_pod_cache_pods"].samples[0].value == 6
    assert families["gpu_pulse_adapter_pod_cache_synced"].samples[0].value == 1
    assert families["gpu_pulse_adapter_node_documents"].samples[0].value == 2
    assert families["gpu_pulse_adapter_node_documents_received"].samples[0].value >= 2, "a document from each node"
    assert families["gpu_pulse_adapter_exporter_requests"].samples[0].value >= 2, "a stream to each node"
    source = families["gpu_pulse_adapter_source_duration_seconds"]
    assert any(s.labels == {"source": "direct", "outcome": "ok"} and s.name.endswith("_count") for s in source.samples)
    ages = families["gpu_pulse_adapter_served_figure_age_seconds"]
    age_count = [s for s in ages.samples if s.name.endswith("_count") and s.labels["group"] == "custom.metrics.k8s.io"]
    assert age_count[0].value == 1  # one observation per answer: its oldest figure
    served = families["gpu_pulse_adapter_served_values"]
    assert [s.value for s in served.samples if s.name.endswith("_total")] == [3]


def test_default_config_is_valid_and_complete() -> None:
    config = default_metrics_config()
    inference = [
        "inference_queued_requests",
        "inference_running_requests",
        "inference_kv_cache_utilization",
        "inference_time_to_first_token_seconds",
        "inference_inter_token_latency_seconds",
        "inference_generated_tokens_per_second",
        "inference_saturation",
    ]
    assert [m.name for m in config.metrics] == [
        "gpu_utilization",
        "gpu_memory_used_bytes",
        "gpu_memory_utilization",
        "gpu_power_watts",
        *inference,
    ]
    assert [m.name for m in config.external] == ["namespace_gpu_utilization", *inference]
    assert config.without_prometheus_queries() == []
