"""Described objects: which Kubernetes objects a custom-metrics request is about, and which pods stand behind each.

Pods describe themselves; a Deployment or StatefulSet stands for the pods whose top controller it is (owner references,
resolved by the pod cache); a Namespace for its pods; a Node for the pods scheduled on it. Objects are found in the
pod cache only: an object without pods has no GPU figures and is not found.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from adapter.api.bodies import described_object
from adapter.api.paths import CustomMetricPath
from adapter.selectors import Selector
from adapter.sources.metricsource import PodDirectory
from adapter.status import ApiError, bad_request
from toolkit.pods import Pod


@dataclass(frozen=True, slots=True)
class ObjectKind:
    resource: str  # canonical group-resource: "pods", "deployments.apps"
    kind: str  # "Pod"
    api_version: str  # as describedObject.apiVersion spells it: "/v1" for the core group, "apps/v1"
    namespaced: bool
    owner_kind: str | None = None  # for workloads: the ownerReference kind of their pods


POD: Final = ObjectKind("pods", "Pod", "/v1", namespaced=True)
DEPLOYMENT: Final = ObjectKind("deployments.apps", "Deployment", "apps/v1", namespaced=True, owner_kind="Deployment")
STATEFUL_SET: Final = ObjectKind(
    "statefulsets.apps", "StatefulSet", "apps/v1", namespaced=True, owner_kind="StatefulSet"
)
NAMESPACE: Final = ObjectKind("namespaces", "Namespace", "/v1", namespaced=False)
NODE: Final = ObjectKind("nodes", "Node", "/v1", namespaced=False)

KINDS: Final = (POD, DEPLOYMENT, STATEFUL_SET, NAMESPACE, NODE)
_BY_RESOURCE: Final = {k.resource: k for k in KINDS} | {"deployments": DEPLOYMENT, "statefulsets": STATEFUL_SET}


class DescribedObject(NamedTuple):  # a tuple: one is made per pod of every answer, and tuples are made fast
    kind: ObjectKind
    namespace: str | None
    name: str
    pods: tuple[Pod, ...]

    def reference(self) -> str:
        """The describedObject of a metric item (an ObjectReference), as JSON text."""
        return described_object(self.kind.kind, self.kind.api_version, self.namespace, self.name)


def object_kind(resource: str) -> ObjectKind | None:
    return _BY_RESOURCE.get(resource)


def described_objects(
    directory: PodDirectory, path: CustomMetricPath, kind: ObjectKind, selector: Selector
) -> list[DescribedObject]:
    """The objects a request names (one for a name, every one with pods for `*`), each with its pods."""
    _check_path(path, kind, selector)
    if kind is POD:
        return [DescribedObject(POD, pod.namespace, pod.name, (pod,)) for pod in _pods(directory, path, selector)]
    if kind.owner_kind is not None:
        assert path.namespace is not None
        if not path.wildcard:
            pods = tuple(directory.pods_owned_by(path.namespace, kind.owner_kind, path.name))
            return [DescribedObject(kind, path.namespace, path.name, pods)] if pods else []
        return _workloads(directory.pods_in_namespace(path.namespace), kind, path.namespace)
    if kind is NAMESPACE:
        if not path.wildcard:
            pods = tuple(directory.pods_in_namespace(path.name))
            return [DescribedObject(NAMESPACE, None, path.name, pods)] if pods else []
        return _grouped(directory.all_pods(), NAMESPACE, lambda p: p.namespace)
    if not path.wildcard:  # NODE
        pods = tuple(directory.pods_on_node(path.name))
        return [DescribedObject(NODE, None, path.name, pods)] if pods else []
    return _grouped(directory.all_pods(), NODE, lambda p: p.node)


def described_pods(directory: PodDirectory, path: CustomMetricPath, selector: Selector) -> Sequence[Pod]:
    """`described_objects` for a request about pods, where each pod describes itself: the pods, without an object
    around each (an HPA answer holds one item per pod, and this is the path it takes every 15 s)."""
    _check_path(path, POD, selector)
    return _pods(directory, path, selector)


def _check_path(path: CustomMetricPath, kind: ObjectKind, selector: Selector) -> None:
    if kind.namespaced and path.namespace is None:
        raise ApiError(404, f"{kind.resource} are namespaced: use namespaces/{{namespace}}/{kind.resource}/...")
    if not kind.namespaced and path.namespace is not None and not path.namespace_metric:
        raise ApiError(404, f"{kind.resource} are not namespaced: use {kind.resource}/{{name or *}}/{{metric}}")
    if kind is not POD and not selector.empty:
        raise bad_request("labelSelector selects objects by their labels, which the adapter knows only for pods")


def _pods(directory: PodDirectory, path: CustomMetricPath, selector: Selector) -> Sequence[Pod]:
    assert path.namespace is not None  # pods are namespaced: checked by _check_path
    if not path.wildcard:
        pod = directory.get(path.namespace, path.name)
        return (pod,) if pod is not None and selector.matches(pod.labels) else ()
    return directory.pods_in_namespace(path.namespace, selector)


def _workloads(pods: Sequence[Pod], kind: ObjectKind, namespace: str) -> list[DescribedObject]:
    members: dict[str, list[Pod]] = defaultdict(list)
    for pod in pods:
        owner = pod.owner
        if owner is not None and owner.kind == kind.owner_kind:
            members[owner.name].append(pod)
    return [DescribedObject(kind, namespace, owner, tuple(members[owner])) for owner in sorted(members)]


def _grouped(pods: Sequence[Pod], kind: ObjectKind, key: Callable[[Pod], str | None]) -> list[DescribedObject]:
    members: dict[str, list[Pod]] = defaultdict(list)
    for pod in pods:
        group = key(pod)
        if group:
            members[group].append(pod)
    return [DescribedObject(kind, None, group, tuple(members[group])) for group in sorted(members)]
