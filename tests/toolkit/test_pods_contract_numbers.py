"""The /pods reader refuses numbers an autoscaler must never see: non-finite or out-of-range figures, absurd intervals
and windows, zone-less times, pods sampled after their document."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolkit.pods_contract import PodsDocumentError, parse_node_pods


def document(**changes: Any) -> dict[str, Any]:
    device: dict[str, Any] = {
        "uuid": "GPU-1",
        "gpu": 0,
        "gpu_uuid": "GPU-1",
        "model": "NVIDIA H100",
        "share": "exclusive",
        "utilization_percent": 42.5,
        "memory_used_bytes": 1024,
        "memory_total_bytes": 80 * 2**30,
        "power_watts": 300.0,
        "energy_joules": 1e6,
    }
    pod: dict[str, Any] = {
        "namespace": "ml",
        "name": "train-0",
        "containers": [{"name": "main", "devices": [device]}],
        "sampled_at": "2026-11-23T17:00:00Z",
        "window_seconds": 60.0,
    }
    doc: dict[str, Any] = {
        "node": "gpu-1",
        "generated_at": "2026-11-23T17:00:00.5Z",
        "interval_seconds": 1.0,
        "pods": [pod],
    }
    for path, value in changes.items():
        where: Any = doc
        *parents, leaf = path.split("__")
        for part in parents:
            where = where[int(part)] if part.isdigit() else where[part]
        where[leaf] = value
    return doc


def test_a_sound_document_is_read() -> None:
    parsed = parse_node_pods(json.dumps(document()))
    assert parsed.pods[0].containers[0].devices[0].utilization_percent == 42.5


DEVICE = "pods__0__containers__0__devices__0__"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"interval_seconds": 1e308}, "interval_seconds"),
        ({"interval_seconds": 1e-300}, "interval_seconds"),
        ({"pods__0__window_seconds": 1e308}, "window_seconds"),
        ({DEVICE + "utilization_percent": 1e300}, "utilization_percent"),
        ({DEVICE + "utilization_percent": -1e300}, "utilization_percent"),
        ({DEVICE + "utilization_percent": 100.5}, "utilization_percent"),
        ({DEVICE + "memory_used_bytes": -1}, "memory_used_bytes"),
        ({DEVICE + "memory_used_bytes": 10**30}, "memory_used_bytes"),
        ({DEVICE + "power_watts": 1e300}, "power_watts"),
        ({DEVICE + "energy_joules": -5.0}, "energy_joules"),
        ({"pods__0__sampled_at": "2999-01-01T00:00:00Z"}, "after the document's generated_at"),
        ({"generated_at": "2026-11-23T17:00:00"}, "generated_at"),  # no zone: whose clock?
    ],
)
def test_numbers_out_of_range_make_the_document_unusable(change: dict[str, Any], problem: str) -> None:
    with pytest.raises(PodsDocumentError, match=problem):
        parse_node_pods(json.dumps(document(**change)))


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_figures_are_refused(literal: str) -> None:
    text = json.dumps(document()).replace("42.5", literal)  # Python's json writes them; they are not JSON
    with pytest.raises(PodsDocumentError, match="JSON is malformed"):
        parse_node_pods(text)


@pytest.mark.parametrize("number", ["1e400", "-1e400"])
def test_numbers_beyond_a_double_are_refused(number: str) -> None:
    text = json.dumps(document()).replace("42.5", number)
    with pytest.raises(PodsDocumentError, match="utilization_percent"):
        parse_node_pods(text)


def test_a_deeply_nested_body_is_one_line() -> None:
    with pytest.raises(PodsDocumentError) as error:
        parse_node_pods("[" * 100_000 + "]" * 100_000)
    assert "\n" not in str(error.value)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_every_accepted_utilization_is_a_percentage(value: float) -> None:
    text = json.dumps(document(**{DEVICE + "utilization_percent": value}))
    try:
        parsed = parse_node_pods(text)
    except PodsDocumentError:
        return
    served = parsed.pods[0].containers[0].devices[0].utilization_percent
    assert served is not None and 0.0 <= served <= 100.0
