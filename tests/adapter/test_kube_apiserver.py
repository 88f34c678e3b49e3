"""The Kubernetes API test server behaves as kube-apiserver does for the calls gpu-pulse makes (real client)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import watch
from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from simulation.kubeapi import KubeApiServer, SelectorError, field_predicate, label_predicate
from toolkit.kubeclient import api_client


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    s = KubeApiServer(bookmark_interval=0.1)
    await s.start()
    yield s
    await s.stop()


@pytest.fixture
def core(server: KubeApiServer) -> CoreV1Api:
    client: ApiClient = api_client(base_url=server.url)
    return CoreV1Api(client)


def watch_events(core: CoreV1Api, **kwargs: Any) -> list[tuple[str, str]]:
    """(type, name or resourceVersion) of every event of one bounded watch, read with the real client's Watch."""
    out = []
    for event in watch.Watch().stream(core.list_pod_for_all_namespaces, **kwargs):
        obj = event["raw_object"]
        label = obj["metadata"].get("name") or obj["metadata"]["resourceVersion"]
        out.append((event["type"], label))
    return out


async def test_watch_replays_history_from_a_resource_version(server: KubeApiServer, core: CoreV1Api) -> None:
    server.put_pod("ml", "a")
    rv = str(server.resource_version)
    server.put_pod("ml", "b", node="n1")
    server.put_pod("ml", "a", phase="Succeeded")
    server.delete_pod("ml", "b")
    events = await asyncio.to_thread(watch_events, core, resource_version=rv, timeout_seconds=1)
    assert events == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]


