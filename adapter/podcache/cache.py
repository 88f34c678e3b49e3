"""The pod cache: every pod of the cluster, kept by one watch, so that no API request ever lists pods.

One list-and-watch loop (`toolkit.listwatch`) follows pods cluster-wide; a second follows ReplicaSets, only to resolve
a pod's top controller (Pod -> ReplicaSet -> Deployment). Both run in threads over the real `kubernetes` client.
Queries are answered from indexes by namespace, node and owner (see `adapter/podcache/index.py`), without scans.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api
from prometheus_client import CollectorRegistry

from adapter.podcache.index import PodIndex, ReplicaSetOwner
from adapter.podcache.selfmetrics import PodCacheCollector
from adapter.selectors import EVERYTHING, Selector
from toolkit.backoff import Backoff
from toolkit.listwatch import ListWatch, ListWatchStats
from toolkit.pods import OwnerRefs, Pod, PodParser, object_key

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PodCacheStats:
    pods: int
    replica_sets_with_owner: int
    pod_watch: ListWatchStats
    replica_set_watch: ListWatchStats


class _ReplicaSetParser:
    def __init__(self) -> None:
        self._owners = OwnerRefs()

    def __call__(self, obj: Mapping[str, Any]) -> ReplicaSetOwner:
        namespace, name = object_key(obj)
        return ReplicaSetOwner(namespace, name, self._owners.controller_of(obj["metadata"]))


class PodCache:
    """Pods by namespace, node and owner, from a watch. Read from any thread; `start()`/`stop()` on the loop.

    `field_selector` narrows what is cached (e.g. `spec.nodeName=<node>`); the adapter caches everything. Given a
    `registry`, its size and sync state are served from it (adapter/podcache/selfmetrics.py).
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        field_selector: str | None = None,
        resolve_owners: bool = True,
        page_size: int = 500,
        watch_timeout_seconds: int = 300,
        request_timeout: float = 30.0,
        backoff: Backoff | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._index = PodIndex()
        common: dict[str, Any] = {
            "page_size": page_size,
            "watch_timeout_seconds": watch_timeout_seconds,
            "request_timeout": request_timeout,
            "backoff": backoff or Backoff(),
        }
        self._pods: ListWatch[Pod] = ListWatch(
            name="pods",
            list_func=CoreV1Api(api_client).list_pod_for_all_namespaces,
            parse=PodParser(),
            replace=self._index.replace_pods,
            upsert=self._index.upsert_pod,
            remove=self._index.remove_pod,
            field_selector=field_selector,
            **common,
        )
        self._replica_sets: ListWatch[ReplicaSetOwner] | None = None
        if resolve_owners:
            self._replica_sets = ListWatch(
                name="replicasets",
                list_func=AppsV1Api(api_client).list_replica_set_for_all_namespaces,
                parse=_ReplicaSetParser(),
                replace=self._index.replace_replica_sets,
                upsert=self._index.upsert_replica_set,
                remove=self._index.remove_replica_set,
                **common,
            )
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        if registry is not None:
            registry.register(PodCacheCollector(self))

    # ---- queries (no API calls; safe from any thread) ----

    def pods_in_namespace(self, namespace: str, selector: Selector = EVERYTHING) -> Sequence[Pod]:
        """The namespace's pods that `selector` picks (all of them by default), by name."""
        return self._index.in_namespace(namespace, selector)

    def all_pods(self) -> Sequence[Pod]:
        return self._index.all()

    def get(self, namespace: str, name: str) -> Pod | None:
        return self._index.get(namespace, name)

    def get_many(self, keys: Sequence[tuple[str, str]]) -> list[Pod | None]:
        return self._index.get_many(keys)

    def pods_on_node(self, node: str) -> Sequence[Pod]:
        return self._index.on_node(node)

    def pods_owned_by(self, namespace: str, kind: str, name: str) -> Sequence[Pod]:
        """Pods whose top controller is kind/name (Deployment, StatefulSet, DaemonSet, Job, ...). For kind ReplicaSet:
        the pods that ReplicaSet controls directly, whether or not a Deployment owns it."""
        return self._index.owned_by(namespace, kind, name)

    @property
    def synced(self) -> bool:
        """True once pods (and ReplicaSets, unless the API refuses them) have been listed."""
        if not self._pods.stats.synced:
            return False
        rs = self._replica_sets
        return rs is None or rs.stats.synced or rs.stats.unserved

    @property
    def size(self) -> int:
        return len(self._index)

    def stats(self) -> PodCacheStats:
        rs = self._replica_sets
        return PodCacheStats(
            pods=len(self._index),
            replica_sets_with_owner=self._index.replica_sets_with_owner,
            pod_watch=self._pods.stats,
            replica_set_watch=rs.stats if rs is not None else ListWatchStats(),
        )

    # ---- lifecycle ----

    async def start(self) -> None:
        """Start the watch threads; returns at once (see `synced`, `wait_synced`)."""
        if self._threads:
            return
        self._stopping.clear()
        for loop in self._loops():
            thread = threading.Thread(
                target=loop.run, args=(self._stopping,), name=f"gpu-pulse-watch-{loop.name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    async def wait_synced(self, timeout: float) -> bool:
        """Wait (off the loop) until `synced`, at most `timeout` seconds. Returns `synced`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.synced:
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop watching; waits (off the loop) up to `timeout` for the threads to end."""
        self._stopping.set()
        for loop in self._loops():
            loop.interrupt()
        threads, self._threads = self._threads, []
        for thread in threads:
            await asyncio.to_thread(thread.join, timeout)
            if thread.is_alive():
                log.warning("%s did not stop within %.1f s (a blocked API call); leaving it", thread.name, timeout)

    def _loops(self) -> list[ListWatch[Any]]:
        return [r for r in (self._pods, self._replica_sets) if r is not None]
