"""Pod UID -> pod, from a watch on this node's pods through the Kubernetes API (`--kubernetes`).

pod-resources names pods but gives no UID, and a process's cgroup gives the UID but no name: this watch joins the two.
It lists and watches the pods with `spec.nodeName=<node>` on its own thread (`toolkit.listwatch`: a fresh list after
410 Gone, a jittered backoff after a broken connection). The mappings are replaced, never mutated, so readers on other
threads always see one consistent directory.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from exporter.attribution.directory import DirectoryStatus
from toolkit.backoff import Backoff, Draw
from toolkit.listwatch import WatchThread
from toolkit.pods import Pod, PodParser

_NO_PODS: Mapping[Any, Pod] = MappingProxyType({})


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
        draw: Draw = random.random,
    ) -> None:
        from kubernetes import client  # only with --kubernetes

        self._maps = _Maps(_NO_PODS, _NO_PODS)  # replaced as a whole: readers see both maps of one moment
        self._running = WatchThread.of_node(
            "pod",
            node_name,
            client.CoreV1Api(api_client).list_pod_for_all_namespaces,
            parse=PodParser(containers=True, created=True, claims=True, serving=True),
            replace=self._replace,
            upsert=self._upsert,
            remove=self._remove,
            watch_timeout_seconds=watch_timeout_seconds,
            request_timeout=request_timeout,
            backoff=backoff,
            draw=draw,
        )
        self.node_name = node_name

    # ---- PodDirectory --------------------------------------------------------------------------------------------
    def by_uid(self, uid: str) -> Pod | None:
        return self._maps.by_uid.get(uid.lower())

    def by_name(self, namespace: str, name: str) -> Pod | None:
        return self._maps.by_name.get((namespace, name))

    @property
    def status(self) -> DirectoryStatus:
        stats = self._running.loop.stats
        return DirectoryStatus(
            synced=stats.synced,
            connected=stats.connected and self._running.running,  # a stopped watch is not connected
            pods=len(self._maps.by_uid),
            errors_total=stats.errors,
            last_error=stats.last_error or None,
            relists_total=stats.relists,
        )

    @property
    def watches(self) -> bool:
        return True

    def pods(self) -> tuple[Pod, ...]:
        return tuple(self._maps.by_uid.values())

    # ---- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._running.start()

    def close(self) -> None:
        self._running.close()

    def wait_synced(self, timeout: float) -> bool:
        """Block until the first list arrived (for start-up and tests); True when synced."""
        return self._running.wait_synced(timeout)

    # ---- what the list and the watch change (on the watch's thread) ------------------------------------------------
    def _replace(self, pods: list[Pod]) -> None:
        self._publish({pod.uid: pod for pod in pods if pod.uid})

    def _upsert(self, pod: Pod) -> None:
        if not pod.uid:  # attribution looks pods up by UID: one without is of no use
            return
        pods = dict(self._maps.by_uid)
        previous = self._maps.by_name.get(pod.key)
        if previous is not None and previous.uid != pod.uid:  # the name now belongs to a new pod
            pods.pop(previous.uid, None)
        pods[pod.uid] = pod
        self._publish(pods)

    def _remove(self, namespace: str, name: str) -> None:
        previous = self._maps.by_name.get((namespace, name))
        if previous is not None:
            pods = dict(self._maps.by_uid)
            pods.pop(previous.uid, None)
            self._publish(pods)

    def _publish(self, pods: dict[str, Pod]) -> None:
        self._maps = _Maps(MappingProxyType(pods), MappingProxyType({pod.key: pod for pod in pods.values()}))


@dataclass(frozen=True, slots=True)
class _Maps:
    by_uid: Mapping[str, Pod]
    by_name: Mapping[tuple[str, str], Pod]
