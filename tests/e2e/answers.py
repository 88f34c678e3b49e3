"""Reading the adapters' answers and the exporters' own figures, to compare the two."""

from __future__ import annotations

import calendar
import time
import urllib.parse
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from adapter.quantity import parse_quantity
from tests.e2e.cluster import Workload
from toolkit.pods_contract import NodePods

CUSTOM = "/apis/custom.metrics.k8s.io"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"


@dataclass(frozen=True)
class Served:
    """One item of a MetricValueList."""

    name: str
    value: Decimal
    timestamp: float  # Unix seconds (the wire format has whole seconds)
    window: int | None


def hpa_path(workload: Workload, metric: str = "gpu_utilization", version: str = "v1beta2") -> str:
    """The request the HPA makes for a Pods metric of the workload."""
    selector = urllib.parse.quote(workload.selector, safe="")
    return f"{CUSTOM}/{version}/namespaces/{workload.namespace}/pods/*/{metric}?labelSelector={selector}"


def rfc3339_seconds(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


def served_items(body: dict[str, Any]) -> dict[str, Served]:
    """The items of a v1beta2 or v1beta1 MetricValueList, by described object name."""
    assert body.get("kind") == "MetricValueList", body
    found = {}
    for item in body["items"]:
        window = item.get("windowSeconds", item.get("window"))
        name = item["describedObject"]["name"]
        found[name] = Served(name, parse_quantity(item["value"]), rfc3339_seconds(item["timestamp"]), window)
    return found


def pods_mean_utilization(document: NodePods, namespace: str, pod: str) -> float | None:
    """What the exporter's /pods says of the pod: the mean over its devices' window-averaged utilization."""
    for view in document.pods:
        if (view.namespace, view.name) == (namespace, pod):
            figures = [d.utilization_percent for c in view.containers for d in c.devices]
            known = [f for f in figures if f is not None]
            return sum(known) / len(known) if known else None
    return None
