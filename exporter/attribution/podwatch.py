"""Pod UID -> pod, from a watch on this node's pods through the Kubernetes API (`--kubernetes`).

pod-resources names pods but gives no UID, and a process's cgroup gives the UID but no name: this watch joins the two.
It lists the pods with `spec.nodeName=<node>`, then watches from the list's resourceVersion on its own thread. A watch
that expires (410 Gone) is answered by a fresh list; a broken connection by a reconnect after a jittered backoff. The
cache is replaced, never mutated, so readers on other threads always see one consistent mapping.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from exporter.attribution.directory import DirectoryStatus, PodMeta, pod_meta_from_object
from exporter.kubelet.client import Backoff

log = logging.getLogger(__name__)

HTTP_GONE = 410


class PodWatchConfigError(RuntimeError):
    """The Kubernetes client could not be configured (no in-cluster service account, unreadable kubeconfig)."""


def kube_api_client(kubeconfig: Path | str | None = None) -> Any:
    """A kubernetes ApiClient from `kubeconfig`, or from the in-cluster service account when it is None."""
    from kubernetes import client, config  # only with --kubernetes

    try:
        if kubeconfig is not None:
            return config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return client.ApiClient(configuration)
    except (config.ConfigException, OSError, ValueError, TypeError) as error:
        where = f"kubeconfig {kubeconfig}" if kubeconfig is not None else "the in-cluster service account"
        raise PodWatchConfigError(
            f"--kubernetes: cannot configure the Kubernetes client from {where}: {error}"
        ) from None


class PodWatch:
    """The pods of one node, kept current by list + watch on a background thread. A PodDirectory."""

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
            raise ValueError("the pod watch needs the node name (--node-name or NODE_NAME)")
        self._api: Any = client.CoreV1Api(api_client)
        self.node_name = node_name
        self.watch_timeout_seconds = watch_timeout_seconds
        self.request_timeout = request_timeout
        self.backoff = backoff or Backoff(initial=0.5, maximum=30.0)
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._by_uid: Mapping[str, PodMeta] = MappingProxyType({})
        self._by_name: Mapping[tuple[str, str], PodMeta] = MappingProxyType({})
        self._status = DirectoryStatus()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    # ---- PodDirectory --------------------------------------------------------------------------------------------
    def by_uid(self, uid: str) -> PodMeta | None:
        return self._by_uid.get(uid.lower())

    def by_name(self, namespace: str, name: str) -> PodMeta | None:
        return self._by_name.get((namespace, name))

    @property
    def status(self) -> DirectoryStatus:
        return self._status

    @property
    def watches(self) -> bool:
        return True

    def pods(self) -> tuple[PodMeta, ...]:
        return tuple(self._by_uid.values())

    # ---- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        _interrupt(self._response)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=2.0)
        self._status = replace(self._status, connected=False)  # a stopped watch is not connected

    def wait_synced(self, timeout: float) -> bool:
        """Block until the first list arrived (for start-up and tests); True when synced."""
        deadline = time.monotonic() + timeout
        while not self._status.synced and time.monotonic() < deadline and not self._stop.is_set():
            self._stop.wait(0.02)
        return self._status.synced

    # ---- the loop ------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        resource_version: str | None = None
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._list()
                resource_version = self._watch(resource_version)
                failures = 0
            except _Gone:
                resource_version = None
                self._status = replace(self._status, relists_total=self._status.relists_total + 1)
            except Exception as error:  # any failure of the API or the connection: back off, retry
                if self._stop.is_set():
                    return
                failures += 1
                message = f"pod watch on node {self.node_name}: {type(error).__name__}: {error}"
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
        response = self._api.list_pod_for_all_namespaces(
            field_selector=self._selector(), _preload_content=False, _request_timeout=self.request_timeout
        )
        try:
            document = json.loads(response.data)
        finally:
            response.release_conn()
        pods = [meta for item in document.get("items") or () if (meta := pod_meta_from_object(item)) is not None]
        self._publish({p.uid: p for p in pods})
        version = (document.get("metadata") or {}).get("resourceVersion") or ""
        self._status = replace(self._status, synced=True, connected=True, last_error=None)
        return str(version)

    def _watch(self, resource_version: str) -> str:
        """Follow the watch until the server ends it; return the resourceVersion to resume from. Raises _Gone on 410."""
        try:
            response = self._api.list_pod_for_all_namespaces(
                field_selector=self._selector(),
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=resource_version,
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
            if not 200 <= response.status <= 299:
                if response.status == HTTP_GONE:
                    raise _Gone
                raise RuntimeError(f"watch answered HTTP {response.status}")
            self._status = replace(self._status, connected=True, last_error=None)
            for line in _lines(response):
                if self._stop.is_set():
                    break
                resource_version = self._apply(line, resource_version)
        finally:
            self._response = None
            response.release_conn()
        return resource_version

    def _apply(self, line: str, resource_version: str) -> str:
        event = json.loads(line)
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == HTTP_GONE:
                raise _Gone
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            meta = pod_meta_from_object(obj)
            if meta is not None:
                pods = dict(self._by_uid)
                if kind == "DELETED":
                    pods.pop(meta.uid, None)
                else:
                    pods[meta.uid] = meta
                self._publish(pods)
        return str(version) if version else resource_version

    def _publish(self, pods: dict[str, PodMeta]) -> None:
        self._by_uid = MappingProxyType(pods)
        self._by_name = MappingProxyType({(p.namespace, p.name): p for p in pods.values()})
        self._status = replace(self._status, pods=len(pods))


class _Gone(Exception):  # noqa: N818  (a control-flow signal: the watch's resourceVersion expired)
    pass


def _interrupt(response: Any) -> None:
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
        log.debug("the pod watch connection was already closed", exc_info=True)


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
