"""The pod cache's indexes: by namespace, node and top controller, kept incrementally under one lock.

Writers are the watch threads; readers are request handlers on the event loop. Every query reads one index entry and
copies only what it returns; nothing scans all pods. A namespace's pods in name order are kept between queries (the
HPA asks about the same namespace every 15 s) and dropped when a pod of that namespace changes. A pod's `owner` is
resolved to its top controller: a Pod owned by a ReplicaSet that a Deployment owns is indexed under the Deployment,
and re-indexed when ReplicaSet events change that.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import TypeVar

from adapter.selectors import EVERYTHING, Selector
from toolkit.pods import OwnerRef, Pod

PodKey = tuple[str, str]  # (namespace, name)
OwnerKey = tuple[str, str, str]  # (namespace, kind, name)

K = TypeVar("K")
V = TypeVar("V")

_by_name = attrgetter("name")
_by_namespace_name = attrgetter("namespace", "name")


@dataclass(frozen=True, slots=True)
class ReplicaSetOwner:
    """What the cache keeps of a ReplicaSet: only its controller (a Deployment), when it has one."""

    namespace: str
    name: str
    controller: OwnerRef | None


class PodIndex:
    """Thread-safe indexed pod store. `upsert_pod` takes pods whose `owner` is their direct controller."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[PodKey, Pod] = {}
        self._by_namespace: dict[str, dict[str, Pod]] = {}
        self._namespace_in_order: dict[str, tuple[Pod, ...]] = {}  # in_namespace answers; dropped on change
        self._by_node: dict[str, dict[PodKey, Pod]] = {}
        self._by_owner: dict[OwnerKey, dict[str, Pod]] = {}
        self._pod_replica_set: dict[PodKey, str] = {}  # pods whose direct controller is a ReplicaSet
        self._replica_set_pods: dict[PodKey, set[str]] = {}  # (namespace, replica set) -> pod names
        self._replica_set_parent: dict[PodKey, OwnerRef] = {}  # (namespace, replica set) -> its controller

    # ---- reads ----

    def get(self, namespace: str, name: str) -> Pod | None:
        with self._lock:
            return self._pods.get((namespace, name))

    def get_many(self, keys: Iterable[PodKey]) -> list[Pod | None]:
        """`get` for each key, under one lock (a 1,000-pod answer checks the exporter pods of some 800 nodes)."""
        with self._lock:
            found = self._pods.get
            return [found(key) for key in keys]

    def in_namespace(self, namespace: str, selector: Selector = EVERYTHING) -> tuple[Pod, ...]:
        """The namespace's pods that `selector` picks, by name."""
        with self._lock:
            pods = self._in_order(namespace)
        return pods if selector.empty else _picked(pods, selector)

    def on_node(self, node: str) -> tuple[Pod, ...]:
        with self._lock:
            found = list(self._by_node.get(node, {}).values())
        return tuple(sorted(found, key=_by_namespace_name))

    def owned_by(self, namespace: str, kind: str, name: str) -> tuple[Pod, ...]:
        with self._lock:
            if kind == "ReplicaSet":
                names = self._replica_set_pods.get((namespace, name), ())
                found = [self._pods[(namespace, n)] for n in names]
            else:
                found = list(self._by_owner.get((namespace, kind, name), {}).values())
        return tuple(sorted(found, key=_by_name))

    def all(self) -> tuple[Pod, ...]:
        """Every pod, by namespace and name."""
        with self._lock:
            return tuple(pod for namespace in sorted(self._by_namespace) for pod in self._in_order(namespace))

    def __len__(self) -> int:
        return len(self._pods)

    @property
    def replica_sets_with_owner(self) -> int:
        return len(self._replica_set_parent)

    # ---- pod writes ----

    def upsert_pod(self, pod: Pod) -> None:
        key = (pod.namespace, pod.name)
        with self._lock:
            old = self._pods.get(key)
            if old is not None:
                self._unindex(key, old)
            self._index(key, pod)

    def remove_pod(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        with self._lock:
            old = self._pods.get(key)
            if old is not None:
                self._unindex(key, old)

    def replace_pods(self, pods: Iterable[Pod]) -> None:
        """The result of a full list: the index becomes exactly these pods."""
        with self._lock:
            self._pods.clear()
            self._by_namespace.clear()
            self._namespace_in_order.clear()
            self._by_node.clear()
            self._by_owner.clear()
            self._pod_replica_set.clear()
            self._replica_set_pods.clear()
            for pod in pods:
                key = (pod.namespace, pod.name)
                old = self._pods.get(key)
                if old is not None:
                    self._unindex(key, old)
                self._index(key, pod)

    # ---- replica set writes ----

    def upsert_replica_set(self, replica_set: ReplicaSetOwner) -> None:
        with self._lock:
            self._set_parent((replica_set.namespace, replica_set.name), replica_set.controller)

    def remove_replica_set(self, namespace: str, name: str) -> None:
        with self._lock:
            self._set_parent((namespace, name), None)

    def replace_replica_sets(self, replica_sets: Iterable[ReplicaSetOwner]) -> None:
        with self._lock:
            wanted = {(r.namespace, r.name): r.controller for r in replica_sets}
            for key in [k for k in self._replica_set_parent if wanted.get(k) is None]:
                self._set_parent(key, None)
            for key, parent in wanted.items():
                if parent is not None:
                    self._set_parent(key, parent)

    # ---- internals (lock held) ----

    def _in_order(self, namespace: str) -> tuple[Pod, ...]:
        found = self._namespace_in_order.get(namespace)
        if found is None:
            pods = self._by_namespace.get(namespace)
            if pods is None:
                return ()
            found = self._namespace_in_order[namespace] = tuple(sorted(pods.values(), key=_by_name))
        return found

    def _index(self, key: PodKey, pod: Pod) -> None:
        direct = pod.owner
        if direct is not None and direct.kind == "ReplicaSet":
            self._pod_replica_set[key] = direct.name
            self._replica_set_pods.setdefault((pod.namespace, direct.name), set()).add(pod.name)
            parent = self._replica_set_parent.get((pod.namespace, direct.name))
            if parent is not None:
                pod = replace(pod, owner=parent)
        self._pods[key] = pod
        self._by_namespace.setdefault(pod.namespace, {})[pod.name] = pod
        self._namespace_in_order.pop(pod.namespace, None)
        if pod.node:
            self._by_node.setdefault(pod.node, {})[key] = pod
        if pod.owner is not None:
            self._by_owner.setdefault((pod.namespace, pod.owner.kind, pod.owner.name), {})[pod.name] = pod

    def _unindex(self, key: PodKey, pod: Pod) -> None:
        del self._pods[key]
        _discard(self._by_namespace, pod.namespace, pod.name)
        self._namespace_in_order.pop(pod.namespace, None)
        if pod.node:
            _discard(self._by_node, pod.node, key)
        if pod.owner is not None:
            _discard(self._by_owner, (pod.namespace, pod.owner.kind, pod.owner.name), pod.name)
        replica_set = self._pod_replica_set.pop(key, None)
        if replica_set is not None:
            names = self._replica_set_pods.get((pod.namespace, replica_set))
            if names is not None:
                names.discard(pod.name)
                if not names:
                    del self._replica_set_pods[(pod.namespace, replica_set)]

    def _set_parent(self, replica_set: PodKey, parent: OwnerRef | None) -> None:
        if self._replica_set_parent.get(replica_set) == parent:
            return
        if parent is None:
            del self._replica_set_parent[replica_set]
        else:
            self._replica_set_parent[replica_set] = parent
        namespace, name = replica_set
        direct = OwnerRef("ReplicaSet", name)
        for pod_name in list(self._replica_set_pods.get(replica_set, ())):
            key = (namespace, pod_name)
            pod = self._pods[key]
            self._unindex(key, pod)
            self._index(key, replace(pod, owner=direct))


def _picked(pods: tuple[Pod, ...], selector: Selector) -> tuple[Pod, ...]:
    """The pods whose labels `selector` matches. Pods with equal labels share one label map (see `toolkit.labelset`):
    the replicas of a workload are matched once, not once each."""
    verdicts: dict[int, bool] = {}  # by id() of the label map: every map is held by a pod in `pods` meanwhile
    picked = []
    for pod in pods:
        verdict = verdicts.get(id(pod.labels))
        if verdict is None:
            verdict = verdicts[id(pod.labels)] = selector.matches(pod.labels)
        if verdict:
            picked.append(pod)
    return tuple(picked)


def _discard(index: dict[K, dict[V, Pod]], outer: K, inner: V) -> None:
    bucket = index.get(outer)
    if bucket is not None:
        bucket.pop(inner, None)
        if not bucket:
            del index[outer]
