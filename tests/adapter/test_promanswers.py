"""The decoder of Prometheus' instant-vector answers (adapter/sources/promanswers.py), on its own: what a sound answer
holds comes back for the pods asked about, and nothing else an upstream can send makes it raise anything but the
source's two errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.sources.metricsource import SourceError, SourceUnavailableError
from adapter.sources.promanswers import decode_answer

NAMES = st.sampled_from(["a", "b", "c"])
LABELS = st.dictionaries(st.sampled_from(["gpu", "uuid", "container", "x"]), st.text(max_size=5), max_size=3)
SERIES = st.lists(st.tuples(NAMES, NAMES, LABELS, st.text(max_size=6)), max_size=12)


def answer(series: list[tuple[str, str, dict[str, str], str]]) -> bytes:
    result = [
        {"metric": {**labels, "namespace": ns, "pod": pod}, "value": [1.5, value]} for ns, pod, labels, value in series
    ]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


@settings(max_examples=300)
@given(SERIES, st.sets(st.tuples(NAMES, NAMES)))
def test_a_sound_answer_gives_the_series_of_the_pods_asked_about(
    series: list[tuple[str, str, dict[str, str], str]], wanted: set[tuple[str, str]]
) -> None:
    found = decode_answer(answer(series), 200, "q", wanted, max_series=1000, labels=True)
    label_sets: dict[tuple[str, str], list[str]] = {}
    for ns, pod, labels, _ in series:
        label_sets.setdefault((ns, pod), []).append(json.dumps(sorted({**labels, "namespace": ns, "pod": pod}.items())))
    repeated = {key for key, sets in label_sets.items() if len(sets) != len(set(sets))}
    expected = [
        ((ns, pod), {**labels, "namespace": ns, "pod": pod}, value)
        for ns, pod, labels, value in series
        if (ns, pod) in wanted and (ns, pod) not in repeated
    ]
    assert [(s.pod, dict(s.labels or {}), s.value) for s in found] == expected
    # without labels, a label set repeats when its text does (Prometheus writes a series' labels sorted)
    values = decode_answer(answer(series), 200, "q", wanted, max_series=1000, labels=False)
    written: dict[tuple[str, str], list[str]] = {}
    for ns, pod, labels, _ in series:
        written.setdefault((ns, pod), []).append(json.dumps({**labels, "namespace": ns, "pod": pod}))
    repeated_as_written = {key for key, texts in written.items() if len(texts) != len(set(texts))}
    assert all(s.labels is None for s in values)
    assert [(s.pod, s.value) for s in values] == [
        ((ns, pod), value)
        for ns, pod, _, value in series
        if (ns, pod) in wanted and (ns, pod) not in repeated_as_written
    ]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def shaped(data: Any) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": data}}


@settings(max_examples=400)
@given(st.one_of(JSON, JSON.map(shaped), st.lists(JSON, max_size=3).map(shaped)), st.sampled_from([200, 400, 503]))
def test_nothing_an_upstream_sends_raises_anything_else(body: Any, status: int) -> None:
    try:
        decode_answer(json.dumps(body).encode(), status, "q", {("a", "b")}, max_series=1000, labels=True)
    except (SourceError, SourceUnavailableError) as error:
        assert "\n" not in str(error)


@pytest.mark.parametrize("text", [b"", b"not json", b"[" * 100_000, b'{"status":"success","data":' + b"[" * 100_000])
def test_what_is_not_json_is_the_source_unavailable(text: bytes) -> None:
    with pytest.raises(SourceUnavailableError):
        decode_answer(text, 200, "q", set(), max_series=1000, labels=True)
