"""List, then watch from the list's resourceVersion, forever: one Kubernetes resource kept in step with the API server.

`ListWatch.run` is a thread's body (the `kubernetes` client blocks). The list is paged, so a cluster of 10,000 pods
never sits in memory as one JSON document: each page's raw JSON items are reduced to compact records (by the `parse`
the user gives) before the next page is asked for. The watch resumes from the last resourceVersion it saw (events and
bookmarks); an expired resourceVersion (410 Gone) is answered by a fresh list, any other failure by a retry after a
jittered exponential backoff (`toolkit.backoff`). A malformed item is skipped and logged, never fatal. Another thread
ends a blocked watch at once with `interrupt()`. What happened is counted in `stats`, for self-metrics.

Items are never deserialized into the client's models (slow, and large): lists and watches are read as raw JSON.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from toolkit.backoff import Backoff, Draw
from toolkit.pods import object_key

log = logging.getLogger(__name__)

T = TypeVar("T")

ListFunc = Callable[..., Any]  # a list function of the `kubernetes` client, e.g. CoreV1Api.list_pod_for_all_namespaces

_GONE = 410
_UNSERVED = (403, 404)  # forbidden by RBAC, or the resource is not served
_APPLIED = ("ADDED", "MODIFIED", "DELETED")


@dataclass(frozen=True, slots=True)
class ListWatchStats:
    """What one list-and-watch loop has done so far. Replaced (never mutated) by the loop's thread."""

    synced: bool = False  # a complete list has arrived (what it gave stays in use through outages)
    connected: bool = False  # the last list or watch request was answered
    unserved: bool = False  # the last list was refused with 403 or 404 (RBAC, or a resource the server lacks)
    lists: int = 0  # complete lists
    relists: int = 0  # lists again because the resourceVersion expired (410 Gone)
    watches: int = 0  # watch requests answered
    events: int = 0  # ADDED, MODIFIED and DELETED events applied
    bookmarks: int = 0
    skipped: int = 0  # malformed items left out
    errors: int = 0  # failed list and watch requests (an expired resourceVersion is not one)
    resource_version: str = ""
    last_error: str = ""  # the latest failure, kept after recovery ("" before any)


class WatchStatusError(Exception):
    """An ERROR event in a watch stream: the API server's Status, with its HTTP `status` code."""

    def __init__(self, status: int | None, reason: str) -> None:
        super().__init__(f"watch error {status}: {reason}")
        self.status = status
        self.reason = reason


