"""This node's ResourceSlices, kept current by list + watch on a background thread (`--kubernetes`).

Lists `resource.k8s.io/v1` ResourceSlices with the field selector `spec.nodeName=<node>` (kubernetes/api
resource/v1/types.go, ResourceSliceSpec.NodeName: "A field selector can be used to list only ResourceSlice objects
belonging to a certain node"), so only this node's slices travel; then watches from the list's resourceVersion
(`toolkit.listwatch`: a fresh list after 410 Gone, a jittered backoff after a broken connection). The index is
replaced, never mutated.

RBAC: `get`, `list`, `watch` on `resourceslices` in the API group `resource.k8s.io` (deploy/base).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exporter.attribution.resourceslices import ResourceSliceIndex, SliceDevices, slice_from_object
from toolkit.backoff import Backoff, Draw
from toolkit.listwatch import WatchThread


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
        draw: Draw = random.random,
    ) -> None:
        from kubernetes import client  # only with --kubernetes

        self._index = ResourceSliceIndex()
        self._running = WatchThread.of_node(
            "ResourceSlice",
            node_name,
            client.ResourceV1Api(api_client).list_resource_slice,
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
