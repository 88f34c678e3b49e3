"""The pods of this node as attribution looks them up: by UID (from a process's cgroup) and by namespace/name (from
pod-resources). `PodWatch` keeps such a directory current from the Kubernetes API; `StaticPodDirectory` holds a
fixed set (the simulated node's pods, where no API server runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Protocol

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PodMeta:
    """What attribution needs to know about one pod on this node."""

    uid: str  # lower case
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    phase: str = ""  # Pending, Running, Succeeded, Failed, Unknown
    created_at: float | None = None  # epoch seconds
    containers: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # container id (lower-case hex) -> name

    @property
    def terminated(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


class PodDirectory(Protocol):
    """The look-ups attribution makes."""

    def by_uid(self, uid: str) -> PodMeta | None: ...

    def by_name(self, namespace: str, name: str) -> PodMeta | None: ...


@dataclass(frozen=True, slots=True)
class DirectoryStatus:
    synced: bool = False  # a complete list of the node's pods has arrived (the cache stays in use through outages)
    connected: bool = False  # the watch is running now
    pods: int = 0
    errors_total: int = 0
    last_error: str | None = None
    relists_total: int = 0


class StaticPodDirectory:
    """A fixed set of pods. Has the same lifecycle and status as PodWatch, so either can feed the attributor."""

    def __init__(self, pods: Iterable[PodMeta]) -> None:
        listed = tuple(pods)
        self._by_uid = {p.uid.lower(): p for p in listed}
        self._by_name = {(p.namespace, p.name): p for p in listed}
        self.status = DirectoryStatus(synced=True, connected=False, pods=len(listed))

    @property
    def watches(self) -> bool:
        """False: no watch runs, so there is no watch to report on."""
        return False

    def by_uid(self, uid: str) -> PodMeta | None:
        return self._by_uid.get(uid.lower())

    def by_name(self, namespace: str, name: str) -> PodMeta | None:
        return self._by_name.get((namespace, name))

    def start(self) -> None:
        """Nothing to start: the pods are given."""

    def close(self) -> None:
        """Nothing to stop."""


def _strip_runtime(container_id: str) -> str:
    """`containerd://abc` -> `abc`: the form cgroup paths use."""
    return container_id.split("://", 1)[-1].lower()


def _timestamp(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def pod_meta_from_object(obj: object) -> PodMeta | None:
    """A PodMeta from a pod as the API sends it (JSON); None when it lacks a uid, namespace or name."""
    metadata = _mapping(_mapping(obj).get("metadata"))
    status = _mapping(_mapping(obj).get("status"))
    uid, namespace, name = metadata.get("uid"), metadata.get("namespace"), metadata.get("name")
    if not (isinstance(uid, str) and isinstance(namespace, str) and isinstance(name, str) and uid):
        return None
    labels = {str(k): str(v) for k, v in _mapping(metadata.get("labels")).items()}
    containers: dict[str, str] = {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        entries = status.get(key)
        for entry in entries if isinstance(entries, list) else ():
            container_id = _mapping(entry).get("containerID")
            if isinstance(container_id, str) and container_id:
                containers[_strip_runtime(container_id)] = str(_mapping(entry).get("name", ""))
    phase = status.get("phase")
    return PodMeta(
        uid=uid.lower(),
        namespace=namespace,
        name=name,
        labels=MappingProxyType(labels) if labels else _EMPTY,
        phase=phase if isinstance(phase, str) else "",
        created_at=_timestamp(metadata.get("creationTimestamp")),
        containers=MappingProxyType(containers) if containers else _EMPTY,
    )