class ListWatch(Generic[T]):
    """Keeps one resource in step: `replace` after each full list, then `upsert`/`remove` per watch event.

    `parse` turns a raw item into a `T` (raising for a malformed one); `remove` gets the (namespace, name) of a deleted
    object. `field_selector` narrows the resource (`spec.nodeName=<node>` for one node's pods). `draw` is the random
    draw for backoff jitter and the spread of watch timeouts.
    """

    def __init__(
        self,
        *,
        name: str,
        list_func: ListFunc,
        parse: Callable[[Mapping[str, Any]], T],
        replace: Callable[[list[T]], None],
        upsert: Callable[[T], None],
        remove: Callable[[str, str], None],
        field_selector: str | None = None,
        page_size: int = 500,
        watch_timeout_seconds: int = 300,
        request_timeout: float = 30.0,
        backoff: Backoff | None = None,
        draw: Draw = random.random,
    ) -> None:
        if page_size <= 0 or watch_timeout_seconds <= 0 or request_timeout <= 0:
            raise ValueError("page size, watch timeout and request timeout must be positive")
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
        self._draw = draw
        self._stats = ListWatchStats()
        self._resume_from: str | None = None  # the last resourceVersion seen; None: list first
        self._progressed = False  # the current watch has brought an event or a bookmark
        self._failing = False  # requests fail since the last answer (logged once, at the start)
        self._response: Any = None  # the watch stream being read, for interrupt()
        self._response_lock = threading.Lock()

    @property
    def stats(self) -> ListWatchStats:
        return self._stats

    def run(self, stopping: threading.Event) -> None:
        """The thread's body: returns once `stopping` is set (then call `interrupt()` to end a blocked watch at once).

        A watch that breaks resumes from the last resourceVersion it saw, not from where it started.
        """
        failures = 0
        while not stopping.is_set():
            expired = False
            self._progressed = False
            try:
                if self._resume_from is None:
                    self._resume_from = self._list()
                self._watch(self._resume_from, stopping)
                failures = 0 if self._progressed else failures + 1  # a stream that ends at once, empty, must not spin
            except Exception as error:
                if stopping.is_set():
                    break
                failures = 1 if self._progressed else failures + 1  # a watch that broke after events starts over
                expired = _status(error) == _GONE
                if expired:
                    log.info("%s: resourceVersion %s is gone (410); listing again", self.name, self._resume_from)
                    self._count(relists=self._stats.relists + 1, last_error=_describe(error))
                    self._resume_from = None
                else:
                    self._failed(error, failures, listing=self._resume_from is None)
            if failures and not stopping.is_set():
                # a first 410 lists again at once; anything else, or trouble that repeats, backs off
                stopping.wait(0.0 if expired and failures == 1 else self._backoff.delay(failures, self._draw))

    def interrupt(self) -> None:
        """End a watch in progress from another thread: its blocked read returns at once."""
        with self._response_lock:
            response = self._response
        if response is not None:
            _shut_down(response)

    # ---- the list ----------------------------------------------------------------------------------------------------
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
            if not isinstance(body, Mapping):
                raise ValueError("the list answer is not a JSON object")
            skipped = 0
            for obj in body.get("items") or ():
                try:
                    items.append(self._parse(obj))
                except Exception as error:  # one bad object must not stop the list
                    skipped += 1
                    log.warning("%s: skipping a malformed item: %s", self.name, error)
            metadata = body.get("metadata") or {}
            resource_version = str(metadata.get("resourceVersion") or resource_version)
            token = metadata.get("continue") or None
            if skipped:
                self._count(skipped=self._stats.skipped + skipped)
            if token is None:
                break
        self._replace(items)
        self._recovered()
        self._count(
            synced=True,
            connected=True,
            unserved=False,
            lists=self._stats.lists + 1,
            resource_version=resource_version,
        )
        log.info("%s: listed %d at resourceVersion %s", self.name, len(items), resource_version)
        return resource_version

    # ---- the watch ---------------------------------------------------------------------------------------------------
    def _watch(self, resource_version: str, stopping: threading.Event) -> None:
        """Follow one watch request until the server ends it, advancing `_resume_from` with every event and bookmark
        (and setting `_progressed`)."""
        timeout = int(self._watch_timeout * (1 + self._draw()))  # spread reconnects, as client-go does
        response = self._list_func(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout,
            field_selector=self._field_selector,
            _preload_content=False,
            _request_timeout=(self._request_timeout, timeout + self._request_timeout),
        )
        with self._response_lock:
            self._response = response
        try:
            if stopping.is_set():  # set before interrupt() could see this response
                return
            self._count(connected=True, watches=self._stats.watches + 1)
            for line in _lines(response):
                self._resume_from = self._apply(json.loads(line)) or self._resume_from
                if not self._progressed:
                    self._progressed = True
                    self._recovered()
                if stopping.is_set():
                    break
        finally:
            with self._response_lock:
                self._response = None
            response.release_conn()
            self._count(resource_version=self._resume_from or "")

    def _apply(self, event: Any) -> str | None:
        """Apply one watch event; returns its resourceVersion (None when it has none)."""
        if not isinstance(event, Mapping):
            raise ValueError("a watch event that is not a JSON object")
        kind = event.get("type")
        obj = event.get("object")
        if kind == "ERROR":
            status = obj if isinstance(obj, Mapping) else {}
            code = status.get("code")
            raise WatchStatusError(code if isinstance(code, int) else None, str(status.get("message") or ""))
        if not isinstance(obj, Mapping):
            return None
        metadata = obj.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
        if kind == "BOOKMARK":
            self._count(bookmarks=self._stats.bookmarks + 1)
        elif kind in _APPLIED:
            try:
                if kind == "DELETED":
                    self._remove(*object_key(obj))
                else:
                    self._upsert(self._parse(obj))
            except Exception as error:  # one bad object must not stop the stream
                self._count(skipped=self._stats.skipped + 1)
                log.warning("%s: skipping a malformed %s event: %s", self.name, kind, error)
            else:
                self._count(events=self._stats.events + 1)
        return str(version) if version else None

    # ---- stats -------------------------------------------------------------------------------------------------------
    def _failed(self, error: Exception, failures: int, *, listing: bool) -> None:
        message = _describe(error)
        status = _status(error)
        self._count(
            connected=False,
            errors=self._stats.errors + 1,
            last_error=message,
            unserved=self._stats.unserved or (listing and status in _UNSERVED),
        )
        if not self._failing:
            self._failing = True
            log.warning("%s: %s failed: %s; retrying with backoff", self.name, "list" if listing else "watch", message)
        else:
            log.debug("%s: failed again (%d in a row): %s", self.name, failures, message)

    def _recovered(self) -> None:
        if self._failing:
            self._failing = False
            log.info("%s: the API server answers again", self.name)

    def _count(self, **changes: Any) -> None:
        self._stats = replace(self._stats, **changes)


