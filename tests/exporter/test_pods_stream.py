"""`/pods?watch=1`: one line per published snapshot, thinned by `every`, filtered to several namespaces, bounded in
number and in time; and the stream's line format, written and read."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import exporter.server
from exporter.pods_answers import SerializedPods
from exporter.server import MAX_STREAMS_PER_CLIENT, build_app
from tests.support.snapshots import SimulatedNode
from toolkit.pods_contract import (
    MAX_STREAMS,
    STREAM_CONTENT_TYPE,
    ContainerView,
    DeviceFigures,
    NodePods,
    PodsDocumentError,
    PodView,
    encode_node_pods,
    parse_node_pods,
    parse_stream_event,
    stream_event,
)

Client = Any  # aiohttp's TestClient
WATCH = {"watch": "1"}


@pytest.fixture
async def client(node: SimulatedNode, aiohttp_client: Any) -> AsyncIterator[Client]:
    """A client of the app; the test publishes snapshots with poll_once() (no worker thread)."""
    yield await aiohttp_client(build_app(node.loop, run_poll_loop=False, clock=lambda: 1_760_000_000.5))


async def next_line(response: Any, timeout: float = 5.0) -> bytes:
    return bytes(await asyncio.wait_for(response.content.readline(), timeout))


def publish(node: SimulatedNode) -> None:
    assert node.clock is not None
    node.clock.advance(1.0)
    node.loop.poll_once()


async def test_a_stream_sends_the_current_snapshot_then_each_new_one(node: SimulatedNode, client: Client) -> None:
    publish(node)
    response = await client.get("/pods", params=WATCH)
    assert response.status == 200
    assert response.headers["Content-Type"] == STREAM_CONTENT_TYPE
    answered_at, first = parse_stream_event(await next_line(response))
    assert answered_at == 1_760_000_000.5  # the exporter's clock when it sent the line
    assert first.node == "sim-node"
    published = node.loop.published
    assert published is not None and published.pods is not None
    assert first == parse_node_pods(published.pods.full)  # the bytes every reader gets
    publish(node)
    _, second = parse_stream_event(await next_line(response))
    assert second.generated_at > first.generated_at
    with pytest.raises(TimeoutError):  # nothing new published: nothing sent
        await next_line(response, timeout=0.3)
    response.close()


async def test_every_thins_a_stream(node: SimulatedNode, client: Client) -> None:
    publish(node)
    response = await client.get("/pods", params={**WATCH, "every": "3600"})
    await next_line(response)
    for _ in range(3):
        publish(node)
    with pytest.raises(TimeoutError):
        await next_line(response, timeout=0.3)
    response.close()


async def test_a_stream_waits_for_the_first_snapshot(node: SimulatedNode, client: Client) -> None:
    response = await client.get("/pods", params=WATCH)
    assert response.status == 200
    publish(node)
    _, document = parse_stream_event(await next_line(response))
    assert document.node == "sim-node"
    response.close()


async def test_a_stream_ends_after_its_time(
    node: SimulatedNode, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exporter.server, "STREAM_SECONDS", 0.3)
    publish(node)
    response = await client.get("/pods", params=WATCH)
    body = await asyncio.wait_for(response.read(), 5)  # ends: the reader connects again
    assert body.count(b"\n") == 1


async def test_a_stream_ends_at_once_when_the_server_stops(node: SimulatedNode, client: Client) -> None:
    """A SIGTERM must not wait out a stream (the exporter lets go of NVML, which a driver upgrade waits for, only
    once its server has stopped)."""
    publish(node)
    response = await client.get("/pods", params=WATCH)
    await next_line(response)
    await client.app.shutdown()  # what the server's graceful stop runs first
    assert await asyncio.wait_for(response.read(), 2) == b""  # the stream ended: no more lines


@pytest.fixture
async def from_address(client: Client) -> AsyncIterator[Callable[[str], aiohttp.ClientSession]]:
    """Sessions to the app from other loopback addresses (Linux routes all of 127.0.0.0/8 to the loopback device):
    clients the exporter tells apart by address."""
    sessions: list[aiohttp.ClientSession] = []

    def session(address: str) -> aiohttp.ClientSession:
        opened = aiohttp.ClientSession(
            base_url=str(client.make_url("/")), connector=aiohttp.TCPConnector(local_addr=(address, 0))
        )
        sessions.append(opened)
        return opened

    yield session
    for opened in sessions:
        await opened.close()


async def test_streams_are_bounded_in_number(
    node: SimulatedNode, client: Client, from_address: Callable[[str], aiohttp.ClientSession]
) -> None:
    publish(node)
    addresses = [f"127.0.0.{2 + i // MAX_STREAMS_PER_CLIENT}" for i in range(MAX_STREAMS)]
    streams = [await from_address(address).get("/pods", params=WATCH) for address in addresses]
    assert all(s.status == 200 for s in streams)
    refused = await from_address("127.0.0.100").get("/pods", params=WATCH)
    assert refused.status == 429 and "at once" in await refused.text()
    assert refused.headers["Retry-After"] == "10"
    plain = await from_address("127.0.0.100").get("/pods")  # a plain answer is never refused for that
    assert plain.status == 200
    streams[0].close()
    for _ in range(50):  # the closed stream's place is freed when its handler notices
        publish(node)
        again = await from_address("127.0.0.100").get("/pods", params=WATCH)
        if again.status == 200:
            again.close()
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("a closed stream's place was never freed")
    for stream in streams[1:]:
        stream.close()


async def test_one_client_cannot_take_every_stream(
    node: SimulatedNode, client: Client, from_address: Callable[[str], aiohttp.ClientSession]
) -> None:
    """Issue 21, item 1: a client that takes each slot the adapter frees blinded the adapter. Whatever one client
    address does, it holds at most MAX_STREAMS_PER_CLIENT streams: the others, the adapter's, stay free."""
    publish(node)
    hog = from_address("127.0.0.2")
    held = [await hog.get("/pods", params=WATCH) for _ in range(MAX_STREAMS)]
    assert [s.status for s in held].count(200) == MAX_STREAMS_PER_CLIENT
    refused = next(s for s in held if s.status == 429)
    assert "per client" in await refused.text() and refused.headers["Retry-After"] == "10"
    adapter = await from_address("127.0.0.3").get("/pods", params=WATCH)
    assert adapter.status == 200
    _, document = parse_stream_event(await next_line(adapter))
    assert document.node == "sim-node"
    for stream in (*held, adapter):
        stream.close()


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"watch": "yes"}, "watch"),
        ({"watch": "1", "every": "-1"}, "every"),
        ({"watch": "1", "every": "nan"}, "every"),
        ({"watch": "1", "every": "3601"}, "every"),
        ({"namespace": "Not_A/Namespace"}, "namespace"),
    ],
)
async def test_bad_parameters_are_refused(
    node: SimulatedNode, client: Client, params: dict[str, str], problem: str
) -> None:
    publish(node)
    response = await client.get("/pods", params=params)
    assert response.status == 400
    assert (await response.text()).startswith(problem + ":")


