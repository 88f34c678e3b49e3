"""The test server's storage: objects by resource, one resourceVersion counter, and the event history that
watches replay (compaction makes older versions answer 410 Gone). Thread-safe."""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from simulation.kubeapi.objects import KINDS, UID_NAMESPACE, JsonObject

Clock = Callable[[], datetime]


@dataclass(frozen=True, slots=True)
class Event:
    rv: int
    resource: str
    type: str  # ADDED, MODIFIED, DELETED
    obj: JsonObject
    old: JsonObject | None


class ExpiredError(Exception):
    pass


@dataclass(slots=True)
class Store:
    clock: Clock
    history_limit: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    rv: int = 1000
    compacted_rv: int = 1000
    objects: dict[str, dict[tuple[str, str], JsonObject]] = field(default_factory=lambda: {r: {} for r in KINDS})
    history: list[Event] = field(default_factory=list)

    def put(self, resource: str, obj: Mapping[str, Any]) -> JsonObject:
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        key = (meta.get("namespace", ""), meta["name"])
        with self.lock:
            self.rv += 1
            old = self.objects[resource].get(key)
            if old is not None:
                meta.setdefault("uid", old["metadata"]["uid"])
                meta.setdefault("creationTimestamp", old["metadata"]["creationTimestamp"])
            meta.setdefault("uid", str(uuid.uuid5(UID_NAMESPACE, f"{resource}/{key[0]}/{key[1]}/{self.rv}")))
            meta.setdefault("creationTimestamp", self.clock().strftime("%Y-%m-%dT%H:%M:%SZ"))
            meta["resourceVersion"] = str(self.rv)
            self.objects[resource][key] = stored
            self._record(Event(self.rv, resource, "ADDED" if old is None else "MODIFIED", stored, old))
        return copy.deepcopy(stored)

    def delete(self, resource: str, namespace: str, name: str) -> bool:
        with self.lock:
            old = self.objects[resource].pop((namespace, name), None)
            if old is None:
                return False
            self.rv += 1
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(self.rv)
            self._record(Event(self.rv, resource, "DELETED", gone, old))
            return True

    def _record(self, event: Event) -> None:
        self.history.append(event)
        if len(self.history) > 2 * self.history_limit:
            dropped = self.history[: -self.history_limit]
            self.compacted_rv = dropped[-1].rv
            del self.history[: -self.history_limit]

    def compact(self) -> None:
        with self.lock:
            self.compacted_rv = self.rv
            self.history.clear()

    def snapshot(self, resource: str) -> tuple[int, list[JsonObject]]:
        with self.lock:
            return self.rv, [self.objects[resource][k] for k in sorted(self.objects[resource])]

    def get(self, resource: str, namespace: str, name: str) -> JsonObject | None:
        with self.lock:
            return self.objects[resource].get((namespace, name))

    def events_after(self, rv: int, resource: str) -> tuple[int, list[Event]]:
        with self.lock:
            if rv < self.compacted_rv:
                raise ExpiredError(f"too old resource version: {rv} ({self.compacted_rv})")
            lo, hi = 0, len(self.history)
            while lo < hi:  # first event with rv > the cursor
                mid = (lo + hi) // 2
                if self.history[mid].rv <= rv:
                    lo = mid + 1
                else:
                    hi = mid
            return self.rv, [e for e in self.history[lo:] if e.resource == resource]


def translate(event: Event, selected: Callable[[Mapping[str, Any]], bool]) -> tuple[str, JsonObject] | None:
    """An event as a watcher with a selector sees it: objects entering or leaving the selection are ADDED/DELETED."""
    now = event.type != "DELETED" and selected(event.obj)
    before = event.old is not None and selected(event.old)
    if event.type == "DELETED":
        return ("DELETED", event.obj) if before else None
    if now and before:
        return ("MODIFIED", event.obj)
    if now:
        return ("ADDED", event.obj)
    if before:
        return ("DELETED", event.obj)
    return None
