"""A pod as both services know it, parsed from the raw JSON objects the Kubernetes API sends (lists and watches).

Only the few fields the services use are kept (a full Pod object is kilobytes; a `Pod` is a few hundred bytes), and
what many pods repeat is shared rather than stored once per pod: namespaces, nodes and phases are interned, label maps
(see `toolkit.labelset`) and owners are handed out once per distinct value. The adapter's pod cache holds every pod of
a cluster this way; the exporter's pod watch holds its node's pods, with their containers.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from toolkit.labelset import EMPTY_LABELS, LabelSet, LabelSets

_CONTAINER_STATUSES = ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")
_TERMINATED_PHASES = frozenset(("Succeeded", "Failed"))


@dataclass(frozen=True, slots=True, weakref_slot=True)
class OwnerRef:
    """A pod's controller: a ReplicaSet (itself owned by a Deployment, usually), StatefulSet, DaemonSet, Job, ..."""

    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class Pod:
    """One pod. Equal pods compare equal; label maps are shared between pods with equal labels."""

    namespace: str
    name: str
    uid: str = ""  # lower case; "" when the object has none
    node: str | None = None  # None until the pod is scheduled
    labels: Mapping[str, str] = EMPTY_LABELS
    phase: str = "Pending"  # Pending, Running, Succeeded, Failed, Unknown
    pod_ip: str | None = None
    owner: OwnerRef | None = None  # the controller its ownerReferences name (the adapter resolves it further up)
    created_at: float | None = None  # epoch seconds; only when the parser was asked for it
    containers: Mapping[str, str] = EMPTY_LABELS  # container id (lower-case hex, no runtime prefix) -> name; ditto
    uses_claims: bool = False  # a container uses a DRA ResourceClaim (resources.claims); only when asked for it
    # what locates its serving engine's metrics endpoint (exporter.engines), only when asked for it: its Ready
    # condition (None: not known), its `prometheus.io/*` and `gpu-pulse.dev/*` annotations, its containers' ports
    ready: bool | None = None
    annotations: Mapping[str, str] = EMPTY_LABELS
    ports: tuple[int, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def terminated(self) -> bool:
        return self.phase in _TERMINATED_PHASES


class MalformedObjectError(ValueError):
    """A list or watch item that is not a well-formed object (one bad item is skipped, never fatal)."""


class OwnerRefs:
    """Shares one `OwnerRef` per (kind, name) among the objects that have it. Not thread-safe: one per writer."""

    def __init__(self) -> None:
        self._refs: weakref.WeakValueDictionary[tuple[str, str], OwnerRef] = weakref.WeakValueDictionary()

    def controller_of(self, metadata: Mapping[str, Any]) -> OwnerRef | None:
        """The ownerReference marked `controller: true`, if any."""
        refs = metadata.get("ownerReferences") or ()
        if not isinstance(refs, list | tuple):
            raise MalformedObjectError("metadata.ownerReferences is not a list")
        for ref in refs:
            if not isinstance(ref, Mapping) or ref.get("controller") is not True:
                continue
            kind, name = _text(ref.get("kind")), _text(ref.get("name"))
            if kind and name:
                key = (sys.intern(kind), sys.intern(name))
                found = self._refs.get(key)
                if found is None:
                    found = OwnerRef(*key)
                    self._refs[key] = found
                return found
        return None


class PodParser:
    """Turns raw Pod objects (JSON dicts) into `Pod`s, sharing repeated strings, label sets and owners.

    Raises `MalformedObjectError`, and only that, for an object it cannot read. `containers=True` keeps each pod's
    container ids, `created=True` its creation time, `claims=True` whether a container uses a DRA ResourceClaim: the
    exporter needs all three (to tie a process's cgroup to a container, to prefer the newer of two pods that claim one
    GPU, to notice a kubelet that does not list DRA devices); the adapter, holding every pod of a cluster, keeps none.
    `serving=True` keeps what locates a pod's serving engine: its Ready condition, its `prometheus.io/` and
    `gpu-pulse.dev/` annotations (at most MAX_SERVING_ANNOTATIONS, each value at most MAX_ANNOTATION_CHARS) and its
    containers' declared ports. Not thread-safe: one parser per writer thread.
    """

    def __init__(
        self, *, containers: bool = False, created: bool = False, claims: bool = False, serving: bool = False
    ) -> None:
        self._containers = containers
        self._created = created
        self._claims = claims
        self._serving = serving
        self._labels = LabelSets()
        self._owners = OwnerRefs()

    def __call__(self, obj: Mapping[str, Any]) -> Pod:
        metadata = object_metadata(obj)
        spec = _section(obj, "spec")
        status = _section(obj, "status")
        labels = _section(metadata, "labels")
        if not all(isinstance(v, str) for v in labels.values()):
            raise MalformedObjectError("metadata.labels has a value that is not a string")
        uid = _text(metadata.get("uid"))
        return Pod(
            namespace=sys.intern(metadata["namespace"]),
            name=metadata["name"],
            uid=uid.lower() if uid else "",
            node=_intern_optional(spec.get("nodeName")),
            labels=self._labels(labels),
            phase=sys.intern(_text(status.get("phase")) or "Pending"),
            pod_ip=_text(status.get("podIP")),
            owner=self._owners.controller_of(metadata),
            created_at=_timestamp(metadata.get("creationTimestamp")) if self._created else None,
            containers=_containers(status) if self._containers else EMPTY_LABELS,
            uses_claims=self._claims and _uses_claims(spec),
            ready=_ready(status) if self._serving else None,
            annotations=self._labels(_serving_annotations(metadata)) if self._serving else EMPTY_LABELS,
            ports=_ports(spec) if self._serving else (),
        )

    @property
    def distinct_label_sets(self) -> int:
        return len(self._labels)


def object_metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The metadata of a raw namespaced object, which must have a name and a namespace."""
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(metadata, Mapping):
        raise MalformedObjectError("object without metadata")
    if not _text(metadata.get("name")) or not _text(metadata.get("namespace")):
        raise MalformedObjectError("object without metadata.name and metadata.namespace")
    return metadata


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a raw object; the namespace is "" for a cluster-scoped one (a ResourceSlice, a Node)."""
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(metadata, Mapping) or not _text(metadata.get("name")):
        raise MalformedObjectError("object without metadata.name")
    namespace = metadata.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise MalformedObjectError("metadata.namespace is not a string")
    return namespace or "", metadata["name"]


def _containers(status: Mapping[str, Any]) -> Mapping[str, str]:
    found: dict[str, str] = {}
    for key in _CONTAINER_STATUSES:
        entries = status.get(key) or ()
        if not isinstance(entries, list | tuple):
            raise MalformedObjectError(f"status.{key} is not a list")
        for entry in entries:
            if not isinstance(entry, Mapping):
                raise MalformedObjectError(f"status.{key} has an item that is not an object")
            container_id = _text(entry.get("containerID"))  # absent until the container was created
            if container_id is None:
                continue
            name = entry.get("name")
            if not isinstance(name, str):
                raise MalformedObjectError(f"status.{key} has an item without a name")
            found[_strip_runtime(container_id)] = name
    return LabelSet(found) if found else EMPTY_LABELS


def _uses_claims(spec: Mapping[str, Any]) -> bool:
    """Whether a container (init containers included) names a claim in `resources.claims` (kubernetes/api core/v1
    ResourceRequirements.Claims: "the names of resources, defined in spec.resourceClaims, that are used by this
    container"); the kubelet lists a container's DRA devices only for those."""
    for key in ("initContainers", "containers"):
        entries = spec.get(key) or ()
        for entry in entries if isinstance(entries, list | tuple) else ():
            resources = entry.get("resources") if isinstance(entry, Mapping) else None
            if isinstance(resources, Mapping) and resources.get("claims"):
                return True
    return False


# Annotations that locate a pod's metrics endpoint: Prometheus' widespread convention and gpu-pulse's own (which wins).
SERVING_ANNOTATION_PREFIXES = ("prometheus.io/", "gpu-pulse.dev/")
MAX_SERVING_ANNOTATIONS = 16
MAX_ANNOTATION_CHARS = 256
MAX_PORTS = 32


def _serving_annotations(metadata: Mapping[str, Any]) -> Mapping[str, str]:
    """The pod's `prometheus.io/` and `gpu-pulse.dev/` annotations, bounded (a tenant writes them)."""
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise MalformedObjectError("metadata.annotations is not an object")
    kept: dict[str, str] = {}
    for key, value in annotations.items():
        if isinstance(key, str) and key.startswith(SERVING_ANNOTATION_PREFIXES) and isinstance(value, str):
            kept[key] = value[:MAX_ANNOTATION_CHARS]
            if len(kept) == MAX_SERVING_ANNOTATIONS:
                break
    return kept


def _ready(status: Mapping[str, Any]) -> bool | None:
    """The pod's Ready condition (kubernetes/api core/v1 PodCondition, type "Ready"); None when not reported."""
    conditions = status.get("conditions") or ()
    for condition in conditions if isinstance(conditions, list | tuple) else ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return None


def _ports(spec: Mapping[str, Any]) -> tuple[int, ...]:
    """The TCP ports its containers declare (`containers[].ports[].containerPort`), in order, at most MAX_PORTS."""
    found: list[int] = []
    entries = spec.get("containers") or ()
    for entry in entries if isinstance(entries, list | tuple) else ():
        ports = entry.get("ports") if isinstance(entry, Mapping) else None
        for port in ports if isinstance(ports, list | tuple) else ():
            if not isinstance(port, Mapping) or port.get("protocol", "TCP") != "TCP":
                continue
            number = port.get("containerPort")
            if isinstance(number, int) and 0 < number < 65536 and number not in found:
                found.append(number)
    return tuple(found[:MAX_PORTS])


def _strip_runtime(container_id: str) -> str:
    """`containerd://ABC` -> `abc`: the form cgroup paths use."""
    return container_id.split("://", 1)[-1].lower()


def _timestamp(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):  # not a timestamp, or one out of the platform's range
        return None


def _intern_optional(value: Any) -> str | None:
    return sys.intern(value) if isinstance(value, str) and value else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _section(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MalformedObjectError(f"{key} is not an object")
    return value