async def test_changes_made_from_other_threads_reach_open_watches(server: KubeApiServer, core: CoreV1Api) -> None:
    rv = str(server.resource_version)
    watching = asyncio.create_task(asyncio.to_thread(watch_events, core, resource_version=rv, timeout_seconds=1))
    writers = [
        threading.Thread(target=lambda n=n: [server.put_pod(f"ns{n}", f"p{i}") for i in range(20)]) for n in range(3)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        await asyncio.to_thread(writer.join)
    events = await watching
    assert sorted(events) == sorted(("ADDED", f"p{i}") for _ in range(3) for i in range(20))
    assert server.resource_version == int(rv) + 60


async def test_watch_from_zero_starts_with_the_current_state(server: KubeApiServer, core: CoreV1Api) -> None:
    server.put_pod("ml", "a")
    server.put_pod("ml", "b")
    server.delete_pod("ml", "b")
    events = await asyncio.to_thread(watch_events, core, resource_version="0", timeout_seconds=1)
    assert events == [("ADDED", "a")]


async def test_bookmarks_carry_the_newest_resource_version(server: KubeApiServer, core: CoreV1Api) -> None:
    server.put_pod("ml", "a")
    rv = str(server.resource_version)
    server.put_replica_set("ml", "rs")  # moves the resourceVersion without a pod event
    events = await asyncio.to_thread(
        watch_events, core, resource_version=rv, timeout_seconds=1, allow_watch_bookmarks=True
    )
    assert ("BOOKMARK", str(server.resource_version)) in events
    assert not [e for e in events if e[0] != "BOOKMARK"]


async def test_compacted_history_is_gone(server: KubeApiServer, core: CoreV1Api) -> None:
    server.put_pod("ml", "a")
    rv = str(server.resource_version)
    server.put_pod("ml", "b")
    server.compact()
    with pytest.raises(ApiException) as caught:
        await asyncio.to_thread(watch_events, core, resource_version=rv, timeout_seconds=1)
    assert caught.value.status == 410
    # the current version is still fine
    now = str(server.resource_version)
    assert await asyncio.to_thread(watch_events, core, resource_version=now, timeout_seconds=1) == []


async def test_paging_and_expired_continue_tokens(server: KubeApiServer, core: CoreV1Api) -> None:
    for i in range(5):
        server.put_pod("ml", f"p{i}")
    first = await asyncio.to_thread(core.list_pod_for_all_namespaces, limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    token = first.metadata.var_continue
    rest = await asyncio.to_thread(core.list_pod_for_all_namespaces, limit=10, _continue=token)
    assert [p.metadata.name for p in rest.items] == ["p2", "p3", "p4"]
    server.put_pod("ml", "p9")
    server.compact()
    with pytest.raises(ApiException) as caught:
        await asyncio.to_thread(core.list_pod_for_all_namespaces, limit=2, _continue=token)
    assert caught.value.status == 410


async def test_selectors_filter_lists(server: KubeApiServer, core: CoreV1Api) -> None:
    server.put_pod("ml", "a", node="n1", labels={"app": "x", "tier": "gpu"})
    server.put_pod("ml", "b", node="n2", labels={"app": "y"})
    server.put_pod("web", "c", node="n1", labels={"app": "x"})

    async def names(**kwargs: Any) -> list[str]:
        found = await asyncio.to_thread(core.list_pod_for_all_namespaces, **kwargs)
        return [p.metadata.name for p in found.items]

    assert await names(field_selector="spec.nodeName=n1") == ["a", "c"]
    assert await names(label_selector="app=x,tier") == ["a"]
    assert await names(label_selector="app in (x, y),!tier") == ["b", "c"]
    ml = await asyncio.to_thread(core.list_namespaced_pod, "ml", label_selector="app!=y")
    assert [p.metadata.name for p in ml.items] == ["a"]
    with pytest.raises(ApiException) as caught:
        await names(label_selector="app in x")
    assert caught.value.status == 400


label_keys = st.sampled_from(["app", "tier", "example.com/team"])
label_values = st.sampled_from(["x", "y", "gpu", ""])
requirements = st.one_of(
    st.tuples(st.just("="), label_keys, label_values),
    st.tuples(st.just("=="), label_keys, label_values),
    st.tuples(st.just("!="), label_keys, label_values),
    st.tuples(st.just("in"), label_keys, st.lists(label_values.filter(bool), min_size=1, max_size=3)),
    st.tuples(st.just("notin"), label_keys, st.lists(label_values.filter(bool), min_size=1, max_size=3)),
    st.tuples(st.just("exists"), label_keys, st.none()),
    st.tuples(st.just("!"), label_keys, st.none()),
)


def render(requirement: tuple[str, str, Any]) -> str:
    op, key, value = requirement
    if op in ("in", "notin"):
        return f"{key} {op} ({', '.join(value)})"
    if op == "exists":
        return f" {key} "
    if op == "!":
        return f"!{key}"
    return f"{key}{op}{value}"


def reference(requirement: tuple[str, str, Any], labels: dict[str, str]) -> bool:
    op, key, value = requirement
    return {
        "=": lambda: labels.get(key) == value,
        "==": lambda: labels.get(key) == value,
        "!=": lambda: labels.get(key) != value,
        "in": lambda: labels.get(key) in value,
        "notin": lambda: labels.get(key) not in value,
        "exists": lambda: key in labels,
        "!": lambda: key not in labels,
    }[op]()


@given(st.lists(requirements, max_size=4), st.dictionaries(label_keys, label_values, max_size=3))
def test_label_selectors_match_the_reference(reqs: list[tuple[str, str, Any]], labels: dict[str, str]) -> None:
    selector = ",".join(render(r) for r in reqs)
    assert label_predicate(selector)(labels) == all(reference(r, labels) for r in reqs)


@given(st.text(max_size=30))
def test_selector_garbage_is_a_selector_error(text: str) -> None:
    for parse in (label_predicate, field_predicate):
        try:
            parse(text)
        except SelectorError:
            pass


def test_field_selectors_read_nested_fields() -> None:
    pod = {"metadata": {"name": "a"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    assert field_predicate("spec.nodeName=n1,status.phase!=Failed")(pod)
    assert not field_predicate("spec.nodeName==n2")(pod)
    assert field_predicate("spec.missing=")(pod)
