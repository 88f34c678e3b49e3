"""This node's ResourceSlices, kept current by list + watch on a background thread (`--kubernetes`).

Lists `resource.k8s.io/v1` ResourceSlices with the field selector `spec.nodeName=<node>` (kubernetes/api
resource/v1/types.go, ResourceSliceSpec.NodeName: "A field selector can be used to list only ResourceSlice objects
belonging to a certain node"), so only this node's slices travel; then watches from the list's resourceVersion. A
watch that expires (410 Gone) is answered by a fresh list, a broken connection by a reconnect after a jittered
backoff. The index is replaced, never mutated.

RBAC: `get`, `list`, `watch` on `resourceslices` in the API group `resource.k8s.io` (deploy/base).
"""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from exporter.attribution.resourceslices import ResourceSliceIndex, slice_from_object
from exporter.kubelet.client import Backoff

log = logging.getLogger(__name__)

HTTP_GONE = 410


@dataclass(frozen=True, slots=True)
class SliceWatchStatus:
    synced: bool = False  # a complete list has arrived (the index stays in use through outages)
    connected: bool = False
    devices: int = 0
    errors_total: int = 0
    last_error: str | None = None


class ResourceSliceWatch:
    """The DRA devices of one node, from its ResourceSlices. A DraDevices."""

    def __init__(
        self,
        api_client: Any,
        node_name: str,
        *,
        watch_timeout_seconds: int = 300,
        request_timeout: float = 10.0,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], bool] | None = None,
    ) -> None:
        from kubernetes import client

        if not node_name:
            raise ValueError("the ResourceSlice watch needs the node name (--node-name or NODE_NAME)")
        self._api: Any = client.ResourceV1Api(api_client)
        self.node_name = node_name
        self.watch_timeout_seconds = watch_timeout_seconds
        self.request_timeout = request_timeout
        self.backoff = backoff or Backoff(initial=0.5, maximum=30.0)
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._index = ResourceSliceIndex()
        self._status = SliceWatchStatus()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    def uuid_of(self, driver: str, pool: str, device: str) -> str | None:
        return self._index.uuid_of(driver, pool, device)

    @property
    def index(self) -> ResourceSliceIndex:
        return self._index

    @property
    def status(self) -> SliceWatchStatus:
        return self._status

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="resourceslice-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        sock = getattr(getattr(self._response, "connection", None), "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # ends a blocked read at once
            except OSError:
                log.debug("the ResourceSlice watch connection was already closed", exc_info=True)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=2.0)

    def _run(self) -> None:
        failures = 0
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                version = self._watch(version)
                failures = 0
            except _Gone:
                version = None
            except Exception as error:  # any failure of the API or the connection: back off, retry
                if self._stop.is_set():
                    return
                failures += 1
                message = f"ResourceSlice watch on node {self.node_name}: {type(error).__name__}: {error}"
                if failures == 1:
                    log.warning("%s; retrying with backoff", message.splitlines()[0])
                self._status = replace(
                    self._status,
                    connected=False,
                    errors_total=self._status.errors_total + 1,
                    last_error=message.splitlines()[0],
                )
                if self._sleep(self.backoff.delay(failures, self._rng)):
                    return

    def _selector(self) -> str:
        return f"spec.nodeName={self.node_name}"

    def _list(self) -> str:
        response = self._api.list_resource_slice(
            field_selector=self._selector(), _preload_content=False, _request_timeout=self.request_timeout
        )
        try:
            document = json.loads(response.data)
        finally:
            response.release_conn()
        slices = [entry for item in document.get("items") or () if (entry := slice_from_object(item)) is not None]
        self._publish(ResourceSliceIndex(slices))
        self._status = replace(self._status, synced=True, connected=True, last_error=None)
        return str((document.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        try:
            response = self._api.list_resource_slice(
                field_selector=self._selector(),
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=version,
                timeout_seconds=self.watch_timeout_seconds,
                _preload_content=False,
                _request_timeout=(self.request_timeout, self.watch_timeout_seconds + self.request_timeout),
            )
        except Exception as error:  # the client raises ApiException for an HTTP error status
            if getattr(error, "status", None) == HTTP_GONE:
                raise _Gone from None
            raise
        self._response = response
        try:
            if response.status == HTTP_GONE:
                raise _Gone
            if not 200 <= response.status <= 299:
                raise RuntimeError(f"watch answered HTTP {response.status}")
            self._status = replace(self._status, connected=True, last_error=None)
            for line in _lines(response):
                if self._stop.is_set():
                    break
                version = self._apply(json.loads(line), version)
        finally:
            self._response = None
            response.release_conn()
        return version

    def _apply(self, event: dict[str, Any], version: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == HTTP_GONE:
                raise _Gone
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
        entry = slice_from_object(obj) if kind in ("ADDED", "MODIFIED", "DELETED") else None
        if entry is not None:
            index = self._index.without(entry.name) if kind == "DELETED" else self._index.replaced(entry)
            self._publish(index)
        new_version = (obj.get("metadata") or {}).get("resourceVersion")
        return str(new_version) if new_version else version

    def _publish(self, index: ResourceSliceIndex) -> None:
        self._index = index
        self._status = replace(self._status, devices=len(index))


class _Gone(Exception):  # noqa: N818  (a control-flow signal: the watch's resourceVersion expired)
    pass


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
