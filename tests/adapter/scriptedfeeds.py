"""Node feeds fed in-process: NodeFeeds whose connections reach scripted exporters instead of HTTP servers.

Everything past the connection is the cache's own (documents arriving, failures, reconnects, the sweep, the pod figure
index), so tests can drive many nodes through many documents quickly and on a manual clock. The exporter answers on
the same clock, so a document's figures are placed on the adapter's clock as sent (nodeanswer.exporter_clock_offset
is 0), and a reconnect that hands the same document again does not make its figures look fresher.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from adapter.sources.figureindex import IndexedValue, IndexKey
from adapter.sources.nodeanswer import Namespaces
from adapter.sources.nodefeed import FeedError, NodeFeed
from adapter.sources.nodefeeds import NodeFeeds
from tests.support.clocks import ManualClock
from toolkit.pods_contract import (
    ContainerView,
    DeviceFigures,
    InferenceFigures,
    NodePods,
    PodView,
    parse_node_pods,
)


@dataclass(frozen=True)
class Figure:
    """A pod as a node's document lists it: one GPU's utilization, the uid the exporter knows, how long before the
    document it was sampled, and what its serving engine reports (sampled as long before the document)."""

    utilization: float = 50.0
    uid: str | None = None
    age: float = 0.0
    inference: InferenceFigures | None = None


PodFiguresByKey = Mapping[tuple[str, str], Figure]  # (namespace, pod) -> its figure


def _when(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def node_document(node: str, pods: PodFiguresByKey, now: float, interval: float = 1.0) -> NodePods:
    """A document of `node` generated at `now` (seconds on the test's clock) listing `pods`."""
    return NodePods(
        node=node,
        generated_at=_when(now),
        interval_seconds=interval,
        pods=tuple(_pod(node, namespace, name, figure, now) for (namespace, name), figure in sorted(pods.items())),
    )


def _pod(node: str, namespace: str, name: str, figure: Figure, now: float) -> PodView:
    device = DeviceFigures(
        uuid=f"GPU-{node}-0",
        gpu=0,
        gpu_uuid=f"GPU-{node}-0",
        model="NVIDIA H100 80GB HBM3",
        share="exclusive",
        utilization_percent=figure.utilization,
    )
    return PodView(
        namespace=namespace,
        name=name,
        uid=figure.uid,
        containers=(ContainerView(name="main", devices=(device,)),),
        sampled_at=_when(now - figure.age),
        window_seconds=1.0,
        inference=None
        if figure.inference is None
        else msgspec.structs.replace(figure.inference, sampled_at=_when(now - figure.age)),
    )


def _carrying(document: NodePods, carried: Namespaces) -> NodePods:
    """The document filtered to the namespaces a connection asked for, as the exporter filters it."""
    if carried is None:
        return document
    return msgspec.structs.replace(document, pods=tuple(p for p in document.pods if p.namespace in carried))


@dataclass
class ScriptedExporter:
    """A node's exporter: what it sends now (a document, a failure to raise, or nothing yet), and the namespaces each
    connection asked for (None: the whole document)."""

    sent: NodePods | str | None = None
    connections: list[Namespaces] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def send(self, sent: NodePods | str) -> None:
        self.sent = sent
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


class ScriptedFeed(NodeFeed):
    """A node's feed that reads `script.exporters[url]` instead of connecting: a connection hands the exporter's
    current document at once and each one it sends later, or fails with its failure."""

    script: ScriptedFeeds | None = None

    async def connect(self, carried: Namespaces, started: float) -> float:
        script = self.script
        assert script is not None
        exporter = script.exporter(self.url)
        exporter.connections.append(carried)
        while True:
            changed, sent = exporter.changed, exporter.sent
            if isinstance(sent, str):
                raise FeedError(sent)
            if sent is not None:
                document = _carrying(sent, carried)
                body = msgspec.json.encode(document)  # what the answer reads again (NodeAnswer keeps the bytes only)
                self.arrived(document, body, parse_node_pods, script.exporter_clock.time(), carried, started)
                script.delivered[self.url] = sent
            await changed.wait()


class ScriptedFeeds(NodeFeeds):
    """NodeFeeds whose feeds are ScriptedFeed: each reads its exporter's script instead of connecting."""

    def __init__(self, clock: ManualClock, **options: Any) -> None:
        options = {"timeout": 0.5, "failure_ttl": 0.01, "max_failure_ttl": 0.02, **options}
        super().__init__(clock=clock.monotonic, wall_clock=clock.time, **options)
        self.exporter_clock = clock
        self.exporters: dict[str, ScriptedExporter] = {}
        self.delivered: dict[str, NodePods] = {}  # url -> the document last handed to its feed

    def exporter(self, url: str) -> ScriptedExporter:
        return self.exporters.setdefault(url, ScriptedExporter())

    def _feed(self, node: str, url: str, now: float) -> NodeFeed:
        feed = ScriptedFeed(node, url, self._client, self._arrived, self._failed, now)
        feed.script = self
        return feed

    def following(self, url: str) -> NodeFeed | None:
        return next((feed for feed in self._feeds.values() if feed.url == url), None)

    async def send(self, url: str, sent: NodePods | str) -> None:
        """Have the exporter at `url` send a document (or fail), and wait until the feed following it, if any, took
        it."""
        self.exporter(url).send(sent)

        def taken() -> bool:
            feed = self.following(url)
            if feed is None:
                return True
            if isinstance(sent, str):
                return feed.error == sent
            return self.delivered.get(url) is sent and feed.answer is not None

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while not taken():
            assert loop.time() < deadline, f"{url} never took {sent if isinstance(sent, str) else 'its document'}"
            await asyncio.sleep(0.001)

    async def filled(self) -> None:
        """Wait until the metrics being filled into the pod figure index from the answers at hand are."""
        await self._index.filled()

    def entries(self, metric_name: str) -> Mapping[IndexKey, IndexedValue] | None:
        """The pod figure index's entries of `metric_name`; None before its first question."""
        return self._index.entries(metric_name)

    def indexed_keys(self, metric_name: str) -> set[IndexKey]:
        return set(self._index.entries(metric_name) or {})

    def current_keys(self, metric_name: str, nodes: Iterable[str] | None = None) -> set[IndexKey]:
        """What the index of `metric_name` must hold: each current feed's current answer's pods."""
        metric = next(m for m in self._index.metrics() if m.name == metric_name)
        return {
            (node, namespace, pod)
            for node, feed in self._feeds.items()
            if feed.answer is not None and (nodes is None or node in nodes)
            for namespace, pods in feed.answer.values(metric).items()
            for pod in pods
        }
