"""The pod cache against the Kubernetes API test server, through the real `kubernetes` client."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable

import pytest
from kubernetes.client import ApiClient

from adapter.podcache.cache import PodCache
from simulation.kubeapi import KubeApiServer
from tests.support.waiting import eventually
from toolkit.backoff import Backoff
from toolkit.kubeclient import api_client
from toolkit.pods import OwnerRef, Pod

FAST = Backoff(initial=0.05, maximum=0.2)


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    s = KubeApiServer(bookmark_interval=0.2)
    await s.start()
    yield s
    await s.stop()


@pytest.fixture
def client(server: KubeApiServer) -> ApiClient:
    return api_client(base_url=server.url)


@pytest.fixture
async def make_cache(client: ApiClient) -> AsyncIterator[Callable[..., PodCache]]:
    caches: list[PodCache] = []

    def make(**kwargs: object) -> PodCache:
        kwargs.setdefault("backoff", FAST)
        cache = PodCache(client, **kwargs)  # type: ignore[arg-type]
        caches.append(cache)
        return cache

    yield make
    for cache in caches:
        await cache.stop()


async def started(cache: PodCache) -> PodCache:
    await cache.start()
    assert await cache.wait_synced(10), "the cache never synced"
    return cache


def names(pods: object) -> list[str]:
    return [p.name for p in pods]  # type: ignore[attr-defined]


async def test_initial_list_fills_every_index(server: KubeApiServer, make_cache: Callable[..., PodCache]) -> None:
    for i in range(7):
        server.put_pod(
            "ml", f"infer-{i}", node=f"node-{i % 2}", labels={"app": "infer"}, pod_ip=f"10.1.0.{i}", phase="Running"
        )
    server.put_pod("web", "front", node="node-0", phase="Pending")
    server.put_pod("web", "unscheduled")
    cache = await started(make_cache(page_size=3))

    assert cache.size == 9
    assert server.request_count("list", "pods") == 3  # paged: 3 + 3 + 3
    assert names(cache.pods_in_namespace("ml")) == [f"infer-{i}" for i in range(7)]
    assert names(cache.pods_on_node("node-0")) == ["infer-0", "infer-2", "infer-4", "infer-6", "front"]
    assert cache.pods_in_namespace("nothing-here") == ()
    stored = server.get_object("pods", "ml", "infer-3")
    assert stored is not None
    assert cache.get("ml", "infer-3") == Pod(
        namespace="ml",
        name="infer-3",
        uid=stored["metadata"]["uid"],
        node="node-1",
        labels={"app": "infer"},
        phase="Running",
        pod_ip="10.1.0.3",
        owner=None,
    )
    unscheduled = cache.get("web", "unscheduled")
    assert unscheduled is not None and unscheduled.node is None and unscheduled.pod_ip is None
    assert len(cache.all_pods()) == 9


async def test_watch_events_add_change_and_delete(server: KubeApiServer, make_cache: Callable[..., PodCache]) -> None:
    server.put_pod("ml", "a", labels={"app": "x"}, phase="Pending")
    cache = await started(make_cache())

    server.put_pod("ml", "b", node="n1")
    await eventually(lambda: cache.get("ml", "b") is not None, "pod b added")

    # the scheduler binds a, it starts, and its labels change
    server.put_pod("ml", "a", node="n2", labels={"app": "y"}, phase="Running", pod_ip="10.0.0.9")
    await eventually(lambda: (p := cache.get("ml", "a")) is not None and p.phase == "Running", "pod a running")
    a = cache.get("ml", "a")
    assert a is not None and a.node == "n2" and dict(a.labels) == {"app": "y"} and a.pod_ip == "10.0.0.9"
    assert names(cache.pods_on_node("n2")) == ["a"]

    # moving between nodes leaves no trace in the old node's index
    server.put_pod("ml", "a", node="n1", labels={"app": "y"})
    await eventually(lambda: names(cache.pods_on_node("n1")) == ["a", "b"], "pod a on n1")
    assert cache.pods_on_node("n2") == ()

    server.delete_pod("ml", "b")
    await eventually(lambda: cache.get("ml", "b") is None, "pod b deleted")
    assert names(cache.pods_in_namespace("ml")) == ["a"]
    assert names(cache.pods_on_node("n1")) == ["a"]
    assert cache.size == 1
    assert server.request_count("list", "pods") == 1


async def test_owners_resolve_to_the_top_controller(server: KubeApiServer, make_cache: Callable[..., PodCache]) -> None:
    server.put_replica_set("ml", "web-7d9f", deployment="web")
    server.put_replica_set("ml", "bare-rs")
    for i in range(2):
        server.put_pod("ml", f"web-7d9f-{i}", owner=("ReplicaSet", "web-7d9f"))
    server.put_pod("ml", "bare-rs-x", owner=("ReplicaSet", "bare-rs"))
    server.put_pod("ml", "db-0", owner=("StatefulSet", "db"))
    server.put_pod("ml", "agent-q", owner=("DaemonSet", "agent"))
    server.put_pod("ml", "train-z", owner=("Job", "train"))
    cache = await started(make_cache())

    assert names(cache.pods_owned_by("ml", "Deployment", "web")) == ["web-7d9f-0", "web-7d9f-1"]
    assert names(cache.pods_owned_by("ml", "ReplicaSet", "web-7d9f")) == ["web-7d9f-0", "web-7d9f-1"]
    pod = cache.get("ml", "web-7d9f-0")
    assert pod is not None and pod.owner == OwnerRef("Deployment", "web")
    bare = cache.get("ml", "bare-rs-x")
    assert bare is not None and bare.owner == OwnerRef("ReplicaSet", "bare-rs")
    assert names(cache.pods_owned_by("ml", "StatefulSet", "db")) == ["db-0"]
    assert names(cache.pods_owned_by("ml", "DaemonSet", "agent")) == ["agent-q"]
    assert names(cache.pods_owned_by("ml", "Job", "train")) == ["train-z"]
    assert cache.pods_owned_by("other", "Deployment", "web") == ()

    # a rollout: new ReplicaSet whose pods arrive before the ReplicaSet itself is seen
    server.put_pod("ml", "web-55c1-0", owner=("ReplicaSet", "web-55c1"))
    await eventually(lambda: cache.get("ml", "web-55c1-0") is not None, "new pod seen")
    server.put_replica_set("ml", "web-55c1", deployment="web")
    await eventually(
        lambda: names(cache.pods_owned_by("ml", "Deployment", "web")) == ["web-55c1-0", "web-7d9f-0", "web-7d9f-1"],
        "pods of the new ReplicaSet re-resolved to the Deployment",
    )
    # a Deployment adopts the bare ReplicaSet; then the ReplicaSet is deleted (orphaning its pod)
    server.put_replica_set("ml", "bare-rs", deployment="adopter")
    await eventually(lambda: names(cache.pods_owned_by("ml", "Deployment", "adopter")) == ["bare-rs-x"], "adopted")
    server.delete_replica_set("ml", "bare-rs")
    await eventually(lambda: cache.pods_owned_by("ml", "Deployment", "adopter") == (), "orphaned")
    assert names(cache.pods_owned_by("ml", "ReplicaSet", "bare-rs")) == ["bare-rs-x"]


async def test_queries_never_call_the_api(server: KubeApiServer, make_cache: Callable[..., PodCache]) -> None:
    for i in range(50):
        server.put_pod(f"ns-{i % 5}", f"p-{i}", node=f"n-{i % 3}", owner=("StatefulSet", f"s-{i % 4}"))
    cache = await started(make_cache())
    before = {(v, r): server.request_count(v, r) for v in ("list", "get", "watch") for r in ("pods", "replicasets")}

    for i in range(500):
        cache.pods_in_namespace(f"ns-{i % 5}")
        cache.pods_on_node(f"n-{i % 3}")
        cache.pods_owned_by(f"ns-{i % 5}", "StatefulSet", f"s-{i % 4}")
        cache.get(f"ns-{i % 5}", f"p-{i % 50}")
    assert len(cache.all_pods()) == 50

    after = {(v, r): server.request_count(v, r) for v in ("list", "get", "watch") for r in ("pods", "replicasets")}
    assert after == before


async def test_gone_resource_version_lists_again(server: KubeApiServer, make_cache: Callable[..., PodCache]) -> None:
    server.put_pod("ml", "a")
    cache = await started(make_cache(resolve_owners=False))
    assert server.request_count("list", "pods") == 1

    port = server.port
    await server.stop()
    server.put_pod("ml", "b")  # changes the cache did not see...
    server.delete_pod("ml", "a")
    server.compact()  # ...and the history that would have told it
    await server.start(port=port)

    await eventually(lambda: cache.get("ml", "b") is not None and cache.get("ml", "a") is None, "state after relist")
    assert server.request_count("list", "pods") == 2
    watch = cache.stats().pod_watch
    assert watch.last_error.startswith("HTTP 410") and watch.relists == 1 and watch.lists == 2


async def test_reconnects_and_resumes_after_a_restart(
    server: KubeApiServer, make_cache: Callable[..., PodCache]
) -> None:
    server.put_pod("ml", "a")
    cache = await started(make_cache(resolve_owners=False))

    port = server.port
    errors = cache.stats().pod_watch.errors
    await server.stop()
    server.put_pod("ml", "b", node="n1")
    await eventually(lambda: cache.stats().pod_watch.errors >= errors + 2, "the cache failing to reconnect twice")
    await server.start(port=port)

    await eventually(lambda: cache.get("ml", "b") is not None, "pod added while the server was down")
    server.put_pod("ml", "c")
    await eventually(lambda: cache.get("ml", "c") is not None, "pod added after the restart")
    assert server.request_count("list", "pods") == 1  # the watch resumed from its resourceVersion: no relist
    assert cache.synced


async def test_watch_closed_by_the_server_resumes_without_listing(
    server: KubeApiServer, make_cache: Callable[..., PodCache]
) -> None:
    cache = await started(make_cache(resolve_owners=False))
    for i in range(3):
        server.close_watches()
        server.put_pod("ml", f"p{i}")
        await eventually(lambda i=i: cache.get("ml", f"p{i}") is not None, f"pod p{i}")  # type: ignore[misc]
    assert server.request_count("list", "pods") == 1
    assert server.request_count("watch", "pods") >= 2


async def test_node_scoped_cache_follows_scheduling(server: KubeApiServer, make_cache: Callable[..., PodCache]) -> None:
    server.put_pod("ml", "here", node="n1")
    server.put_pod("ml", "there", node="n2")
    server.put_pod("ml", "pending")
    cache = await started(make_cache(field_selector="spec.nodeName=n1", resolve_owners=False))
    assert names(cache.all_pods()) == ["here"]

    server.put_pod("ml", "pending", node="n1")  # scheduled onto our node: the watch reports it as added
    await eventually(lambda: cache.get("ml", "pending") is not None, "scheduled pod")
    server.put_pod("ml", "here", node="n2")  # leaves the selection: reported as deleted
    await eventually(lambda: cache.get("ml", "here") is None, "pod that left the node")
    assert names(cache.all_pods()) == ["pending"]


async def test_malformed_objects_are_skipped(server: KubeApiServer, make_cache: Callable[..., PodCache]) -> None:
    server.put_object("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-namespace"}})
    server.put_pod("ml", "fine")
    cache = await started(make_cache(resolve_owners=False))
    assert names(cache.all_pods()) == ["fine"]
    server.put_object("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "still-none"}})
    server.put_pod("ml", "after")
    await eventually(lambda: cache.get("ml", "after") is not None, "the watch went on")
    assert cache.size == 2


async def test_forbidden_replica_sets_degrade_to_direct_owners(
    server: KubeApiServer, make_cache: Callable[..., PodCache]
) -> None:
    server.set_forbidden(["replicasets"])
    server.put_replica_set("ml", "web-1", deployment="web")
    server.put_pod("ml", "web-1-a", owner=("ReplicaSet", "web-1"))
    cache = await started(make_cache())
    pod = cache.get("ml", "web-1-a")
    assert pod is not None and pod.owner == OwnerRef("ReplicaSet", "web-1")
    assert cache.stats().replica_set_watch.last_error.startswith("HTTP 403")


async def test_forbidden_pods_is_never_synced(server: KubeApiServer, make_cache: Callable[..., PodCache]) -> None:
    server.set_forbidden(["pods"])
    cache = make_cache()
    await cache.start()
    assert not await cache.wait_synced(0.5)
    assert cache.size == 0
    server.set_forbidden([])  # RBAC fixed: the cache recovers on its own
    assert await cache.wait_synced(10)


async def test_stop_ends_the_watch_threads(server: KubeApiServer, client: ApiClient) -> None:
    cache = PodCache(client, backoff=FAST)
    await started(cache)
    assert any(t.name.startswith("gpu-pulse-watch-") for t in threading.enumerate())
    await cache.stop()
    assert not any(t.name.startswith("gpu-pulse-watch-") and t.is_alive() for t in threading.enumerate())
