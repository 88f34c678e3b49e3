"""Node feeds fed in-process: a NodePodsCache whose connections reach scripted exporters instead of HTTP servers.

Everything past the connection is the cache's own (documents arriving, failures, reconnects, the sweep, the pod figure
index), so tests can drive many nodes through many documents quickly and on a manual clock. The exporter answers on
the same clock, so a document's figures are placed on the adapter's clock as sent (nodepods.exporter_clock_offset is
0), and a reconnect that hands the same document again does not make its figures look fresher.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from adapter.sources.nodepods import Namespaces, NodePodsCache, _Feed, _FeedError
from tests.support.clocks import ManualClock
from toolkit.pods_contract import ContainerView as ReceivedContainer
from toolkit.pods_contract import DeviceFigures as ReceivedDevice
from toolkit.pods_contract import NodePods as ReceivedNodePods
from toolkit.pods_contract import PodView as ReceivedPod
from toolkit.pods_contract import parse_node_pods


@dataclass(frozen=True)
class Figure:
    """A pod as a node's document lists it: one GPU's utilization, the uid the exporter knows, how long before the
    document it was sampled."""

    utilization: float = 50.0
    uid: str | None = None
    age: float = 0.0


PodFiguresByKey = Mapping[tuple[str, str], Figure]  # (namespace, pod) -> its figure


def _when(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def node_document(node: str, pods: PodFiguresByKey, now: float, interval: float = 1.0) -> ReceivedNodePods:
    """A document of `node` generated at `now` (seconds on the test's clock) listing `pods`."""
    return ReceivedNodePods(
        node=node,
        generated_at=_when(now),
        interval_seconds=interval,
        pods=tuple(_pod(node, namespace, name, figure, now) for (namespace, name), figure in sorted(pods.items())),
    )


def _pod(node: str, namespace: str, name: str, figure: Figure, now: float) -> ReceivedPod:
    device = ReceivedDevice(
        uuid=f"GPU-{node}-0",
        gpu=0,
        gpu_uuid=f"GPU-{node}-0",
        model="NVIDIA H100 80GB HBM3",
        share="exclusive",
        utilization_percent=figure.utilization,
    )
    return ReceivedPod(
        namespace=namespace,
        name=name,
        uid=figure.uid,
        containers=(ReceivedContainer(name="main", devices=(device,)),),
        sampled_at=_when(now - figure.age),
        window_seconds=1.0,
    )


def _carrying(document: ReceivedNodePods, carried: Namespaces) -> ReceivedNodePods:
    """The document filtered to the namespaces a connection asked for, as the exporter filters it."""
    if carried is None:
        return document
    return msgspec.structs.replace(document, pods=tuple(p for p in document.pods if p.namespace in carried))


@dataclass
class ScriptedExporter:
    """A node's exporter: what it sends now (a document, a failure to raise, or nothing yet), and the namespaces each
    connection asked for (None: the whole document)."""

    sent: ReceivedNodePods | str | None = None
    connections: list[Namespaces] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def send(self, sent: ReceivedNodePods | str) -> None:
        self.sent = sent
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


class ScriptedFeeds(NodePodsCache):
    """A NodePodsCache whose feeds read `exporters[url]` instead of connecting: a connection hands the exporter's
    current document at once and each one it sends later, or fails with its failure."""

    def __init__(self, clock: ManualClock, **options: Any) -> None:
        options = {"timeout": 0.5, "failure_ttl": 0.01, "max_failure_ttl": 0.02, **options}
        super().__init__(clock=clock.monotonic, wall_clock=clock.time, **options)
        self.exporter_clock = clock
        self.exporters: dict[str, ScriptedExporter] = {}
        self.delivered: dict[str, ReceivedNodePods] = {}  # url -> the document last handed to its feed

    def exporter(self, url: str) -> ScriptedExporter:
        return self.exporters.setdefault(url, ScriptedExporter())

    async def _connect(self, feed: _Feed, carried: Namespaces, started: float) -> float:
        exporter = self.exporter(feed.url)
        exporter.connections.append(carried)
        while True:
            changed, sent = exporter.changed, exporter.sent
            if isinstance(sent, str):
                raise _FeedError(sent)
            if sent is not None:
                document = _carrying(sent, carried)
                body = msgspec.json.encode(document)  # what the answer reads again (NodeAnswer keeps the bytes only)
                self._arrived(feed, document, body, parse_node_pods, self.exporter_clock.time(), carried, started)
                self.delivered[feed.url] = sent
            await changed.wait()

    def following(self, url: str) -> _Feed | None:
        return next((feed for feed in self._feeds.values() if feed.url == url), None)

    async def send(self, url: str, sent: ReceivedNodePods | str) -> None:
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
        """Wait until the indexes being filled from the answers at hand (NodePodsCache._fill) are."""
        while self._fills:
            await asyncio.gather(*self._fills)

    def indexed_keys(self, metric_name: str) -> set[tuple[str, str, str]]:
        return set(self._indexes.get(metric_name, {}))

    def current_keys(self, metric_name: str, nodes: Iterable[str] | None = None) -> set[tuple[str, str, str]]:
        """What the index of `metric_name` must hold: each current feed's current answer's pods."""
        metric = self._wanted_metrics[metric_name]
        return {
            (node, namespace, pod)
            for node, feed in self._feeds.items()
            if feed.answer is not None and (nodes is None or node in nodes)
            for namespace, pods in feed.answer.values(metric).items()
            for pod in pods
        }
