"""The one pod model and parser: what the API object says is kept, garbage is refused with one error type, repeated
values (label maps, owners) are shared, and the exporter's extras (containers, creation time) are read."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulation.kubeapi import pod_object
from toolkit.labelset import EMPTY_LABELS, LabelSet, LabelSets
from toolkit.pods import MalformedObjectError, OwnerRef, Pod, PodParser, object_key

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)
label_maps = st.dictionaries(names, st.text(alphabet="abcxyz019._-", max_size=10), max_size=5)


@given(
    namespace=names,
    name=names,
    node=st.one_of(st.none(), names),
    labels=label_maps,
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"]),
    ip=st.one_of(st.none(), st.ip_addresses().map(str)),
    owner=st.one_of(st.none(), st.tuples(st.sampled_from(["ReplicaSet", "StatefulSet", "Job", "Node"]), names)),
)
def test_parser_keeps_what_the_api_object_says(
    namespace: str,
    name: str,
    node: str | None,
    labels: dict[str, str],
    phase: str,
    ip: str | None,
    owner: tuple[str, str] | None,
) -> None:
    obj = pod_object(namespace, name, node=node, labels=labels, phase=phase, pod_ip=ip, owner=owner, uid="U-1")
    pod = PodParser()(obj)
    assert (pod.namespace, pod.name, pod.uid, pod.node, pod.phase, pod.pod_ip) == (
        namespace,
        name,
        "u-1",  # lower case
        node,
        phase,
        ip,
    )
    assert dict(pod.labels) == labels
    assert pod.owner == (OwnerRef(*owner) if owner else None)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@given(
    st.dictionaries(
        st.sampled_from(["metadata", "spec", "status", "kind"]),
        st.one_of(
            json_values,
            st.fixed_dictionaries(
                {},
                optional={
                    "name": json_values,
                    "namespace": json_values,
                    "labels": json_values,
                    "ownerReferences": json_values,
                    "nodeName": json_values,
                    "phase": json_values,
                },
            ),
        ),
    )
)
def test_parser_rejects_garbage_with_one_error_type(obj: dict[str, Any]) -> None:
    try:
        pod = PodParser()(obj)
    except MalformedObjectError:
        return
    assert pod.name and pod.namespace


@given(st.lists(label_maps, min_size=1, max_size=8))
def test_equal_label_maps_share_one_set(maps: list[dict[str, str]]) -> None:
    sets = LabelSets()
    made = [sets(m) for m in maps]
    for m, made_set in zip(maps, made, strict=True):
        assert dict(made_set) == m and made_set == m
        for other, other_set in zip(maps, made, strict=True):
            assert (made_set is other_set) == (m == other)


def test_a_pod_with_only_a_name_and_namespace() -> None:
    pod = PodParser()({"metadata": {"name": "x", "namespace": "y", "labels": None}})
    assert pod == Pod("y", "x")
    assert (pod.uid, pod.node, pod.phase, pod.pod_ip, pod.owner, pod.created_at) == (
        "",
        None,
        "Pending",
        None,
        None,
        None,
    )
    assert pod.labels is EMPTY_LABELS and pod.containers is EMPTY_LABELS
    assert pod.key == ("y", "x") and not pod.terminated


@pytest.mark.parametrize(("phase", "terminated"), [("Succeeded", True), ("Failed", True), ("Running", False)])
def test_terminated_pods(phase: str, terminated: bool) -> None:
    assert Pod("a", "b", phase=phase).terminated is terminated


def _with_container_ids(obj: dict[str, Any], **ids: str) -> dict[str, Any]:
    for status in obj["status"]["containerStatuses"]:
        if status["name"] in ids:
            status["containerID"] = ids[status["name"]]
    return obj


def test_containers_and_creation_time_only_when_asked() -> None:
    obj = _with_container_ids(
        pod_object("ml", "p", containers=("main", "side", "late")),
        main=f"containerd://{'AB' * 32}",
        side=f"cri-o://{'cd' * 32}",
    )
    obj["status"]["initContainerStatuses"] = [{"name": "init", "containerID": f"docker://{'ef' * 32}"}]
    obj["metadata"]["creationTimestamp"] = "2026-01-02T03:04:05Z"
    pod = PodParser(containers=True, created=True)(obj)
    assert dict(pod.containers) == {"ab" * 32: "main", "cd" * 32: "side", "ef" * 32: "init"}  # "late" has no id yet
    assert pod.created_at == 1767323045.0
    lean = PodParser()(obj)  # as the adapter parses: it keeps neither
    assert lean.containers is EMPTY_LABELS and lean.created_at is None


def test_whether_a_container_uses_a_resource_claim_only_when_asked() -> None:
    """The exporter notices a kubelet that lists no DRA devices by the pods whose containers use claims."""
    obj = pod_object("ml", "p", containers=("main", "side"), claims={"side": ["gpu"]})
    assert obj["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "gpu"}]
    assert PodParser(claims=True)(obj).uses_claims is True
    assert PodParser()(obj).uses_claims is False, "the adapter does not ask"
    assert PodParser(claims=True)(pod_object("ml", "q")).uses_claims is False
    declared_only = pod_object("ml", "r")
    declared_only["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu"}]  # no container uses it
    assert PodParser(claims=True)(declared_only).uses_claims is False
    init = pod_object("ml", "s")
    init["spec"]["initContainers"] = [{"name": "prep", "resources": {"claims": [{"name": "gpu"}]}}]
    assert PodParser(claims=True)(init).uses_claims is True


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(["containers", "initContainers", "resources", "claims", "name"]), inner, max_size=3
            )
        ),
        max_leaves=12,
    )
)
def test_any_spec_is_read_for_claims_without_raising(spec: object) -> None:
    obj = pod_object("ml", "p")
    obj["spec"] = {"containers": spec} if not isinstance(spec, dict) else spec
    try:
        pod = PodParser(claims=True)(obj)
    except MalformedObjectError:
        return
    assert pod.uses_claims in (True, False)


@pytest.mark.parametrize("stamp", [None, 5, "", "yesterday", "2026-13-01T00:00:00Z"])
def test_an_unreadable_creation_time_is_unknown(stamp: object) -> None:
    obj = pod_object("ml", "p")
    obj["metadata"]["creationTimestamp"] = stamp
    assert PodParser(created=True)(obj).created_at is None


@pytest.mark.parametrize(
    "status",
    [
        {"containerStatuses": "no"},
        {"containerStatuses": ["no"]},
        {"containerStatuses": [{"containerID": "containerd://ab"}]},
        3,
    ],
)
def test_malformed_container_statuses_are_refused(status: object) -> None:
    obj = pod_object("ml", "p")
    obj["status"] = status
    with pytest.raises(MalformedObjectError):
        PodParser(containers=True)(obj)


def test_object_key() -> None:
    assert object_key(pod_object("ml", "p")) == ("ml", "p")
    assert object_key({"metadata": {"name": "a-resource-slice"}}) == ("", "a-resource-slice")  # cluster-scoped
    for malformed in ({"metadata": {"namespace": "ml"}}, {"metadata": {"name": "x", "namespace": 3}}, {}, "x"):
        with pytest.raises(MalformedObjectError):
            object_key(malformed)  # type: ignore[arg-type]


def test_owners_are_shared() -> None:
    parse = PodParser()
    a, b = (parse(pod_object("ml", n, labels={"app": "x"}, owner=("ReplicaSet", "rs-1"))) for n in ("a", "b"))
    assert a.owner == OwnerRef("ReplicaSet", "rs-1") and a.owner is b.owner
    assert a.labels is b.labels
    assert parse.distinct_label_sets == 1


def test_a_label_set_is_an_immutable_hashable_mapping() -> None:
    labels = LabelSet({"app": "x", "tier": "web"})
    assert labels == {"app": "x", "tier": "web"} and labels == LabelSet({"tier": "web", "app": "x"})
    assert hash(labels) == hash(LabelSet({"tier": "web", "app": "x"}))
    assert labels.get("app") == "x" and labels.get("nope", "d") == "d" and "tier" in labels and len(labels) == 2
    assert labels != {"app": "x"} and labels != 3
    assert LabelSets()({}) is EMPTY_LABELS
