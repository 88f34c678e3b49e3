"""A node's document and the figures worked out from it hold nothing the garbage collector walks, but the few
containers that hold them: at a thousand documents a second, each tracked object per pod lived into the oldest
generation and made every full collection longer (see adapter/sources/model.py, ServedValue)."""

from __future__ import annotations

import gc
import json
from datetime import UTC, datetime
from decimal import Decimal

from adapter.metrics_config import default_metrics_config
from adapter.sources.model import ServedValue
from adapter.sources.nodepods import NodeAnswer
from exporter.pods_document import parse_node_pods

AT = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC).isoformat().replace("+00:00", "Z")


def _document(pods: int) -> bytes:
    def pod(index: int) -> dict[str, object]:
        device = {
            "uuid": f"GPU-{index % 8}",
            "gpu": index % 8,
            "gpu_uuid": f"GPU-{index % 8}",
            "model": "NVIDIA H100 80GB HBM3",
            "share": "exclusive",
            "sharing_pods": 1,
            "utilization_percent": 12.5 + index % 80,
            "memory_used_bytes": 2**30 + index,
            "memory_total_bytes": 80 * 2**30,
            "power_watts": 300.5,
        }
        containers = [{"name": "main", "devices": [device]}]
        return {
            "namespace": f"team-{index % 3}",
            "name": f"p-{index}",
            "uid": f"u-{index}",
            "containers": containers,
            "sampled_at": AT,
            "window_seconds": 1.0,
        }

    return json.dumps(
        {
            "api_version": "gpu-pulse.dev/v1",
            "node": "gpu-1",
            "generated_at": AT,
            "interval_seconds": 1.0,
            "kubelet_up": True,
            "pods": [pod(i) for i in range(pods)],
        }
    ).encode()


def test_a_served_value_is_never_tracked() -> None:
    assert not gc.is_tracked(ServedValue(Decimal("42.5"), 1.0, 60))


def test_the_figures_of_a_document_leave_a_few_containers_tracked_whatever_its_size() -> None:
    config = default_metrics_config()
    metrics = {m.name: m for m in config.metrics}
    tracked: list[int] = []
    for pods in (10, 100):
        answer = NodeAnswer(parse_node_pods(_document(pods)), dict(metrics), 0.0)
        gc.collect()  # what a collection leaves tracked: the collector untracks exact tuples and dicts of atoms
        reachable = [answer.document, *answer.document.pods]
        for metric in metrics.values():
            for key, figures in answer.values(metric).items():
                reachable.extend((key, figures, *figures))
        tracked.append(sum(gc.is_tracked(thing) for thing in reachable))
        assert all(v is not None for m in metrics.values() for v in answer.values(m).values())
    assert tracked == [0, 0]
