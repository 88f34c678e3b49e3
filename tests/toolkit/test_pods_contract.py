"""The `/pods` contract (toolkit.pods_contract): what a reader accepts is within the contract's bounds, what the
exporter encodes a reader reads back to the same values, and the exporter cannot encode what a reader would refuse.
An adapter trusts what it reads to be what an exporter was able to build."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from toolkit.pods_contract import (
    INTERVAL_SECONDS_BOUNDS,
    MAX_BYTES,
    MAX_CLAIMED_INTERVAL_SECONDS,
    MAX_JOULES,
    MAX_WATTS,
    MAX_WINDOW_SECONDS,
    SAMPLED_AFTER_GENERATED_TOLERANCE,
    UTILIZATION_PERCENT_BOUNDS,
    ContainerView,
    DeviceFigures,
    NodePods,
    PodsDocumentError,
    PodView,
    encode_node_pods,
    parse_node_pods,
)

AT = "2026-11-23T17:00:00Z"


# ---- the wire format ------------------------------------------------------------------------------------------------
def _sound_document() -> NodePods:
    device = DeviceFigures(
        uuid="MIG-1",
        gpu=3,
        gpu_uuid="GPU-1",
        model="NVIDIA A100",
        gpu_instance=2,
        mig_profile="1g.10gb",
        share="mig",
        utilization_percent=42.5,
        memory_used_bytes=1024,
        memory_total_bytes=10 * 2**30,
        power_watts=80.5,
        energy_joules=1e6,
    )
    pod = PodView(
        namespace="ml",
        name="train-0",
        uid="u-1",
        containers=(ContainerView(name="main", devices=(device,)),),
        sampled_at=datetime(2026, 11, 23, 17, 0, 0, 250000, tzinfo=UTC),
        window_seconds=60.0,
    )
    return NodePods(
        node="gpu-1",
        generated_at=datetime(2026, 11, 23, 17, 0, 1, tzinfo=UTC),
        interval_seconds=1.0,
        kubelet_up=True,
        pods=(pod,),
    )


def test_the_document_is_the_v1_wire_format() -> None:
    """Keys, their order, the number and time formats: what adapters of every release read (the pydantic model that
    wrote the document before wrote these very bytes)."""
    assert encode_node_pods(_sound_document()) == (
        b'{"api_version":"gpu-pulse.dev/v1","node":"gpu-1","generated_at":"2026-11-23T17:00:01Z",'
        b'"interval_seconds":1.0,"kubelet_up":true,"pods":[{"namespace":"ml","name":"train-0","uid":"u-1",'
        b'"containers":[{"name":"main","devices":[{"uuid":"MIG-1","gpu":3,"gpu_uuid":"GPU-1","model":"NVIDIA A100",'
        b'"gpu_instance":2,"mig_profile":"1g.10gb","share":"mig","sharing_pods":1,"utilization_percent":42.5,'
        b'"memory_used_bytes":1024,"memory_total_bytes":10737418240,"power_watts":80.5,"energy_joules":1000000.0}]}],'
        b'"sampled_at":"2026-11-23T17:00:00.250000Z","window_seconds":60.0}]}'
    )


# ---- what a reader accepts ------------------------------------------------------------------------------------------
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
DEVICE_FIELDS = list(DeviceFigures.__struct_fields__)
POD_FIELDS = list(PodView.__struct_fields__)
NODE_FIELDS = list(NodePods.__struct_fields__)


def _sound() -> dict[str, Any]:
    return json.loads(encode_node_pods(_sound_document()))  # type: ignore[no-any-return]


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


def _within(value: float | None, low: float, high: float, kind: type) -> bool:
    return value is None or (type(value) is kind and low <= value <= high)


def _assert_within_the_contract(document: NodePods) -> None:
    """What docs/architecture.md and the adapter (adapter/sources/figures.py) count on, checked field by field."""
    assert document.api_version == "gpu-pulse.dev/v1" and isinstance(document.node, str)
    assert INTERVAL_SECONDS_BOUNDS[0] <= document.interval_seconds <= MAX_CLAIMED_INTERVAL_SECONDS
    assert document.generated_at.utcoffset() is not None
    assert document.kubelet_up in (None, True, False)
    names = [(p.namespace, p.name) for p in document.pods]
    assert len(names) == len(set(names)), "a pod listed twice"
    for pod in document.pods:
        assert pod.sampled_at.utcoffset() is not None
        assert pod.sampled_at <= document.generated_at + SAMPLED_AFTER_GENERATED_TOLERANCE
        assert 0 < pod.window_seconds <= MAX_WINDOW_SECONDS and math.isfinite(pod.window_seconds)
        for container in pod.containers:
            for device in container.devices:
                assert type(device.gpu) is int and 0 <= device.gpu <= 4096
                assert device.gpu_instance is None or (type(device.gpu_instance) is int and device.gpu_instance >= 0)
                assert device.share in ("exclusive", "mig", "process", "unattributed")
                assert type(device.sharing_pods) is int and device.sharing_pods >= 1
                assert _within(device.utilization_percent, *UTILIZATION_PERCENT_BOUNDS, float)
                assert _within(device.memory_used_bytes, 0, MAX_BYTES, int)
                assert _within(device.memory_total_bytes, 0, MAX_BYTES, int)
                assert _within(device.power_watts, 0, MAX_WATTS, float)
                assert _within(device.energy_joules, 0, MAX_JOULES, float)


@settings(max_examples=400)
@given(CHANGES, st.booleans())
@example([("device", "utilization_percent", 100.5)], False)
@example([("device", "power_watts", 10_000.5)], False)
@example([("device", "energy_joules", 1.1e15)], False)
@example([("device", "memory_used_bytes", 2**50 + 1)], False)
@example([("device", "memory_total_bytes", -1)], False)
@example([("device", "sharing_pods", 0)], False)
@example([("pod", "window_seconds", 86_400.5)], False)
@example([("node", "interval_seconds", 0.049)], False)
@example([("pod", "sampled_at", "2999-01-01T00:00:00Z")], False)
@example([("node", "generated_at", "2026-11-23T17:00:00")], False)
@example([("device", "gpu", 3.0)], False)
@example([("device", "gpu", "5")], False)
@example([("device", "gpu", True)], False)
@example([("node", "generated_at", 1_795_000_000)], False)
@example([], False)
def test_a_reader_accepts_only_what_the_contract_allows(changes: list[tuple[str, str, Any]], drop: bool) -> None:
    text = json.dumps(_changed(changes, drop))
    try:
        received = parse_node_pods(text)
    except PodsDocumentError as problem:
        assert "\n" not in str(problem)
        return
    _assert_within_the_contract(received)
    assert parse_node_pods(encode_node_pods(received)) == received  # what it read, an exporter could have sent


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (("device", "gpu", 3.0), "gpu: Expected `int`"),
        (("device", "gpu", "5"), "gpu: Expected `int`"),
        (("device", "share", "bogus"), "share: Invalid enum value"),
        (("node", "generated_at", 1_795_000_000), "generated_at: Expected `datetime`"),
        (("node", "Node", "gpu-1"), "Object contains unknown field `Node`"),
    ],
)
def test_a_reader_converts_nothing(change: tuple[str, str, Any], problem: str) -> None:
    """A float, a string or a number of seconds where the contract says an integer or a time is refused, not read
    as something it might mean."""
    with pytest.raises(PodsDocumentError, match=problem):
        parse_node_pods(json.dumps(_changed([change], False)))


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
    body = encode_node_pods(document)
    believed = msgspec.structs.replace(document, interval_seconds=min(interval, MAX_CLAIMED_INTERVAL_SECONDS))
    assert parse_node_pods(body) == believed
    if interval <= MAX_CLAIMED_INTERVAL_SECONDS:
        assert encode_node_pods(parse_node_pods(body)) == body  # and a reader could pass the very bytes on


@settings(max_examples=300)
@given(CHANGES)
@example([("device", "utilization_percent", 100.5)])
@example([("device", "gpu", 3.0)])
@example([("pod", "sampled_at", "2026-11-23T17:00:00")])
@example([("node", "interval_seconds", 1e308)])
def test_the_exporter_cannot_encode_what_a_reader_refuses(changes: list[tuple[str, str, Any]]) -> None:
    """msgspec checks bounds when it decodes, not when a struct is built: building a document with any value in any
    field, encode_node_pods refuses it or a reader reads it back unchanged."""
    sound = _sound_document()
    pod, device = sound.pods[0], sound.pods[0].containers[0].devices[0]
    fields: dict[str, dict[str, Any]] = {"node": {}, "pod": {}, "device": {}}
    known = {"node": NODE_FIELDS, "pod": POD_FIELDS, "device": DEVICE_FIELDS}
    for place, name, value in changes:  # every field that holds a value: not the pods and containers
        if name in known[place] and name not in ("pods", "containers"):
            fields[place][name] = datetime.fromisoformat(value) if _is_time(name, value) else value
    try:
        built_device = msgspec.structs.replace(device, **fields["device"])
        built_pod = msgspec.structs.replace(
            pod, **{"containers": (ContainerView(name="main", devices=(built_device,)),), **fields["pod"]}
        )
        document = msgspec.structs.replace(sound, **{"pods": (built_pod,), **fields["node"]})
    except (TypeError, ValueError):  # a check across fields (__post_init__) refused it as it was built
        return
    try:
        body = encode_node_pods(document)
    except (PodsDocumentError, TypeError, ValueError):  # TypeError: a value JSON cannot hold
        return
    read = parse_node_pods(body)
    _assert_within_the_contract(read)
    assert read == msgspec.structs.replace(document, interval_seconds=read.interval_seconds)


def _is_time(name: str, value: Any) -> bool:
    if name not in ("generated_at", "sampled_at") or not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


# ---- what a node may not claim (issue 21, item 9) --------------------------------------------------------------------
@pytest.mark.parametrize("other_namespace", [False, True])
def test_a_pod_listed_twice_is_refused_by_reader_and_builder(other_namespace: bool) -> None:
    """A document listing one pod twice was read as the last of the two: which figures are right, nothing says."""
    document = _sound()
    twin = json.loads(json.dumps(document["pods"][0]))
    twin["containers"][0]["devices"][0]["utilization_percent"] = 99.0
    if other_namespace:
        twin["namespace"] = "other"  # the same name in another namespace is another pod
    document["pods"].append(twin)
    text = json.dumps(document)
    pod = _sound_document().pods[0]
    twin_pod = msgspec.structs.replace(pod, namespace=twin["namespace"])
    if other_namespace:
        assert len(parse_node_pods(text).pods) == 2
        assert len(msgspec.structs.replace(_sound_document(), pods=(pod, twin_pod)).pods) == 2
        return
    with pytest.raises(PodsDocumentError, match=r"pods\.1: ml/train-0 is listed twice"):
        parse_node_pods(text)
    with pytest.raises(ValueError, match="listed twice"):
        msgspec.structs.replace(_sound_document(), pods=(pod, twin_pod))


@given(_bounded(0.05, 3600))
def test_a_reader_believes_at_most_max_claimed_interval(interval: float) -> None:
    """`interval_seconds: 3600` stretched a reader's default max-age (3 intervals + 2 s) to three hours."""
    document = msgspec.structs.replace(_sound_document(), interval_seconds=interval)
    body = encode_node_pods(document)
    assert json.loads(body)["interval_seconds"] == interval  # the exporter states what it does
    assert parse_node_pods(body).interval_seconds == min(interval, MAX_CLAIMED_INTERVAL_SECONDS)
