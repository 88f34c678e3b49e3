"""The pod watch (pod UID -> pod) through the real `kubernetes` client against the Kubernetes API test server: only
this node's pods, events applied, 410 Gone answered by a fresh list, an API server outage survived."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from exporter.attribution.podwatch import PodWatch
from simulation.kubeapi import KubeApiServer, pod_object
from tests.support.waiting import wait_for
from toolkit.backoff import Backoff
from toolkit.kubeclient import api_client

NODE = "gpu-node-1"


class _ApiServer:
    """The test API server on its own event loop thread, so the watch's blocking client can talk to it."""

    def __init__(self, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kubeapi", daemon=True)
        self.thread.start()
        self.server = KubeApiServer(bookmark_interval=0.2, **options)
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
    wait_for(lambda: watch.by_uid(added["metadata"]["uid"]) is not None, "the added pod", timeout=10, period=0.02)
    changed = _gpu_pod("late", uid=added["metadata"]["uid"], phase="Succeeded")
    api.server.put_object("pods", changed)
    wait_for(
        lambda: (m := watch.by_name("ml", "late")) is not None and m.terminated,
        "the pod's new phase",
        timeout=10,
        period=0.02,
    )
    api.server.delete_pod("ml", "late")
    wait_for(lambda: watch.by_name("ml", "late") is None, "the deletion", timeout=10, period=0.02)
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
    wait_for(lambda: watch.status.relists_total >= 1, "a fresh list", timeout=10, period=0.02)
    wait_for(
        lambda: watch.by_name("ml", "during-outage") is not None,
        "the pod added during the outage",
        timeout=10,
        period=0.02,
    )
    assert api.server.request_count("list", "pods") > lists_before


def test_survives_an_api_server_outage(api: _ApiServer, watch_factory: Callable[..., PodWatch]) -> None:
    watch = watch_factory()
    watch.start()
    assert watch.wait_synced(10)
    api.stop()
    wait_for(lambda: watch.status.errors_total >= 1, "an error", timeout=10, period=0.02)
    assert not watch.status.connected
    assert watch.status.synced, "the cache stays in use while the API server is away"
    api.server.put_object("pods", _gpu_pod("after-restart"))
    api.restart()
    wait_for(
        lambda: watch.by_name("ml", "after-restart") is not None,
        "the pod added after the restart",
        timeout=10,
        period=0.02,
    )
    assert watch.status.connected


def test_through_a_kubeconfig(api: _ApiServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        f"clusters: [{{name: test, cluster: {{server: '{api.url}'}}}}]\n"
        "users: [{name: test, user: {}}]\n"
        "contexts: [{name: test, context: {cluster: test, user: test}}]\n"
    )
    api.server.put_object("pods", _gpu_pod("via-kubeconfig"))
    watch = PodWatch(api_client(kubeconfig=kubeconfig), NODE)
    try:
        watch.start()
        assert watch.wait_synced(10)
        assert watch.by_name("ml", "via-kubeconfig") is not None
    finally:
        watch.close()


def test_pods_without_a_uid_or_malformed_are_left_out(api: _ApiServer, watch_factory: Callable[..., PodWatch]) -> None:
    api.server.put_object("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-namespace"}})
    bad = _gpu_pod("bad-labels")
    bad["metadata"]["labels"] = {"app": 3}
    api.server.put_object("pods", bad)
    api.server.put_object("pods", _gpu_pod("fine"))
    watch = watch_factory()
    watch.start()
    assert watch.wait_synced(10)
    assert [p.name for p in watch.pods()] == ["fine"]
    api.server.put_object("pods", {**_gpu_pod("still-bad"), "status": 3})
    late = api.server.put_object("pods", _gpu_pod("late"))
    wait_for(lambda: watch.by_uid(late["metadata"]["uid"]) is not None, "the late pod", timeout=10, period=0.02)
    assert watch.by_name("ml", "still-bad") is None
    assert watch.status.errors_total == 0  # a bad object is not a failing API


def test_a_recreated_pod_replaces_the_old_uid(api: _ApiServer, watch_factory: Callable[..., PodWatch]) -> None:
    old = api.server.put_object("pods", _gpu_pod("db-0"))
    watch = watch_factory()
    watch.start()
    assert watch.wait_synced(10)
    api.server.delete_pod("ml", "db-0")
    new = api.server.put_object("pods", _gpu_pod("db-0"))
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    wait_for(lambda: watch.by_uid(new["metadata"]["uid"]) is not None, "the recreated pod", timeout=10, period=0.02)
    assert watch.by_uid(old["metadata"]["uid"]) is None
    assert [p.uid for p in watch.pods()] == [new["metadata"]["uid"]]


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
