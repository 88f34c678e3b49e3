"""custom.metrics.k8s.io v1beta1 and v1beta2: every path form, the exact bodies, and errors as Status objects."""

from __future__ import annotations

import asyncio
import json
import re
from decimal import Decimal
from typing import Any

import pytest

from adapter.podcache.cache import PodCache
from adapter.quantity import parse_quantity
from tests.adapter.simcluster import AdapterFactory, Cluster
from toolkit.kubeclient import api_client

V2 = "/apis/custom.metrics.k8s.io/v1beta2"
V1 = "/apis/custom.metrics.k8s.io/v1beta1"
RFC3339_SECONDS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


async def get(client: Any, path: str, status: int = 200) -> dict[str, Any]:
    response = await client.get(path)
    body = await response.json()
    assert response.status == status, body
    assert response.headers["Content-Type"].startswith("application/json")
    return body  # type: ignore[no-any-return]


def values(body: dict[str, Any]) -> dict[str, Decimal]:
    return {item["describedObject"]["name"]: parse_quantity(item["value"]) for item in body["items"]}


async def test_hpa_query_v1beta2_lists_the_selected_pods_with_exact_values(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    body = await get(client, f"{V2}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dinfer")
    assert body["kind"] == "MetricValueList"
    assert body["apiVersion"] == "custom.metrics.k8s.io/v1beta2"
    assert body["metadata"] == {}
    # infer-pending has no node and so no figures; infer-b is the mean of its two GPUs
    assert values(body) == {"infer-a": Decimal(80), "infer-b": Decimal("50.25")}
    item = body["items"][0]
    assert set(item) == {"describedObject", "metric", "timestamp", "windowSeconds", "value"}
    assert item["describedObject"] == {"kind": "Pod", "namespace": "ml", "name": "infer-a", "apiVersion": "/v1"}
    assert item["metric"] == {"name": "gpu_utilization", "selector": None}
    assert item["value"] == "80"
    assert body["items"][1]["value"] == "50250m"
    assert item["windowSeconds"] == 30
    assert RFC3339_SECONDS.match(item["timestamp"])


async def test_v1beta1_item_shape(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    body = await get(client, f"{V1}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dinfer")
    assert body["apiVersion"] == "custom.metrics.k8s.io/v1beta1"
    item = body["items"][0]
    assert set(item) == {"describedObject", "metricName", "timestamp", "window", "value", "selector"}
    assert item["metricName"] == "gpu_utilization"
    assert item["selector"] is None
    assert item["window"] == 30
    assert values(body) == {"infer-a": Decimal(80), "infer-b": Decimal("50.25")}


@pytest.mark.parametrize("star", ["*", "%2A", "%2a"])
async def test_wildcard_may_arrive_percent_encoded(make_adapter: AdapterFactory, star: str) -> None:
    client = await make_adapter()
    body = await get(client, f"{V2}/namespaces/ml/pods/{star}/gpu_utilization")
    assert values(body) == {"infer-a": Decimal(80), "infer-b": Decimal("50.25"), "train-0": Decimal(90)}


async def test_named_pod_returns_exactly_one_item(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    for version in (V1, V2):
        body = await get(client, f"{version}/namespaces/ml/pods/infer-b/gpu_memory_used_bytes")
        assert values(body) == {"infer-b": Decimal(44 * 2**30)}  # summed over its GPUs


async def test_named_pod_without_figures_or_unknown_is_not_found(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    for name in ("web-0", "infer-pending", "no-such-pod"):
        body = await get(client, f"{V2}/namespaces/ml/pods/{name}/gpu_utilization", status=404)
        assert body["kind"] == "Status"
        assert body["reason"] == "NotFound"
        assert body["code"] == 404
        assert name in body["message"]


async def test_named_pod_not_matching_the_label_selector_is_not_found(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    await get(client, f"{V2}/namespaces/ml/pods/train-0/gpu_utilization?labelSelector=app%3Dinfer", status=404)


async def test_empty_selection_is_an_empty_list(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    body = await get(client, f"{V2}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dnothing")
    assert body["items"] == []
    body = await get(client, f"{V2}/namespaces/empty-namespace/pods/*/gpu_utilization")
    assert body["items"] == []


async def test_every_default_metric(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    expected = {
        "gpu_utilization": {"infer-a": Decimal(80), "infer-b": Decimal("50.25"), "train-0": Decimal(90)},
        "gpu_memory_used_bytes": {
            "infer-a": Decimal(20 * 2**30),
            "infer-b": Decimal(44 * 2**30),
            "train-0": Decimal(10 * 2**30),
        },
        # the fullest GPU, percent: infer-b's second GPU holds 40 of 80 GiB
        "gpu_memory_utilization": {"infer-a": Decimal(25), "infer-b": Decimal(50), "train-0": Decimal("12.5")},
        "gpu_power_watts": {"infer-a": Decimal("250.5"), "infer-b": Decimal("250.25"), "train-0": Decimal(300)},
    }
    for metric, want in expected.items():
        body = await get(client, f"{V2}/namespaces/ml/pods/*/{metric}")
        assert values(body) == want, metric


async def test_metric_label_selector_filters_devices_and_is_echoed(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    body = await get(client, f"{V2}/namespaces/ml/pods/infer-b/gpu_utilization?metricLabelSelector=gpu%3D1")
    assert values(body) == {"infer-b": Decimal("60.5")}
    assert body["items"][0]["metric"]["selector"] == {"matchLabels": {"gpu": "1"}}
    body = await get(client, f"{V1}/namespaces/ml/pods/*/gpu_utilization?metricLabelSelector=share%21%3Dexclusive")
    assert body["items"] == []


async def test_deployment_and_statefulset_aggregate_their_pods(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    body = await get(client, f"{V2}/namespaces/ml/deployments.apps/infer/gpu_utilization")
    assert body["items"][0]["describedObject"] == {
        "kind": "Deployment",
        "namespace": "ml",
        "name": "infer",
        "apiVersion": "apps/v1",
    }
    # the mean over the Deployment's three GPUs: (80 + 40 + 60.5) / 3
    # served to the milli-unit the HPA reads, rounded half up: 60.1666... -> 60167m
    assert values(body) == {"infer": parse_quantity("60167m")}
    body = await get(client, f"{V1}/namespaces/ml/statefulsets.apps/*/gpu_power_watts")
    assert body["items"][0]["describedObject"]["kind"] == "StatefulSet"
    assert values(body) == {"train": Decimal(300)}
    body = await get(client, f"{V2}/namespaces/ml/deployments.apps/*/gpu_memory_used_bytes")
    assert values(body) == {"infer": Decimal(64 * 2**30)}
    await get(client, f"{V2}/namespaces/ml/deployments.apps/nope/gpu_utilization", status=404)


async def test_namespace_metrics_both_path_forms(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    body = await get(client, f"{V2}/namespaces/ml/metrics/gpu_power_watts")
    assert body["items"][0]["describedObject"] == {"kind": "Namespace", "name": "ml", "apiVersion": "/v1"}
    assert values(body) == {"ml": Decimal("800.75")}
    body = await get(client, f"{V2}/namespaces/other/gpu_utilization")
    assert values(body) == {"other": Decimal(10)}
    body = await get(client, f"{V1}/namespaces/*/gpu_utilization")
    assert values(body) == {"ml": Decimal("67.625"), "other": Decimal(10)}
    await get(client, f"{V2}/namespaces/empty-namespace/metrics/gpu_utilization", status=404)


async def test_nodes_are_cluster_scoped_objects(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    body = await get(client, f"{V2}/nodes/*/gpu_power_watts")
    assert values(body) == {"gpu-1": Decimal("550.5"), "gpu-2": Decimal("250.25")}  # solo has no power figure
    assert body["items"][0]["describedObject"] == {"kind": "Node", "name": "gpu-1", "apiVersion": "/v1"}
    body = await get(client, f"{V1}/nodes/gpu-2/gpu_utilization")
    assert values(body) == {"gpu-2": Decimal("36.833")}  # (40 + 60.5 + 10) / 3, to the milli-unit the HPA reads


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        (f"{V2}/namespaces/ml/pods/*/no_such_metric", 404, "could not find the metric no_such_metric for pods"),
        (f"{V2}/namespaces/ml/widgets/*/gpu_utilization", 404, "could not find the metric gpu_utilization for widgets"),
        (f"{V2}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3D%3D%3D", 400, "labelSelector: invalid label"),
        (f"{V2}/namespaces/ml/pods/*/gpu_utilization?labelSelector=a%20b", 400, "at character 3"),
        (f"{V2}/namespaces/ml/pods/*/gpu_utilization?metricLabelSelector=gpu+in+0", 400, "metricLabelSelector"),
        (f"{V2}/namespaces/ml", 400, "names no metric"),
        (f"{V2}/pods/x", 400, "names no metric"),
        (f"{V2}/namespaces/ml/pods/*/gpu_utilization/extra", 404, "could not find the requested resource"),
        (f"{V2}/namespaces/ml/pods//gpu_utilization", 400, "empty path segment"),
        (f"{V2}/pods/*/gpu_utilization", 404, "pods are namespaced"),
        (f"{V2}/namespaces/ml/nodes/*/gpu_utilization", 404, "nodes are not namespaced"),
        (f"{V2}/namespaces/ml/deployments.apps/*/gpu_utilization?labelSelector=a%3Db", 400, "only for pods"),
        ("/apis/custom.metrics.k8s.io/v2/namespaces/ml/pods/*/gpu_utilization", 404, "not served"),
        ("/nothing/here", 404, "could not find the requested resource"),
    ],
)
async def test_errors_are_status_objects(make_adapter: AdapterFactory, path: str, status: int, words: str) -> None:
    client = await make_adapter()
    body = await get(client, path, status=status)
    assert body["kind"] == "Status"
    assert body["apiVersion"] == "v1"
    assert body["status"] == "Failure"
    assert body["code"] == status
    assert body["reason"] == {400: "BadRequest", 404: "NotFound"}[status]
    assert words in body["message"]


async def test_other_methods_are_refused_as_status(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    response = await client.post(f"{V2}/namespaces/ml/pods/*/gpu_utilization")
    body = await response.json()
    assert response.status == 405
    assert body["reason"] == "MethodNotAllowed"


async def test_source_down_is_service_unavailable(make_adapter: AdapterFactory, cluster: Cluster) -> None:
    client = await make_adapter()
    for node in cluster.nodes.values():
        await node.stop()
    body = await get(client, f"{V2}/namespaces/ml/pods/*/gpu_utilization", status=503)
    assert body["reason"] == "ServiceUnavailable"
    assert "no exporter answered" in body["message"]


async def test_pod_cache_not_synced_is_service_unavailable(make_adapter: AdapterFactory, cluster: Cluster) -> None:
    never_started = PodCache(api_client(base_url=cluster.kube.url))
    client = await make_adapter(pods=never_started)
    body = await get(client, f"{V2}/namespaces/ml/pods/*/gpu_utilization", status=503)
    assert "has not synced" in body["message"]
    # discovery answers all the same: the aggregator probes it
    await get(client, V2)


async def raw_get(client: Any, raw_path: str) -> tuple[int, dict[str, Any]]:
    """GET a path exactly as written (no client-side normalization of its percent-encoding)."""
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    writer.write(f"GET {raw_path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


async def test_a_percent_encoded_group_is_the_same_api(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    plain = await get(client, f"{V2}/namespaces/ml/pods/*/gpu_utilization")
    status, encoded = await raw_get(
        client, "/apis/%63ustom.metrics.k8s.io/v1beta2/namespaces/ml/pods/%2A/gpu_utilization"
    )
    assert status == 200, encoded
    assert values(encoded) == values(plain)
    status, body = await raw_get(client, "/apis/custom.metrics.k8s.io%2Fv1beta2/namespaces/ml/pods/*/gpu_utilization")
    assert status == 404 and body["kind"] == "Status"
