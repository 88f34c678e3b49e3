"""The nodes the direct source follows: one feed per node (nodefeed), kept only while queries need it.

A node some query asked about gets a feed; a feed nobody asked about within `keep_warm_seconds` is closed. When a
document arrives, its node's answer (nodeanswer) replaces the one before, in the feed and in the pod figure index
(figureindex), which works out the values of every metric indexed: a query only looks values up, and never waits on a
node whose feed runs. A query about a namespace the feed does not carry yet reconnects it with that namespace added and
waits (up to `timeout`) for its first document; other namespaces keep being answered from the current one meanwhile.
So what crosses the network is what recent queries need, once per node and not once per namespace or per query.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import ssl
import time
from collections.abc import Callable, Mapping, Sequence

import aiohttp

from adapter.metrics_config import MetricDefinition
from adapter.sources.figureindex import PodFigureIndex
from adapter.sources.metricsource import ServedValue
from adapter.sources.nodeanswer import Namespaces, NodeAnswer, RereadDocument, covers, exporter_clock_offset
from adapter.sources.nodefeed import MAX_DOCUMENT_BYTES, ExporterClient, FeedSettings, NodeFeed
from toolkit.pods import Pod
from toolkit.pods_contract import NodePods

# Namespaces asked about within this many seconds are gathered into one reconnect of a feed.
GATHER_SECONDS = 0.02
# a warm-up (`warm`) is over when every node it opened has answered or failed, or after this many seconds
WARM_UP_SECONDS = 20.0
# A feed served from the pod figure index is marked wanted again once its mark is this old (at most a quarter of
# `keep_warm_seconds`): a 1,000-pod answer then writes to a few feeds a second, not to 800 each time.
WANT_AGAIN_SECONDS = 1.0
FetchObserver = Callable[[str, float], None]  # (outcome "ok" | "error" | "timeout", seconds)


class Miss:
    """No answer can be given without waiting for the node."""


MISS = Miss()


class NodeFeeds:
    """The `/pods` documents of the nodes clients asked about, each followed by one feed while it is asked about.

    `clock` is monotonic (when queries asked, when to retry); `wall_clock` is the clock figures are served on, which
    answers place their documents' sample times on."""

    def __init__(
        self,
        *,
        timeout: float = 1.0,
        headers: Callable[[], Mapping[str, str]] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        keep_warm_seconds: float = 120.0,
        refresh: float = 0.0,
        failure_ttl: float = 1.0,
        max_failure_ttl: float = 30.0,
        max_document_bytes: int = MAX_DOCUMENT_BYTES,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        observe: FetchObserver | None = None,
    ) -> None:
        """`timeout`: seconds to connect, and for a query to wait for a node's first document. `refresh`: the least
        number of seconds between two documents of a node (0: each snapshot the exporter publishes)."""
        settings = FeedSettings(
            timeout=timeout,
            refresh=refresh,
            keep_warm_seconds=keep_warm_seconds,
            failure_ttl=failure_ttl,
            max_failure_ttl=max_failure_ttl,
            max_document_bytes=max_document_bytes,
            headers=headers,
        )
        self._client = ExporterClient(settings, clock)
        self._ssl = ssl_context
        self._monotonic = clock
        self._wall_clock = wall_clock
        self._observe = observe
        self._feeds: dict[str, NodeFeed] = {}
        self._index = PodFigureIndex()
        self._want_again = min(WANT_AGAIN_SECONDS, keep_warm_seconds / 4)
        self._sweeper: asyncio.Task[None] | None = None
        self._warming: dict[str, NodeFeed] = {}
        self._warm_since: float | None = None
        self.documents = 0  # documents received, all feeds

    @property
    def size(self) -> int:
        """Nodes followed."""
        return len(self._feeds)

    @property
    def connections(self) -> int:
        """Requests made to exporters, all feeds."""
        return self._client.connections

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=4, ssl=self._ssl or True)
        self._client.session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="gpu-pulse-node-feeds-sweeper")

    async def close(self) -> None:
        self._client.closed = True
        feeds = list(self._feeds.values())
        self._feeds.clear()
        for feed in feeds:
            self._drop(feed)
        tasks = [t for t in (self._sweeper, *(f.task for f in feeds)) if t is not None]
        if self._sweeper is not None:
            self._sweeper.cancel()
        await asyncio.gather(self._index.close(), *tasks, return_exceptions=True)
        self._sweeper = None
        if self._client.session is not None:
            await self._client.session.close()
            self._client.session = None

    def current_answers(self) -> list[NodeAnswer]:
        """The newest answer of each node followed that answers now."""
        return [feed.answer for feed in self._feeds.values() if feed.answer is not None and feed.error is None]

    # ---- questions ---------------------------------------------------------------------------------------------------
    def cached(self, node: str, url: str, namespace: str | None) -> NodeAnswer | Miss | None:
        """The node's newest document if it carries `namespace` (every namespace for None), None when the node does
        not answer, else MISS (nothing at hand: `answer` waits for it)."""
        return self.cached_many({node: url}, namespace)[node]

    def cached_many(self, urls: Mapping[str, str], namespace: str | None) -> dict[str, NodeAnswer | Miss | None]:
        """`cached` for each node -> exporter URL of `urls` (a 1,000-pod answer asks about some 800 nodes), with one
        reading of the clock."""
        now = self._monotonic()
        feeds = self._feeds
        found: dict[str, NodeAnswer | Miss | None] = {}
        for node, url in urls.items():
            feed = feeds.get(node)
            if feed is None or feed.url != url:
                found[node] = MISS
                continue
            feed.want(namespace, now)
            if feed.error is not None:
                found[node] = None  # its feed asks again after its retry delay, for what is wanted by then
                continue
            answer = feed.answer
            if answer is not None and covers(answer.carried, namespace):
                found[node] = answer
                continue
            if not covers(feed.streamed, namespace) and feed.reconnect is None:
                feed.reconnect = asyncio.get_running_loop().call_later(GATHER_SECONDS, self._reconnect, feed)
            found[node] = MISS
        return found

    def served_at_hand(
        self,
        metric: MetricDefinition,
        pods: Sequence[Pod],
        namespace: str | None,
        wall_now: float,
        max_age: Callable[[float], float],
    ) -> tuple[list[ServedValue | None], list[int]]:
        """Each pod's value of `metric` from the pod figure index (figureindex.PodFigureIndex.serve: where its node's
        current answer carries `namespace` and lists the pod, and the value is servable at `wall_now`), else None; and
        where in `pods` the scheduled pods without one are: whether those have a figure at all is for `cached_many`
        and `answer` to say. Each feed whose answer carried the question stays wanted, as `cached` keeps it, its mark
        renewed once it is `_want_again` seconds old."""
        served, rest, nodes = self._index.serve(metric, pods, namespace, wall_now, max_age)
        if nodes:
            now = self._monotonic()
            renew_before = now - self._want_again
            feeds = self._feeds
            for node in nodes:
                feed = feeds.get(node)
                if feed is not None and feed.wanted_since(namespace) < renew_before:
                    feed.want(namespace, now)
        return served, rest

    async def answer(self, node: str, url: str, namespace: str | None) -> NodeAnswer | None:
        """The node's document carrying `namespace` (every namespace for None), waited for up to `timeout` seconds
        when none is at hand; None when the exporter does not answer."""
        found = self.cached(node, url, namespace)
        if not isinstance(found, Miss):
            return found
        feed = self._feeds.get(node)
        if self._client.closed:
            return None
        if feed is None or feed.url != url:  # new, or the exporter moved (new pod IP): the old answer is not its
            feed = self._open(node, url, namespace, self._monotonic())
        arrived: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (namespace, arrived)
        feed.waiters.append(waiter)
        try:
            async with asyncio.timeout(self._client.settings.timeout):
                await arrived
        except TimeoutError:
            return None
        finally:
            with contextlib.suppress(ValueError):
                feed.waiters.remove(waiter)
        answer = feed.answer
        if answer is not None and covers(answer.carried, namespace):
            return answer
        return None

    # ---- the warm-up -------------------------------------------------------------------------------------------------
    def warm(self, urls: Mapping[str, str]) -> None:
        """Follow these nodes (node -> exporter URL) before any question about them: whole documents, as a node asked
        about in nodefeed.WHOLE_DOCUMENT_NAMESPACES namespaces is followed. A replica that starts or restarts in a
        fleet gets every HPA's question within 15 s, and each question about a node not followed yet waits for its
        first document; `warmed` says when the wait is over, so that the replica is sent no question before. A node
        nobody asks about is closed after `keep_warm_seconds`, as any feed."""
        if self._client.closed:
            return
        now = self._monotonic()
        self._warm_since = now
        for node, url in urls.items():
            feed = self._feeds.get(node)
            if feed is None or feed.url != url:
                feed = self._open(node, url, None, now)
            self._warming[node] = feed

    def warmed(self) -> bool:
        """Whether the warm-up is over: every node it opened has answered or failed (or was closed), or
        WARM_UP_SECONDS have passed. False before `warm` is called."""
        if self._warm_since is None:
            return False
        if self._warming and self._monotonic() - self._warm_since < WARM_UP_SECONDS:
            feeds = self._feeds
            for node, feed in list(self._warming.items()):
                if feeds.get(node) is feed and feed.answer is None and feed.error is None:
                    return False
                del self._warming[node]
        self._warming.clear()
        return True

    # ---- feeds -------------------------------------------------------------------------------------------------------
    def _feed(self, node: str, url: str, now: float) -> NodeFeed:
        """A feed of `node` at `url`, not started."""
        return NodeFeed(node, url, self._client, self._arrived, self._failed, now)

    def _open(self, node: str, url: str, namespace: str | None, now: float) -> NodeFeed:
        """A new feed of `node` (replacing one for another URL), following it from now on."""
        old = self._feeds.get(node)
        if old is not None:
            self._drop(old)
        feed = self._feeds[node] = self._feed(node, url, now)
        feed.want(namespace, now)
        feed.task = asyncio.create_task(feed.follow(), name=f"gpu-pulse-node-feed-{node}")
        return feed

    def _reconnect(self, feed: NodeFeed) -> None:
        """Connect again now, carrying what is wanted by now (a query asked about a namespace the feed lacks)."""
        feed.reconnect = None
        if self._client.closed or self._feeds.get(feed.node) is not feed or feed.error is not None:
            return  # dropped, or failing: its next attempt carries what is wanted then
        if feed.task is not None:
            feed.task.cancel()
        feed.task = asyncio.create_task(feed.follow(), name=f"gpu-pulse-node-feed-{feed.node}")

    def _drop(self, feed: NodeFeed) -> None:
        if feed.answer is not None:
            self._index.drop(feed.node, feed.answer)
        if feed.task is not None:
            feed.task.cancel()
        if feed.reconnect is not None:
            feed.reconnect.cancel()
        self._wake(feed, everyone=True)
        if self._feeds.get(feed.node) is feed:
            del self._feeds[feed.node]

    async def _sweep_loop(self) -> None:
        """Close the feeds nobody asked about within `keep_warm_seconds`."""
        keep_warm = self._client.settings.keep_warm_seconds
        while True:
            await asyncio.sleep(max(0.05, min(1.0, keep_warm / 4)))
            horizon = self._monotonic() - keep_warm
            for feed in [f for f in self._feeds.values() if f.wanted_at < horizon and not f.waiters]:
                self._drop(feed)

    def _arrived(
        self,
        feed: NodeFeed,
        document: NodePods,
        source: bytes,
        reread: RereadDocument,
        exporter_now: float | None,
        carried: Namespaces,
        started: float,
    ) -> None:
        """A feed's document: its node's answer from now on, in the feed and in the index (the values of every metric
        indexed worked out at once). The feed of a dropped node (its task outlived its cancellation) indexes none."""
        offset = exporter_clock_offset(document, exporter_now, self._wall_clock())
        answer = NodeAnswer(
            document, source, reread, clock_offset=offset, carried=carried, worked_out=self._index.metrics()
        )
        feed.took(answer)
        if self._feeds.get(feed.node) is feed:
            self._index.replace(feed.node, answer)
        self.documents += 1
        if self._observe is not None and not math.isnan(started):
            self._observe("ok", time.perf_counter() - started)
        self._wake(feed)

    def _failed(self, feed: NodeFeed, problem: str, outcome: str, started: float) -> None:
        """A feed's failure: its node's pods drop out (of the feed and the index) until it answers again."""
        if feed.answer is not None:
            self._index.drop(feed.node, feed.answer)
        feed.lost(problem)
        if self._observe is not None:
            self._observe(outcome, time.perf_counter() - started)
        self._wake(feed, everyone=True)

    def _wake(self, feed: NodeFeed, *, everyone: bool = False) -> None:
        """Wake the queries waiting for a document carrying their namespace (all of them after a failure)."""
        answer = feed.answer
        carried = answer.carried if answer is not None else frozenset()
        for namespace, arrived in feed.waiters:
            if not arrived.done() and (everyone or covers(carried, namespace)):
                arrived.set_result(None)
