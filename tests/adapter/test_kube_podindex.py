"""The pod cache's indexes: incremental indexes agree with a plain scan, whatever the event order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from adapter.podcache.index import PodIndex, ReplicaSetOwner
from adapter.selectors import Selector, parse_selector
from toolkit.labelset import EMPTY_LABELS, LabelSets
from toolkit.pods import OwnerRef, Pod

NAMESPACES = ("a", "b")
NODES = (None, "n1", "n2")
REPLICA_SETS = ("rs1", "rs2", "rs3")
DEPLOYMENTS = ("d1", "d2")
OWNERS = (
    None,
    *(OwnerRef("ReplicaSet", r) for r in REPLICA_SETS),
    OwnerRef("StatefulSet", "s1"),
    OwnerRef("Job", "j1"),
)

pods = st.builds(
    Pod,
    namespace=st.sampled_from(NAMESPACES),
    name=st.sampled_from(("p1", "p2", "p3", "p4")),
    uid=st.just("u"),
    node=st.sampled_from(NODES),
    labels=st.just(EMPTY_LABELS),
    phase=st.sampled_from(("Running", "Pending")),
    pod_ip=st.none(),
    owner=st.sampled_from(OWNERS),
)
replica_sets = st.builds(
    ReplicaSetOwner,
    namespace=st.sampled_from(NAMESPACES),
    name=st.sampled_from(REPLICA_SETS),
    controller=st.one_of(st.none(), st.sampled_from([OwnerRef("Deployment", d) for d in DEPLOYMENTS])),
)


class IndexAgreesWithAScan(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.index = PodIndex()
        self.pods: dict[tuple[str, str], Pod] = {}  # as given: direct owners
        self.parents: dict[tuple[str, str], OwnerRef] = {}

    @rule(pod=pods)
    def upsert_pod(self, pod: Pod) -> None:
        self.index.upsert_pod(pod)
        self.pods[(pod.namespace, pod.name)] = pod

    @rule(namespace=st.sampled_from(NAMESPACES), name=st.sampled_from(("p1", "p2", "p3", "p4")))
    def remove_pod(self, namespace: str, name: str) -> None:
        self.index.remove_pod(namespace, name)
        self.pods.pop((namespace, name), None)

    @rule(items=st.lists(pods, max_size=6))
    def relist_pods(self, items: list[Pod]) -> None:
        self.index.replace_pods(items)
        self.pods = {(p.namespace, p.name): p for p in items}

    @rule(rs=replica_sets)
    def upsert_replica_set(self, rs: ReplicaSetOwner) -> None:
        self.index.upsert_replica_set(rs)
        self._set_parent(rs)

    @rule(namespace=st.sampled_from(NAMESPACES), name=st.sampled_from(REPLICA_SETS))
    def remove_replica_set(self, namespace: str, name: str) -> None:
        self.index.remove_replica_set(namespace, name)
        self.parents.pop((namespace, name), None)

    @rule(items=st.lists(replica_sets, max_size=4))
    def relist_replica_sets(self, items: list[ReplicaSetOwner]) -> None:
        self.index.replace_replica_sets(items)
        self.parents = {}
        for rs in items:
            self._set_parent(rs)

    def _set_parent(self, rs: ReplicaSetOwner) -> None:
        if rs.controller is None:
            self.parents.pop((rs.namespace, rs.name), None)
        else:
            self.parents[(rs.namespace, rs.name)] = rs.controller

    def expected(self) -> list[Pod]:
        out = []
        for pod in self.pods.values():
            owner = pod.owner
            if owner is not None and owner.kind == "ReplicaSet":
                owner = self.parents.get((pod.namespace, owner.name), owner)
            out.append(Pod(**{**_fields(pod), "owner": owner}))
        return out

    @invariant()
    def every_query_matches_a_scan(self) -> None:
        want = self.expected()
        assert len(self.index) == len(want)
        assert list(self.index.all()) == sorted(want, key=lambda p: (p.namespace, p.name))
        for ns in NAMESPACES:
            assert list(self.index.in_namespace(ns)) == sorted((p for p in want if p.namespace == ns), key=_name)
            for pod in want:
                if pod.namespace == ns:
                    assert self.index.get(ns, pod.name) == pod
            for kind, name in [("Deployment", d) for d in DEPLOYMENTS] + [("StatefulSet", "s1"), ("Job", "j1")]:
                got = set(self.index.owned_by(ns, kind, name))
                assert got == {p for p in want if p.namespace == ns and p.owner == OwnerRef(kind, name)}
            for rs in REPLICA_SETS:
                direct = {
                    (p.namespace, p.name)
                    for p in self.pods.values()
                    if p.namespace == ns and p.owner == OwnerRef("ReplicaSet", rs)
                }
                assert {(p.namespace, p.name) for p in self.index.owned_by(ns, "ReplicaSet", rs)} == direct
        for node in NODES[1:]:
            assert node is not None
            assert set(self.index.on_node(node)) == {p for p in want if p.node == node}


def _name(pod: Pod) -> str:
    return pod.name


def _fields(pod: Pod) -> dict[str, Any]:
    return {f: getattr(pod, f) for f in Pod.__dataclass_fields__}


TestIndexAgreesWithAScan = IndexAgreesWithAScan.TestCase
TestIndexAgreesWithAScan.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)
label_maps = st.dictionaries(names, st.text(alphabet="abcxyz019._-", max_size=10), max_size=5)


SELECTORS = ("", "app=a", "app!=a", "tier", "!tier", "app in (a,b),tier=x", "app notin (b)")


@given(
    pods=st.lists(
        st.tuples(st.sampled_from(NAMESPACES), names, st.sampled_from([{}, {"app": "a"}, {"app": "b", "tier": "x"}])),
        max_size=12,
        unique_by=lambda p: (p[0], p[1]),
    ),
    shared=st.booleans(),
    selector=st.sampled_from(SELECTORS).map(parse_selector),
)
def test_a_namespace_selection_is_what_the_selector_picks_by_name(
    pods: list[tuple[str, str, dict[str, str]]], shared: bool, selector: Selector
) -> None:
    """Replicas share one label map, and the selection matches each map once: whether or not the maps are shared,
    it picks what matching every pod picks, in name order."""
    label_sets = LabelSets()
    made = [
        Pod(ns, name, "u", None, label_sets(labels) if shared else LabelSets()(labels), "Running")
        for ns, name, labels in pods
    ]
    index = PodIndex()
    index.replace_pods(made)
    for ns in NAMESPACES:
        expected = sorted((p for p in made if p.namespace == ns and selector.matches(p.labels)), key=_name)
        assert list(index.in_namespace(ns, selector)) == expected
