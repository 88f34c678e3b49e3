"""The one list-then-watch loop, driven step by step by a scripted API (and once against the Kubernetes API test
server): paged lists reduced page by page, watches resumed from the last resourceVersion, 410 Gone answered by a fresh
list, other failures by a jittered backoff, malformed items skipped, and a blocked watch interrupted."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from tests.support.kubeapi import kube_api_on_a_thread
from tests.support.waiting import wait_for
from toolkit.backoff import Backoff
from toolkit.kubeclient import api_client
from toolkit.listwatch import ListWatch
from toolkit.pods import MalformedObjectError, object_key

BACKOFF = Backoff(initial=1.0, maximum=8.0)
DRAW = 0.5


@dataclass
class Page:
    """A list answer, as the client hands it out with `_preload_content=False`."""

    items: list[Any]
    resource_version: str
    token: str | None = None

    @property
    def data(self) -> bytes:
        metadata: dict[str, Any] = {"resourceVersion": self.resource_version}
        if self.token:
            metadata["continue"] = self.token
        return json.dumps({"kind": "PodList", "metadata": metadata, "items": self.items}).encode()

    def release_conn(self) -> None:
        pass


@dataclass
class Stream:
    """A watch answer: newline-separated JSON events, handed out in chunks cut anywhere."""

    events: list[Any]
    cuts: list[int] = field(default_factory=list)  # byte offsets where chunks end
    fail_after: bool = False  # the connection breaks after the last event

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        body = b"".join(json.dumps(e).encode() + b"\n" for e in self.events)
        start = 0
        for cut in sorted({c for c in self.cuts if 0 < c < len(body)}):
            yield body[start:cut]
            start = cut
        yield body[start:]
        if self.fail_after:
            raise ConnectionResetError("connection reset by peer")

    def release_conn(self) -> None:
        pass


class ScriptedApi:
    """A list function answering from a script; when the script runs out it sets `stopping`."""

    def __init__(self, stopping: threading.Event, *script: Any) -> None:
        self.stopping = stopping
        self.script = list(script)
        self.calls: list[dict[str, Any]] = []
        self.log: list[str] = []  # list/watch calls and parses, in order

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        self.log.append("watch" if kwargs.get("watch") else "list")
        if not self.script:
            self.stopping.set()
            raise ConnectionError("the script is over")
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    def watches(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if c.get("watch")]

    def lists(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if not c.get("watch")]


class RecordedWaits(threading.Event):
    """`stopping`, recording the waits the loop asks for instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return self.is_set()


@dataclass
class Store:
    """What the loop keeps in step: (namespace, name) -> the item's `v` field."""

    items: dict[tuple[str, str], str] = field(default_factory=dict)
    replaced: int = 0

    def replace(self, items: list[tuple[tuple[str, str], str]]) -> None:
        self.items = dict(items)
        self.replaced += 1

    def upsert(self, item: tuple[tuple[str, str], str]) -> None:
        self.items[item[0]] = item[1]

    def remove(self, namespace: str, name: str) -> None:
        self.items.pop((namespace, name), None)


def item(name: str, version: str = "1", v: str = "x") -> dict[str, Any]:
    return {"metadata": {"namespace": "ml", "name": name, "resourceVersion": version}, "v": v}


def event(kind: str, obj: Any) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def gone(message: str = "too old resource version") -> dict[str, Any]:
    return event("ERROR", {"kind": "Status", "status": "Failure", "code": 410, "reason": "Expired", "message": message})


def run(*script: Any, page_size: int = 500) -> tuple[ListWatch[Any], ScriptedApi, Store, RecordedWaits]:
    """Run a loop over `script` on this thread until the script is over."""
    stopping = RecordedWaits()
    api = ScriptedApi(stopping, *script)
    store = Store()

    def parse(obj: Mapping[str, Any]) -> tuple[tuple[str, str], str]:
        value = obj.get("v")
        if not isinstance(value, str):
            raise MalformedObjectError("no v")
        api.log.append(f"parse {obj['metadata']['name']}")
        return object_key(obj), value

    loop: ListWatch[Any] = ListWatch(
        name="things",
        list_func=api,
        parse=parse,
        replace=store.replace,
        upsert=store.upsert,
        remove=store.remove,
        field_selector="spec.nodeName=n1",
        page_size=page_size,
        backoff=BACKOFF,
        draw=lambda: DRAW,
    )
    loop.run(stopping)
    return loop, api, store, stopping


