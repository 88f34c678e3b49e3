"""This node's ResourceSlices, kept current by list + watch on a background thread (`--kubernetes`).

Lists ResourceSlices with the field selector `spec.nodeName=<node>` (kubernetes/api resource/v1/types.go,
ResourceSliceSpec.NodeName: "A field selector can be used to list only ResourceSlice objects belonging to a certain
node"), so only this node's slices travel; then watches from the list's resourceVersion (`toolkit.listwatch`: a fresh
list after 410 Gone, a jittered backoff after a broken connection). The index is replaced, never mutated.

`resource.k8s.io/v1` exists from Kubernetes 1.34 (DRA GA); a 1.33 cluster serves `v1beta2` and `v1beta1`, a 1.32
one `v1beta1` (DRA beta, with the beta API enabled). The lister asks for v1 and, answered 404, for the next older
version, and keeps the first one served (`SliceWatchStatus.api_version`); slice_from_object reads every one of them.

RBAC: `get`, `list`, `watch` on `resourceslices` in the API group `resource.k8s.io` (deploy/base).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exporter.attribution.resourceslices import MigSpec, ResourceSliceIndex, SliceDevices, slice_from_object
from toolkit.backoff import Backoff, Draw
from toolkit.listwatch import WatchThread

log = logging.getLogger(__name__)


# newest first: (version, the kubernetes client's API class)
RESOURCE_VERSIONS = (("v1", "ResourceV1Api"), ("v1beta2", "ResourceV1beta2Api"), ("v1beta1", "ResourceV1beta1Api"))


@dataclass(frozen=True, slots=True)
class SliceWatchStatus:
    synced: bool = False  # a complete list has arrived (the index stays in use through outages)
    connected: bool = False
    devices: int = 0
    errors_total: int = 0
    last_error: str | None = None
    api_version: str | None = None  # the resource.k8s.io version in use; None until one answered


class ServedVersionLister:
    """`list_resource_slice` of the newest resource.k8s.io version the API server serves: a list answered 404 moves
    to the next older version at once (all 404: the last error is raised, and the watch backs off); a watch uses the
    version the list found."""

    def __init__(self, api_client: Any, versions: tuple[tuple[str, str], ...] = RESOURCE_VERSIONS) -> None:
        from kubernetes import client  # only with --kubernetes

        self._listers = [(version, getattr(client, api)(api_client).list_resource_slice) for version, api in versions]
        self._current = 0
        self.version: str | None = None  # the version that last answered

    def __call__(self, **kwargs: Any) -> Any:
        if kwargs.get("watch"):
            return self._listers[self._current][1](**kwargs)
        for step in range(len(self._listers)):
            position = (self._current + step) % len(self._listers)
            version, lister = self._listers[position]
            try:
                answer = lister(**kwargs)
            except Exception as error:
                if getattr(error, "status", None) != 404 or step == len(self._listers) - 1:
                    raise
                continue
            if version != self.version:
                older = f" (the API server serves no {self._listers[0][0]}: Kubernetes before 1.34)" if position else ""
                log.info("ResourceSlices: reading resource.k8s.io/%s%s", version, older)
            self._current, self.version = position, version
            return answer
        raise AssertionError("unreachable: the last version raises")


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
        draw: Draw = random.random,
    ) -> None:
        self._index = ResourceSliceIndex()
        self._lister = ServedVersionLister(api_client)
        self._running = WatchThread.of_node(
            "ResourceSlice",
            node_name,
            self._lister,
            parse=_parse,
            replace=self._replace,
            upsert=self._upsert,
            remove=self._remove,
            watch_timeout_seconds=watch_timeout_seconds,
            request_timeout=request_timeout,
            backoff=backoff,
            draw=draw,
        )
        self.node_name = node_name

    def uuid_of(self, driver: str, pool: str, device: str) -> str | None:
        return self._index.uuid_of(driver, pool, device)

    def mig_spec_of(self, driver: str, pool: str, device: str) -> MigSpec | None:
        return self._index.mig_spec_of(driver, pool, device)

    @property
    def index(self) -> ResourceSliceIndex:
        return self._index

    @property
    def status(self) -> SliceWatchStatus:
        stats = self._running.loop.stats
        return SliceWatchStatus(
            synced=stats.synced,
            connected=stats.connected,
            devices=len(self._index),
            errors_total=stats.errors,
            last_error=stats.last_error or None,
            api_version=self._lister.version,
        )

    def start(self) -> None:
        self._running.start()

    def close(self) -> None:
        self._running.close()

    def wait_synced(self, timeout: float) -> bool:
        """Block until the first list arrived (for start-up and tests); True when synced."""
        return self._running.wait_synced(timeout)

    # ---- what the list and the watch change (on the watch's thread) ------------------------------------------------
    def _replace(self, slices: list[SliceDevices | None]) -> None:
        self._index = ResourceSliceIndex(entry for entry in slices if entry is not None)

    def _upsert(self, entry: SliceDevices | None) -> None:
        if entry is not None:  # a slice of another driver, or one without devices we can place
            self._index = self._index.replaced(entry)

    def _remove(self, namespace: str, name: str) -> None:  # ResourceSlices are cluster-scoped: namespace ""
        self._index = self._index.without(name)


def _parse(obj: Mapping[str, Any]) -> SliceDevices | None:
    return slice_from_object(obj)
