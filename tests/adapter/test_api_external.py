"""external.metrics.k8s.io/v1beta1: one value over the GPUs of the pods a label selector picks in a namespace."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from adapter.quantity import parse_quantity
from tests.adapter.simcluster import AdapterFactory

EXT = "/apis/external.metrics.k8s.io/v1beta1"


async def get(client: Any, path: str, status: int = 200) -> dict[str, Any]:
    response = await client.get(path)
    body = await response.json()
    assert response.status == status, body
    return body  # type: ignore[no-any-return]


async def test_namespace_mean_over_the_selected_pods_gpus(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    body = await get(client, f"{EXT}/namespaces/ml/namespace_gpu_utilization?labelSelector=app%3Dinfer")
    assert body["kind"] == "ExternalMetricValueList"
    assert body["apiVersion"] == "external.metrics.k8s.io/v1beta1"
    assert body["metadata"] == {}
    [item] = body["items"]
    assert set(item) == {"metricName", "metricLabels", "timestamp", "window", "value"}
    assert item["metricName"] == "namespace_gpu_utilization"
    assert item["metricLabels"] == {"app": "infer"}
    assert parse_quantity(item["value"]) == Decimal("60.167")  # (80 + 40 + 60.5) / 3, to the milli-unit
    assert item["window"] == 30


async def test_without_selector_the_whole_namespace_counts(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    body = await get(client, f"{EXT}/namespaces/ml/namespace_gpu_utilization")
    assert parse_quantity(body["items"][0]["value"]) == Decimal("67.625")
    assert body["items"][0]["metricLabels"] == {}


async def test_nothing_selected_is_an_empty_list(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    body = await get(client, f"{EXT}/namespaces/ml/namespace_gpu_utilization?labelSelector=app%3Dweb")
    assert body["items"] == []


async def test_external_errors(make_adapter: AdapterFactory) -> None:
    client = await make_adapter()
    body = await get(client, f"{EXT}/namespaces/ml/gpu_utilization", status=404)  # a custom metric, not external
    assert body["reason"] == "NotFound"
    body = await get(client, f"{EXT}/namespaces/ml/namespace_gpu_utilization?labelSelector=%21", status=400)
    assert "labelSelector" in body["message"]
    body = await get(client, f"{EXT}/namespaces/ml", status=400)
    assert body["reason"] == "BadRequest"
    await get(client, f"{EXT}/namespaces/ml/a/b", status=404)
    await get(client, "/apis/external.metrics.k8s.io/v1beta2/namespaces/ml/namespace_gpu_utilization", status=404)