def test_a_paged_list_is_reduced_page_by_page_then_watched_from_its_resource_version() -> None:
    loop, api, store, _ = run(
        Page([item("a"), item("b")], "5", token="t1"),
        Page([item("c")], "7"),
        Stream([event("ADDED", item("d", "8"))]),
    )
    assert api.log[:6] == ["list", "parse a", "parse b", "list", "parse c", "watch"]  # no page waits for the next
    first, second = api.lists()[:2]
    assert (first["limit"], first["_continue"], second["_continue"]) == (500, None, "t1")
    assert first["field_selector"] == "spec.nodeName=n1" and first["_preload_content"] is False
    watch = api.watches()[0]
    assert watch["resource_version"] == "7" and watch["allow_watch_bookmarks"] is True
    assert watch["field_selector"] == "spec.nodeName=n1" and watch["_preload_content"] is False
    assert watch["timeout_seconds"] == int(300 * (1 + DRAW))  # spread by the draw
    assert store.replaced == 1 and store.items == {
        ("ml", "a"): "x",
        ("ml", "b"): "x",
        ("ml", "c"): "x",
        ("ml", "d"): "x",
    }
    stats = loop.stats
    assert stats.synced and stats.lists == 1 and stats.watches == 1 and stats.events == 1


def test_events_and_bookmarks_move_the_resource_version_the_next_watch_resumes_from() -> None:
    loop, api, store, waits = run(
        Page([item("a"), item("b")], "5"),
        Stream(
            [
                event("MODIFIED", item("a", "6", v="y")),
                event("DELETED", item("b", "7")),
                event("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "12"}}),
            ]
        ),
        Stream([]),  # the server's timeout, quiet: resumes again after a short backoff
        Stream([event("ADDED", item("c", "13"))]),
    )
    assert [w["resource_version"] for w in api.watches()] == ["5", "12", "12", "13"]
    assert store.items == {("ml", "a"): "y", ("ml", "c"): "x"}
    assert waits.waits[0] == BACKOFF.delay(1, lambda: DRAW)  # only after the stream that brought nothing
    stats = loop.stats
    assert (stats.events, stats.bookmarks, stats.lists, stats.errors) == (3, 1, 1, 0)
    assert stats.resource_version == "13"


@pytest.mark.parametrize(
    "expiry",
    [ApiException(status=410, reason="Gone"), Stream([gone()])],
    ids=["http-410", "error-event"],
)
def test_an_expired_resource_version_is_answered_by_a_fresh_list(expiry: Any) -> None:
    loop, api, store, waits = run(
        Page([item("a")], "5"),
        expiry,
        Page([item("b")], "40"),
        Stream([event("ADDED", item("c", "41"))]),
    )
    assert api.log[:5] == ["list", "parse a", "watch", "list", "parse b"]
    assert api.watches()[1]["resource_version"] == "40"
    assert store.items == {("ml", "b"): "x", ("ml", "c"): "x"}
    assert waits.waits[0] == 0.0  # listed again at once
    stats = loop.stats
    assert (stats.lists, stats.relists, stats.errors) == (2, 1, 0)
    assert stats.last_error.startswith("HTTP 410")


def test_an_expiry_that_repeats_backs_off() -> None:
    _, _, _, waits = run(Page([], "5"), Stream([gone()]), Page([], "6"), Stream([gone()]), Page([], "7"))
    assert waits.waits[:2] == [0.0, BACKOFF.delay(2, lambda: DRAW)]


def test_failures_back_off_with_jitter_and_a_broken_watch_resumes_where_it_was() -> None:
    loop, api, store, waits = run(
        ApiException(status=500, reason="Internal Server Error"),
        ConnectionRefusedError("connection refused"),
        Page([item("a")], "5"),
        Stream([event("ADDED", item("b", "6")), event("ADDED", item("c", "9"))], fail_after=True),
        ConnectionRefusedError("connection refused"),
        Stream([event("ADDED", item("d", "10"))]),
    )
    assert waits.waits[:4] == [BACKOFF.delay(n, lambda: DRAW) for n in (1, 2, 1, 2)]
    assert waits.waits[:4] == [0.75, 1.5, 0.75, 1.5]
    assert [w["resource_version"] for w in api.watches()] == ["5", "9", "9", "10"]
    assert len(api.lists()) == 3  # two refused, one answered: the broken watch resumed without a list
    assert store.items.keys() == {("ml", "a"), ("ml", "b"), ("ml", "c"), ("ml", "d")}
    stats = loop.stats
    assert stats.errors == 4  # 500, refused, reset, refused
    assert stats.connected and stats.synced


def test_a_failure_shows_in_the_stats() -> None:
    loop, *_ = run(ApiException(status=503, reason="Service Unavailable"))
    assert loop.stats.errors == 1 and not loop.stats.synced and not loop.stats.connected
    assert loop.stats.last_error == "HTTP 503 Service Unavailable"


@pytest.mark.parametrize("status", [403, 404])
def test_a_refused_first_list_marks_the_resource_unserved_until_a_list_succeeds(status: int) -> None:
    refused, *_ = run(ApiException(status=status, reason="Forbidden"))
    assert refused.stats.unserved and not refused.stats.synced
    recovered, *_ = run(ApiException(status=status, reason="Forbidden"), Page([], "3"))
    assert not recovered.stats.unserved and recovered.stats.synced


def test_malformed_items_and_events_are_skipped_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="toolkit.listwatch"):
        loop, _, store, _ = run(
            Page([item("a"), {"metadata": {"namespace": "ml", "name": "bad"}}, "garbage"], "5"),
            Stream(
                [
                    event("ADDED", {"metadata": {"namespace": "ml", "name": "worse"}}),
                    event("DELETED", {"metadata": {"namespace": "ml"}}),  # no name
                    event("ADDED", item("b", "6")),
                ]
            ),
        )
    assert store.items == {("ml", "a"): "x", ("ml", "b"): "x"}
    assert loop.stats.skipped == 4 and loop.stats.events == 1
    assert sum("skipping a malformed" in r.getMessage() for r in caplog.records) == 4


