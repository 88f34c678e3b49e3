"""The pod watch (pod UID -> pod) through the real `kubernetes` client against the Kubernetes API test server: only
this node's pods, events applied, 410 Gone answered by a fresh list, an API server outage survived."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from exporter.attribution.directory import pod_meta_from_object
from exporter.attribution.podwatch import PodWatch, PodWatchConfigError, kube_api_client
from exporter.kubelet.client import Backoff
from simulation.kubeapi import KubeApiServer, pod_object

NODE = "gpu-node-1"


class _ApiServer:
    """The test API server on its own event loop thread, so the watch's blocking client can talk to it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kubeapi", daemon=True)
        self.thread.start()
        self.server = KubeApiServer(bookmark_interval=0.2)
        self.url = self._run(self.server.start())
        self.port = self.server.port

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def stop(self) -> None:
        self._run(self.server.stop())

    def restart(self) -> None:
        self._run(self.server.start(port=self.port))

    def close(self) -> None:
        self._run(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def api() -> Iterator[_ApiServer]:
    server = _ApiServer()
    yield server
    server.close()


@pytest.fixture
def watch_factory(api: _ApiServer) -> Iterator[Callable[..., PodWatch]]:
    made: list[PodWatch] = []

    def make(**kwargs: Any) -> PodWatch:
        configuration = k8s.Configuration(host=api.url)
        options: dict[str, Any] = {"watch_timeout_seconds": 30, "request_timeout": 5.0, "backoff": Backoff(0.05, 0.2)}
        options.update(kwargs)
        watch = PodWatch(k8s.ApiClient(configuration), NODE, **options)
        made.append(watch)
        return watch

    yield make
    for watch in made:
        watch.close()


def _eventually(condition: Callable[[], bool], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def _gpu_pod(name: str, node: str = NODE, uid: str | None = None, **fields: Any) -> dict[str, Any]:
    obj = pod_object("ml", name, node=node, labels={"app": name}, containers=("main",), uid=uid, **fields)
    for status in obj["status"].get("containerStatuses", []):
        status["containerID"] = f"containerd://{'AB' * 32}"
    return obj


def test_lists_only_this_nodes_pods(api: _ApiServer, watch_factory: Callable[..., PodWatch]) -> None:
    mine = api.server.put_object("pods", _gpu_pod("mine"))
    api.server.put_object("pods", _gpu_pod("elsewhere", node="gpu-node-2"))
    watch = watch_factory()
    watch.start()
    assert watch.wait_synced(10)
    meta = watch.by_uid(mine["metadata"]["uid"].upper())
    assert meta is not None and (meta.namespace, meta.name) == ("ml", "mine")
    assert dict(meta.labels) == {"app": "mine"}
    assert meta.phase == "Running" and meta.created_at is not None
    assert dict(meta.containers) == {"ab" * 32: "main"}
    assert watch.by_name("ml", "elsewhere") is None
    assert [p.name for p in watch.pods()] == ["mine"]


def test_follows_additions_changes_and_deletions(api: _ApiServer, watch_factory: Callable[..., PodWatch]) -> None:
    watch = watch_factory()
    watch.start()
    assert watch.wait_synced(10)
    added = api.server.put_object("pods", _gpu_pod("late"))
    assert _eventually(lambda: watch.by_uid(added["metadata"]["uid"]) is not None)
    changed = _gpu_pod("late", uid=added["metadata"]["uid"], phase="Succeeded")
    api.server.put_object("pods", changed)
    assert _eventually(lambda: (m := watch.by_name("ml", "late")) is not None and m.terminated)
    api.server.delete_pod("ml", "late")
    assert _eventually(lambda: watch.by_name("ml", "late") is None)
    assert watch.status.errors_total == 0


def test_an_expired_watch_is_answered_by_a_fresh_list(api: _ApiServer, watch_factory: Callable[..., PodWatch]) -> None:
    watch = watch_factory()
    watch.start()
    assert watch.wait_synced(10)
    lists_before = api.server.request_count("list", "pods")
    api.stop()
    api.server.put_object("pods", _gpu_pod("during-outage"))
    api.server.compact()  # history gone: resuming from the old resourceVersion gets 410 Gone
    api.restart()
    assert _eventually(lambda: watch.status.relists_total >= 1)
    assert _eventually(lambda: watch.by_name("ml", "during-outage") is not None)
    assert api.server.request_count("list", "pods") > lists_before


def test_survives_an_api_server_outage(api: _ApiServer, watch_factory: Callable[..., PodWatch]) -> None:
    watch = watch_factory()
    watch.start()
    assert watch.wait_synced(10)
    api.stop()
    assert _eventually(lambda: watch.status.errors_total >= 1)
    assert not watch.status.connected
    assert watch.status.synced, "the cache stays in use while the API server is away"
    api.server.put_object("pods", _gpu_pod("after-restart"))
    api.restart()
    assert _eventually(lambda: watch.by_name("ml", "after-restart") is not None)
    assert watch.status.connected


def test_kubeconfig_and_missing_in_cluster_config(api: _ApiServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        f"clusters: [{{name: test, cluster: {{server: '{api.url}'}}}}]\n"
        "users: [{name: test, user: {}}]\n"
        "contexts: [{name: test, context: {cluster: test, user: test}}]\n"
    )
    api.server.put_object("pods", _gpu_pod("via-kubeconfig"))
    watch = PodWatch(kube_api_client(kubeconfig), NODE)
    try:
        watch.start()
        assert watch.wait_synced(10)
        assert watch.by_name("ml", "via-kubeconfig") is not None
    finally:
        watch.close()
    with pytest.raises(PodWatchConfigError, match=r"^--kubernetes: cannot configure") as error:
        kube_api_client(tmp_path / "missing")
    assert "\n" not in str(error.value)


def test_pod_objects_with_missing_parts() -> None:
    assert pod_meta_from_object({}) is None
    assert pod_meta_from_object({"metadata": {"name": "x", "namespace": "y"}}) is None
    assert pod_meta_from_object("garbage") is None
    meta = pod_meta_from_object({"metadata": {"uid": "U", "name": "x", "namespace": "y", "labels": None}, "status": 3})
    assert meta is not None and meta.uid == "u" and dict(meta.labels) == {} and meta.phase == ""


def test_needs_a_node_name() -> None:
    with pytest.raises(ValueError, match="node name"):
        PodWatch(k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:1")), "")


def test_a_stopped_watch_is_not_connected(api: _ApiServer, watch_factory: Callable[..., PodWatch]) -> None:
    watch = watch_factory()
    assert watch.watches and not watch.status.connected, "not started: nothing runs"
    watch.start()
    assert watch.wait_synced(10)
    assert watch.status.connected
    watch.close()
    assert not watch.status.connected, "closed: the watch no longer runs"
