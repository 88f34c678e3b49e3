"""List, then watch from the list's resourceVersion, forever: one resource kept in step with the API server.

Runs in its own thread (the `kubernetes` client blocks). The list is paged, so a cluster of 10,000 pods never sits in
memory as one JSON document; items are reduced to compact records page by page. The watch resumes from the last
resourceVersion it saw (events and bookmarks), re-lists on 410 Gone, and reconnects with capped exponential backoff
and jitter after any other error. A malformed item is skipped and logged, never fatal.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from adapter.podcache.podinfo import object_key
from toolkit.backoff import Backoff

log = logging.getLogger(__name__)

T = TypeVar("T")

_GONE = 410
_UNSERVED = (403, 404)  # forbidden by RBAC, or the resource is not served


@dataclass(slots=True)
class ReflectorStats:
    lists: int = 0
    watches: int = 0
    events: int = 0
    errors: int = 0
    resource_version: str = ""
    last_error: str = ""


class Reflector(Generic[T]):
    """Keeps one resource in step: `replace` after each full list, then `upsert`/`remove` per watch event."""

    def __init__(
        self,
        *,
        name: str,
        list_func: Callable[..., Any],
        parse: Callable[[Mapping[str, Any]], T],
        replace: Callable[[list[T]], None],
        upsert: Callable[[T], None],
        remove: Callable[[str, str], None],
        field_selector: str | None = None,
        page_size: int = 500,
        watch_timeout_seconds: int = 300,
        request_timeout: float = 30.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.name = name
        self._list_func = list_func
        self._parse = parse
        self._replace = replace
        self._upsert = upsert
        self._remove = remove
        self._field_selector = field_selector
        self._page_size = page_size
        self._watch_timeout = watch_timeout_seconds
        self._request_timeout = request_timeout
        self._backoff = backoff or Backoff()
        self._watch: watch.Watch | None = None
        self._watch_lock = threading.Lock()
        self.synced = threading.Event()
        self.unserved = threading.Event()  # the API answered 403/404 to the list: RBAC or an old server
        self.stats = ReflectorStats()

    def run(self, stopping: threading.Event) -> None:
        """The thread's body: returns when `stopping` is set (and `interrupt()` was called to end a blocked watch)."""
        resource_version: str | None = None
        failures = 0
        while not stopping.is_set():
            gone = False
            try:
                if resource_version is None:
                    resource_version = self._list()
                    self.synced.set()
                resource_version, seen = self._watch_from(resource_version, stopping)
                failures = 0 if seen else failures + 1  # a stream that ends at once, empty, must not spin
            except Exception as e:
                if stopping.is_set():
                    break
                self.stats.errors += 1
                self.stats.last_error = _describe(e)
                status = e.status if isinstance(e, ApiException) else None
                gone = status == _GONE
                if gone:
                    log.info("%s: resourceVersion %s is gone (410); listing again", self.name, resource_version)
                    resource_version = None
                else:
                    if status in _UNSERVED and resource_version is None:
                        self.unserved.set()
                    log.warning("%s: list/watch failed: %s", self.name, self.stats.last_error)
                failures += 1
            if failures and not stopping.is_set():
                # a first 410 lists again at once; anything else, or trouble that repeats, backs off
                stopping.wait(0.0 if gone and failures == 1 else self._backoff.delay(failures))

    def interrupt(self) -> None:
        """Unblock a watch in progress (from another thread)."""
        with self._watch_lock:
            if self._watch is not None:
                self._watch.stop()  # type: ignore[no-untyped-call]

    def _list(self) -> str:
        items: list[T] = []
        token: str | None = None
        resource_version = ""
        while True:
            response = self._list_func(
                limit=self._page_size,
                _continue=token,
                field_selector=self._field_selector,
                _preload_content=False,
                _request_timeout=self._request_timeout,
            )
            try:
                body = json.loads(response.data)
            finally:
                response.release_conn()
            for obj in body.get("items") or ():
                try:
                    items.append(self._parse(obj))
                except Exception as e:  # one bad object must not stop the stream
                    log.warning("%s: skipping a malformed item: %s", self.name, e)
            metadata = body.get("metadata") or {}
            resource_version = str(metadata.get("resourceVersion") or resource_version)
            token = metadata.get("continue") or None
            if token is None:
                break
        self._replace(items)
        self.stats.lists += 1
        self.stats.resource_version = resource_version
        log.info("%s: listed %d at resourceVersion %s", self.name, len(items), resource_version)
        return resource_version

    def _watch_from(self, resource_version: str, stopping: threading.Event) -> tuple[str, bool]:
        w = watch.Watch()  # type: ignore[no-untyped-call]
        with self._watch_lock:
            self._watch = w
        if stopping.is_set():
            return resource_version, True
        self.stats.watches += 1
        timeout = int(self._watch_timeout * (1 + random.random()))  # spread reconnects, as client-go does
        seen = False
        try:
            # A function without a declared return type makes Watch hand out the raw JSON objects (no model
            # deserialization: it is slow and large, and we keep only a few fields).
            def call(**kwargs: Any) -> object:
                return self._list_func(**kwargs)

            for event in w.stream(  # type: ignore[no-untyped-call]
                call,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout,
                field_selector=self._field_selector,
                _request_timeout=(self._request_timeout, timeout + self._request_timeout),
            ):
                seen = True
                resource_version = self._apply(event) or resource_version
                self.stats.resource_version = resource_version
                if stopping.is_set():
                    break
        finally:
            with self._watch_lock:
                self._watch = None
        return resource_version, seen

    def _apply(self, event: Mapping[str, Any]) -> str | None:
        kind = event.get("type")
        obj = event.get("raw_object") or event.get("object")
        if not isinstance(obj, Mapping):
            return None
        self.stats.events += 1
        try:
            if kind in ("ADDED", "MODIFIED"):
                self._upsert(self._parse(obj))
            elif kind == "DELETED":
                self._remove(*object_key(obj))
        except Exception as e:  # one bad object must not stop the stream
            log.warning("%s: skipping a malformed %s event: %s", self.name, kind, e)
        metadata = obj.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
        return str(version) if version else None


def _describe(e: Exception) -> str:
    if isinstance(e, ApiException):
        return f"HTTP {e.status} {e.reason or ''}".strip()
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]