@settings(max_examples=50, deadline=None)
@given(
    names=st.lists(st.text("abcxyz-", min_size=1, max_size=12), min_size=1, max_size=8, unique=True),
    cuts=st.lists(st.integers(0, 2000), max_size=20),
)
def test_events_cut_anywhere_in_the_stream_arrive_whole(names: list[str], cuts: list[int]) -> None:
    events = [event("ADDED", item(name, str(n), v=name)) for n, name in enumerate(names, start=10)]
    _, _, store, _ = run(Page([], "5"), Stream(events, cuts=cuts))
    assert store.items == {("ml", name): name for name in names}


def test_interrupt_ends_a_blocked_watch_at_once() -> None:
    with kube_api_on_a_thread(bookmark_interval=3600) as server:
        server.put_pod("ml", "a", node="n1")
        stopping = threading.Event()
        store = Store()
        loop: ListWatch[Any] = ListWatch(
            name="pods",
            list_func=CoreV1Api(api_client(base_url=server.url)).list_pod_for_all_namespaces,
            parse=lambda obj: (object_key(obj), "x"),
            replace=store.replace,
            upsert=store.upsert,
            remove=store.remove,
            watch_timeout_seconds=3600,
        )
        thread = threading.Thread(target=loop.run, args=(stopping,), daemon=True)
        thread.start()
        wait_for(lambda: loop.stats.watches == 1, "the watch started", timeout=10, period=0.02)
        stopping.set()
        loop.interrupt()
        thread.join(timeout=10)  # a deadline: without interrupt() the watch would block for an hour
        assert not thread.is_alive()
        assert store.items == {("ml", "a"): "x"} and loop.stats.errors == 0


def test_nonsense_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ListWatch(name="x", list_func=print, parse=dict, replace=print, upsert=print, remove=print, page_size=0)


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="toolkit.listwatch"):
        run(
            ApiException(status=500, reason="Internal Server Error"),
            ConnectionRefusedError("connection refused"),
            ConnectionRefusedError("connection refused"),
            Page([item("a")], "5"),
            Stream([event("ADDED", item("b", "6"))]),
        )
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [m for m in messages if m[0] == "WARNING"] == [
        ("WARNING", "things: list failed: HTTP 500 Internal Server Error; retrying with backoff")
    ]
    assert messages.count(("INFO", "things: the API server answers again")) == 1
