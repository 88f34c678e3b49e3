"""What the adapter knows of a pod: the few fields its API needs, parsed from the watch's raw objects.

Only these fields are kept (a full Pod object is kilobytes; this is a few hundred bytes), with namespaces, nodes,
phases, owners and labels shared between pods rather than stored once per pod.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapter.podcache.labelset import LabelSets


@dataclass(frozen=True, slots=True, weakref_slot=True)
class OwnerRef:
    """A pod's top controller: Deployment (through its ReplicaSet), StatefulSet, DaemonSet, Job, or a bare
    ReplicaSet."""

    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    node: str | None
    labels: Mapping[str, str]
    phase: str
    pod_ip: str | None
    owner: OwnerRef | None


class MalformedObjectError(ValueError):
    """A watch or list item that is not a well-formed object."""


def _intern_optional(value: Any) -> str | None:
    return sys.intern(value) if isinstance(value, str) and value else None


class OwnerRefs:
    """Shares one `OwnerRef` per (kind, name) among the pods that have it. Not thread-safe: one per writer thread."""

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


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(metadata, Mapping):
        raise MalformedObjectError("object without metadata")
    if not _text(metadata.get("name")) or not _text(metadata.get("namespace")):
        raise MalformedObjectError("object without metadata.name and metadata.namespace")
    return metadata


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _section(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MalformedObjectError(f"{key} is not an object")
    return value


class PodParser:
    """Turns raw Pod objects (JSON dicts) into `PodInfo`, sharing repeated strings, label sets and owners."""

    def __init__(self) -> None:
        self._labels = LabelSets()
        self._owners = OwnerRefs()

    def __call__(self, obj: Mapping[str, Any]) -> PodInfo:
        metadata = _metadata(obj)
        spec = _section(obj, "spec")
        status = _section(obj, "status")
        labels = _section(metadata, "labels")
        if not all(isinstance(v, str) for v in labels.values()):
            raise MalformedObjectError("metadata.labels has a value that is not a string")
        return PodInfo(
            namespace=sys.intern(metadata["namespace"]),
            name=metadata["name"],
            uid=_text(metadata.get("uid")) or "",
            node=_intern_optional(spec.get("nodeName")),
            labels=self._labels(labels),
            phase=sys.intern(_text(status.get("phase")) or "Pending"),
            pod_ip=_text(status.get("podIP")),
            owner=self._owners.controller_of(metadata),
        )

    @property
    def distinct_label_sets(self) -> int:
        return len(self._labels)


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a raw object."""
    metadata = _metadata(obj)
    return metadata["namespace"], metadata["name"]
