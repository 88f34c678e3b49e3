"""A node's answer and the figures worked out from it hold nothing the garbage collector walks, but a few containers,
whatever the document's size, and from the moment they are made: at a thousand documents a second, tracked objects per
pod lived into the oldest generation and made every full collection longer (adapter/sources/metricsource.py,
ServedValue), and, untracked only by a collection, filled the young generation until a young pass walked them all
(adapter/sources/nodeanswer.py; docs/decisions/2026-11-28-adapter-hot-path.md)."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial

from adapter.metrics_config import MetricDefinition, default_metrics_config
from adapter.sources.figureindex import PodFigureIndex
from adapter.sources.metricsource import ListedValue, ServedValue
from adapter.sources.nodeanswer import NodeAnswer
from toolkit.pods_contract import parse_node_pods

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


def test_a_pods_figures_are_never_tracked() -> None:
    assert not gc.is_tracked(ListedValue(ServedValue(Decimal("42.5"), 1.0, 60), "uid"))


def _young_added_by(make: Callable[[], object]) -> tuple[object, int]:
    """What `make` returns, and how many tracked objects the young generation holds more after it, no collection
    having run meanwhile."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        before = len(gc.get_objects(0))
        made = make()
        return made, len(gc.get_objects(0)) - before
    finally:
        if enabled:
            gc.enable()


def _answer(body: bytes, wanted: dict[str, MetricDefinition]) -> NodeAnswer:
    return NodeAnswer(parse_node_pods(body), body, parse_node_pods, worked_out=wanted.values())


def test_an_answer_adds_the_same_few_tracked_objects_whatever_its_pods() -> None:
    config = default_metrics_config()
    metrics = {m.name: m for m in config.metrics}
    added: list[int] = []
    for pods in (10, 100, 1000):
        body, wanted = _document(pods), dict(metrics)
        answer, young = _young_added_by(partial(_answer, body, wanted))
        assert isinstance(answer, NodeAnswer)
        assert sum(len(by_name) for by_name in answer.values(metrics["gpu_utilization"]).values()) == pods
        added.append(young)
    assert added[0] == added[1] == added[2]
    assert added[0] <= 2 + len(metrics)  # the answer, its dict of figures, one dict per metric


def test_the_index_entries_of_an_answer_are_not_tracked() -> None:
    metric = default_metrics_config().custom("gpu_utilization")
    assert metric is not None
    body = _document(50)
    answer = NodeAnswer(parse_node_pods(body), body, parse_node_pods, worked_out=(metric,))
    figures = PodFigureIndex()
    figures.serve(metric, [], None, 0.0, lambda _interval: 0.0)  # the metric's first question: indexed from now on
    figures.replace("gpu-1", answer)
    index = figures.entries(metric.name)
    assert index is not None
    gc.collect()  # the keys, tuples of strings, are untracked by their first pass; the entries never were
    assert len(index) == 50
    assert not any(gc.is_tracked(entry) or gc.is_tracked(key) for key, entry in index.items())


def test_an_answer_reads_its_document_again_for_samples_and_new_metrics() -> None:
    config = default_metrics_config()
    utilization, power = config.custom("gpu_utilization"), config.custom("gpu_power_watts")
    assert utilization is not None and power is not None
    body = _document(12)
    document = parse_node_pods(body)
    answer = NodeAnswer(document, body, parse_node_pods, worked_out=(utilization,))
    assert answer.node == "gpu-1" and answer.interval_seconds == 1.0
    assert answer.document() == document
    assert answer.values(power)["team-0"]["p-0"].value.value == Decimal("300.5")
    assert answer.samples(utilization)[("team-1", "p-4")].devices[0].value == Decimal("16.5")