def _status(error: Exception) -> int | None:
    """The HTTP status of an API error (the client's ApiException, or an ERROR event), else None."""
    status = getattr(error, "status", None)
    return status if isinstance(status, int) and status > 0 else None


def _describe(error: Exception) -> str:
    status = _status(error)
    if status is not None:
        return f"HTTP {status} {getattr(error, 'reason', '') or ''}".strip().splitlines()[0][:300]
    return f"{type(error).__name__}: {error}".splitlines()[0][:300]


def _shut_down(response: Any) -> None:
    """End a blocked read of a streaming response from another thread.

    Closing the response would wait for the reader's buffer lock, i.e. for the next event or the server's timeout;
    shutting the socket down makes the blocked read return at once.
    """
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        log.debug("the watch connection was already closed", exc_info=True)


def _lines(response: Any) -> Iterator[str]:
    """The newline-separated JSON events of a streaming HTTP response."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            if raw.strip():
                yield raw.decode("utf-8")
    if pending.strip():
        yield pending.decode("utf-8")


class WatchThread:
    """One `ListWatch` on a daemon thread of its own: `start()`, `close()` (which ends a blocked watch at once) and
    `wait_synced()`. The exporter's node-scoped watches (pods, ResourceSlices) run this way."""

    def __init__(self, loop: ListWatch[Any], thread_name: str) -> None:
        self.loop = loop
        self._thread_name = thread_name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def of_node(
        cls,
        what: str,
        node_name: str,
        list_func: ListFunc,
        *,
        parse: Callable[[Mapping[str, Any]], T],
        replace: Callable[[list[T]], None],
        upsert: Callable[[T], None],
        remove: Callable[[str, str], None],
        watch_timeout_seconds: int = 300,
        request_timeout: float = 10.0,
        backoff: Backoff | None = None,
        draw: Draw = random.random,
    ) -> WatchThread:
        """One node's `what` (pods, ResourceSlices): a list and watch narrowed by `spec.nodeName`, on its own thread."""
        if not node_name:
            raise ValueError(f"the {what} watch needs the node name (--node-name or NODE_NAME)")
        loop = ListWatch(
            name=f"{what} watch on node {node_name}",
            list_func=list_func,
            parse=parse,
            replace=replace,
            upsert=upsert,
            remove=remove,
            field_selector=f"spec.nodeName={node_name}",
            watch_timeout_seconds=watch_timeout_seconds,
            request_timeout=request_timeout,
            backoff=backoff or Backoff(initial=0.5, maximum=30.0),
            draw=draw,
        )
        return cls(loop, f"{what.lower()}-watch")

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self.loop.run, args=(self._stop,), name=self._thread_name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self.loop.interrupt()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=2.0)

    def wait_synced(self, timeout: float) -> bool:
        """Block until the first list arrived (for start-up and tests); True when synced."""
        deadline = time.monotonic() + timeout
        while not self.loop.stats.synced and time.monotonic() < deadline and not self._stop.is_set():
            self._stop.wait(0.02)
        return self.loop.stats.synced
