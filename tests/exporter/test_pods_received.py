"""The reader's form of the `/pods` document (msgspec `Received*` structs) is the exporter's model (pydantic): the same
fields, defaults and bounds, the same verdicts, and never kinder. An adapter trusts what it reads to be what the
exporter was able to build."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import annotated_types
import msgspec
import pydantic
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic_core import PydanticUndefined

from exporter.pods_document import (
    MAX_CLAIMED_INTERVAL_SECONDS,
    ContainerView,
    DeviceFigures,
    NodePods,
    PodsDocumentError,
    PodView,
    ReceivedContainer,
    ReceivedDevice,
    ReceivedNodePods,
    ReceivedPod,
    parse_node_pods,
)

PAIRS = [
    (DeviceFigures, ReceivedDevice),
    (ContainerView, ReceivedContainer),
    (PodView, ReceivedPod),
    (NodePods, ReceivedNodePods),
]
BOUND_NAMES = ("ge", "gt", "le", "lt")


def _pydantic_bounds(field: Any) -> dict[str, float]:
    bounds: dict[str, float] = {}
    for item in field.metadata:
        for name in BOUND_NAMES:
            if isinstance(item, getattr(annotated_types, name.capitalize())):
                bounds[name] = float(getattr(item, name))
    return bounds


def _msgspec_bounds(kind: msgspec.inspect.Type) -> dict[str, float]:
    if isinstance(kind, msgspec.inspect.UnionType):
        found = [_msgspec_bounds(t) for t in kind.types if not isinstance(t, msgspec.inspect.NoneType)]
        return found[0] if len(found) == 1 else {}
    return {n: float(v) for n in BOUND_NAMES if (v := getattr(kind, n, None)) is not None}


@pytest.mark.parametrize(("model", "received"), PAIRS, ids=[m.__name__ for m, _ in PAIRS])
def test_the_same_fields_defaults_and_bounds(model: type[pydantic.BaseModel], received: type[msgspec.Struct]) -> None:
    info = msgspec.inspect.type_info(received)
    assert isinstance(info, msgspec.inspect.StructType)
    assert info.forbid_unknown_fields and model.model_config.get("extra") == "forbid"
    assert [f.name for f in info.fields] == list(model.model_fields)
    for field in info.fields:
        theirs = model.model_fields[field.name]
        assert field.required == (theirs.default is PydanticUndefined), field.name
        if not field.required:
            assert field.default == theirs.default, field.name
        assert _msgspec_bounds(field.type) == _pydantic_bounds(theirs), field.name


# ---- the same verdicts ----------------------------------------------------------------------------------------------
AT = "2026-11-23T17:00:00Z"
# values around every bound and of every wrong kind; a field drawn from these replaces a sound one
ODD_VALUES = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            0,
            -1,
            1,
            0.0,
            -0.0,
            1e-300,
            0.05,
            0.049,
            100,
            100.0,
            100.5,
            4096,
            4097,
            3600,
            3600.5,
            86_400,
            86_400.5,
            2**50,
            2**50 + 1,
            10_000,
            10_000.5,
            1e15,
            1.1e15,
            1e300,
            -1e300,
            10**30,
            2**63,
            3.0,
            "",
            "5",
            "1.5",
            "exclusive",
            "mig",
            "bogus",
            AT,
            "2026-11-23T17:00:00",
            "2026-11-23T17:00:00+05:00",
            "2999-01-01T00:00:00Z",
            "not a time",
            1_795_000_000,
            [],
            {},
            [1],
            {"x": 1},
        ]
    ),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(),
    st.text(max_size=8),
)
DEVICE_FIELDS = list(DeviceFigures.model_fields)
POD_FIELDS = list(PodView.model_fields)
NODE_FIELDS = list(NodePods.model_fields)


def _sound() -> dict[str, Any]:
    device = {
        "uuid": "MIG-1",
        "gpu": 3,
        "gpu_uuid": "GPU-1",
        "model": "NVIDIA A100",
        "gpu_instance": 2,
        "mig_profile": "1g.10gb",
        "share": "mig",
        "sharing_pods": 1,
        "utilization_percent": 42.5,
        "memory_used_bytes": 1024,
        "memory_total_bytes": 10 * 2**30,
        "power_watts": 80.5,
        "energy_joules": 1e6,
    }
    pod = {
        "namespace": "ml",
        "name": "train-0",
        "uid": "u-1",
        "containers": [{"name": "main", "devices": [device]}],
        "sampled_at": AT,
        "window_seconds": 60.0,
    }
    return {
        "api_version": "gpu-pulse.dev/v1",
        "node": "gpu-1",
        "generated_at": AT,
        "interval_seconds": 1.0,
        "kubelet_up": True,
        "pods": [pod],
    }


CHANGES = st.lists(
    st.one_of(
        st.tuples(st.just("device"), st.sampled_from(DEVICE_FIELDS), ODD_VALUES),
        st.tuples(st.just("pod"), st.sampled_from(POD_FIELDS), ODD_VALUES),
        st.tuples(st.just("node"), st.sampled_from(NODE_FIELDS), ODD_VALUES),
        st.tuples(st.sampled_from(["device", "pod", "node"]), st.sampled_from(["extra", "Node"]), ODD_VALUES),
        st.tuples(st.sampled_from(["device", "pod", "node"]), st.sampled_from(DEVICE_FIELDS + POD_FIELDS), st.none()),
    ),
    max_size=3,
)


def _changed(changes: list[tuple[str, str, Any]], drop: bool) -> dict[str, Any]:
    document = _sound()
    pod = document["pods"][0]
    places = {"node": document, "pod": pod, "device": pod["containers"][0]["devices"][0]}
    for place, name, value in changes:
        if drop and value is None:
            places[place].pop(name, None)
        else:
            places[place][name] = value
    return document


def _verdict(model: NodePods | None, received: ReceivedNodePods | None) -> None:
    """The reader accepts only what the model accepts, and reads the same values from it."""
    if received is None:
        return
    assert model is not None, "the reader accepted what the exporter's model refuses"
    assert msgspec.convert(model.model_dump(), ReceivedNodePods) == received


@settings(max_examples=400)
@given(CHANGES, st.booleans())
@example([("device", "utilization_percent", 100.5)], False)
@example([("pod", "sampled_at", "2999-01-01T00:00:00Z")], False)
@example([("node", "generated_at", "2026-11-23T17:00:00")], False)
@example([("device", "gpu", 3.0)], False)
@example([("device", "gpu", "5")], False)
@example([("node", "generated_at", 1_795_000_000)], False)
@example([], False)
def test_the_reader_is_never_kinder_than_the_model(changes: list[tuple[str, str, Any]], drop: bool) -> None:
    text = json.dumps(_changed(changes, drop))
    try:
        model: NodePods | None = NodePods.model_validate_json(text)
    except pydantic.ValidationError:
        model = None
    try:
        received: ReceivedNodePods | None = parse_node_pods(text)
    except PodsDocumentError as problem:
        assert "\n" not in str(problem)
        received = None
    _verdict(model, received)


# ---- what the exporter builds, the reader reads ---------------------------------------------------------------------
def _bounded(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False)


DEVICES = st.builds(
    DeviceFigures,
    uuid=st.text(max_size=20),
    gpu=st.integers(0, 4096),
    gpu_uuid=st.text(max_size=20),
    model=st.text(max_size=20),
    gpu_instance=st.none() | st.integers(0, 4096),
    mig_profile=st.none() | st.text(max_size=10),
    share=st.sampled_from(["exclusive", "mig", "process", "unattributed"]),
    sharing_pods=st.integers(1, 1_000_000),
    utilization_percent=st.none() | _bounded(0, 100),
    memory_used_bytes=st.none() | st.integers(0, 2**50),
    memory_total_bytes=st.none() | st.integers(0, 2**50),
    power_watts=st.none() | _bounded(0, 10_000),
    energy_joules=st.none() | _bounded(0, 1e15),
)


@settings(max_examples=150)
@given(
    st.lists(st.tuples(st.text(max_size=12), st.lists(DEVICES, max_size=3)), max_size=4),
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2999, 1, 1), timezones=st.just(UTC)),
    st.timedeltas(min_value=timedelta(days=-30), max_value=timedelta(seconds=1)),
    _bounded(0.05, 3600),
    _bounded(math.ulp(0.0), 86_400),
)
def test_every_document_the_exporter_builds_reads_back_the_same(
    containers: list[tuple[str, list[DeviceFigures]]],
    generated: datetime,
    sampled_before: timedelta,
    interval: float,
    window: float,
) -> None:
    pod = PodView(
        namespace="ml",
        name="p",
        containers=tuple(ContainerView(name=name, devices=tuple(devices)) for name, devices in containers),
        sampled_at=generated + sampled_before,
        window_seconds=window,
    )
    document = NodePods(node="n", generated_at=generated, interval_seconds=interval, kubelet_up=None, pods=(pod,))
    _verdict(document, parse_node_pods(document.model_dump_json()))


# ---- what a node may not claim (issue 21, item 9) --------------------------------------------------------------------
@pytest.mark.parametrize("other_namespace", [False, True])
def test_a_pod_listed_twice_is_refused_by_both_forms(other_namespace: bool) -> None:
    """A document listing one pod twice was read as the last of the two: which figures are right, nothing says."""
    document = _sound()
    twin = json.loads(json.dumps(document["pods"][0]))
    twin["containers"][0]["devices"][0]["utilization_percent"] = 99.0
    if other_namespace:
        twin["namespace"] = "other"  # the same name in another namespace is another pod
    document["pods"].append(twin)
    text = json.dumps(document)
    if other_namespace:
        assert len(parse_node_pods(text).pods) == 2 and len(NodePods.model_validate_json(text).pods) == 2
        return
    with pytest.raises(PodsDocumentError, match=r"pods\.1: ml/train-0 is listed twice"):
        parse_node_pods(text)
    with pytest.raises(pydantic.ValidationError, match="listed twice"):
        NodePods.model_validate_json(text)


@given(_bounded(0.05, 3600))
def test_a_reader_believes_at_most_max_claimed_interval(interval: float) -> None:
    """`interval_seconds: 3600` stretched a reader's default max-age (3 intervals + 2 s) to three hours."""
    document = _sound()
    document["interval_seconds"] = interval
    received = parse_node_pods(json.dumps(document))
    assert received.interval_seconds == min(interval, MAX_CLAIMED_INTERVAL_SECONDS)
    assert NodePods.model_validate(document).interval_seconds == interval  # the exporter states what it does
