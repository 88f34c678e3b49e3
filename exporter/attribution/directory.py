"""The pods of this node as attribution looks them up: by UID (from a process's cgroup) and by namespace/name (from
pod-resources). `PodWatch` keeps such a directory current from the Kubernetes API; `StaticPodDirectory` holds a
fixed set (the simulated node's pods, where no API server runs). A pod is a `toolkit.pods.Pod`, with its containers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from toolkit.pods import Pod


class PodDirectory(Protocol):
    """The look-ups attribution makes."""

    def by_uid(self, uid: str) -> Pod | None: ...

    def by_name(self, namespace: str, name: str) -> Pod | None: ...


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

    def __init__(self, pods: Iterable[Pod]) -> None:
        listed = tuple(pods)
        self._by_uid = {p.uid.lower(): p for p in listed}
        self._by_name = {(p.namespace, p.name): p for p in listed}
        self.status = DirectoryStatus(synced=True, connected=False, pods=len(listed))

    @property
    def watches(self) -> bool:
        """False: no watch runs, so there is no watch to report on."""
        return False

    def by_uid(self, uid: str) -> Pod | None:
        return self._by_uid.get(uid.lower())

    def by_name(self, namespace: str, name: str) -> Pod | None:
        return self._by_name.get((namespace, name))

    def start(self) -> None:
        """Nothing to start: the pods are given."""

    def close(self) -> None:
        """Nothing to stop."""