async def test_too_many_namespaces_are_refused(node: SimulatedNode, client: Client) -> None:
    publish(node)
    many = [("namespace", f"ns-{i}") for i in range(exporter.server.MAX_NAMESPACES_ASKED + 1)]
    response = await client.get("/pods", params=many)
    assert response.status == 400
    several = await client.get("/pods", params=[("namespace", "a"), ("namespace", "b")])
    assert several.status == 200


# ---- the document for several namespaces, and the line format --------------------------------------------------------
def pod(namespace: str, name: str, at: datetime) -> PodView:
    device = DeviceFigures(
        uuid="GPU-1", gpu=0, gpu_uuid="GPU-1", model="NVIDIA H100", share="exclusive", utilization_percent=42.5
    )
    return PodView(
        namespace=namespace,
        name=name,
        containers=(ContainerView(name="main", devices=(device,)),),
        sampled_at=at,
        window_seconds=1.0,
    )


def received(document: NodePods) -> NodePods:
    """The document as a reader receives it (tests/toolkit/test_pods_contract: the same values)."""
    return parse_node_pods(encode_node_pods(document))


AT = datetime(2026, 11, 23, 17, 0, tzinfo=UTC)
NAMESPACES = ("a", "b", "c")


@given(st.lists(st.tuples(st.sampled_from(NAMESPACES), st.integers(0, 20)), max_size=12, unique=True))
def test_several_namespaces_are_the_union_of_each(pods: list[tuple[str, int]]) -> None:
    document = NodePods(
        node="n", generated_at=AT, interval_seconds=1.0, pods=tuple(pod(ns, f"p-{i}", AT) for ns, i in pods)
    )
    serialized = SerializedPods.of(document)
    for chosen in ((), ("a",), ("a", "b"), ("c", "a"), NAMESPACES, ("a", "zz")):
        filtered = parse_node_pods(serialized.for_namespaces(chosen))
        expected = {(p.namespace, p.name) for p in document.pods if p.namespace in chosen}
        assert {(p.namespace, p.name) for p in filtered.pods} == expected
        assert msgspec.structs.replace(filtered, pods=()) == received(msgspec.structs.replace(document, pods=()))
    assert parse_node_pods(serialized.for_namespaces(None)) == received(document)


@given(
    st.floats(min_value=1e-3, max_value=1e10, allow_nan=False),
    st.integers(0, 5),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=365)),
)
def test_a_stream_line_reads_back(answered_at: float, pods: int, later: timedelta) -> None:
    at = AT + later
    document = NodePods(
        node="n", generated_at=at, interval_seconds=1.0, pods=tuple(pod("a", f"p-{i}", at) for i in range(pods))
    )
    line = stream_event(answered_at, SerializedPods.of(document).full)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    when, read = parse_stream_event(line)
    assert when == pytest.approx(answered_at, abs=5e-4)  # written to the millisecond
    assert read == received(document)


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b'{"answered_at": 1.0}',
        b'{"answered_at": -1, "document": {}}',
        json.dumps({"answered_at": 1e12, "document": {"node": "n"}}).encode(),
        b'{"answered_at": 1.0, "document": {"node": "n", "generated_at": "2026-11-23T17:00:00Z", '
        b'"interval_seconds": 0, "pods": []}}',
    ],
)
def test_a_bad_stream_line_is_one_line_of_problem(line: bytes) -> None:
    with pytest.raises(PodsDocumentError) as caught:
        parse_stream_event(line)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith("not a gpu-pulse /pods stream event")
