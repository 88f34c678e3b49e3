"""Following the exporters' `/pods` documents: one feed per node, kept only while queries need it.

A node some query asked about gets a feed: one long-lived `/pods?watch=1` stream from its exporter, which sends a
document for each snapshot it publishes (at most one per `refresh` seconds), filtered to the namespaces that queries
asked about within `keep_warm_seconds` (exporter.pods_document, "the stream"). When a document arrives, each pod's value
of every metric ever asked is worked out once (`NodeAnswer`), so a query only looks values up: queries never wait on a
node whose feed runs. A query about a namespace the feed does not carry yet reconnects it with that namespace added and
waits (up to `timeout`) for its first document; other namespaces keep being answered from the current one meanwhile.
A feed nobody asked about within `keep_warm_seconds` is closed. So what crosses the network is what recent queries
need, once per node and not once per namespace or per query, and an exporter sees one request per stream (its
streams end after about five minutes and are opened again) instead of one per document.

The HPA's question (1,000 pods over some 800 nodes) is answered from the pod figure index: for each metric asked about
by `served_at_hand`, one flat dict from (node, namespace, pod) to the pod's value in its node's current document
(`IndexedFigures`), kept as documents arrive. A document replaces its node's entries (those of pods it no longer lists
go); a feed that fails, is closed or is replaced (the exporter moved) takes its node's entries with it. An index made
at a metric's first question takes the documents already at hand INDEX_FILL_NODES at a time, the event loop free
between (`_fill`); until a node is in, questions about its pods go the node by node way. So at every moment the index
holds only values of the current answers of the current feeds, and once filled all of them; a question looks each pod
up once instead of visiting each node's feed, answer and values (`cached_many`).

An exporter that answers a plain document instead of a stream (one without streams) is asked again each `refresh`
seconds (at least its interval). So is one that refuses the stream with `429` (every stream slot taken, perhaps by
another client, exporter/server.py): the feed asks a plain `/pods` at once, which the exporter never refuses for that,
and tries a stream again after `STREAM_REFUSED_SECONDS`; a node is never left unread for want of a stream slot. A
node that does not answer (refused, timeout, HTTP error, bad document, stalled stream) has no document until it
answers again: its pods drop out, and it is asked again after a delay that doubles with each failure in a row
(`failure_ttl` up to `max_failure_ttl`), so neither queries nor the feed hammer it.

An exporter's answer is not trusted: redirects are not followed, a document (or a stream's line) is read up to
`max_document_bytes` (chunked or not, see responses), and each document is validated number by number
(exporter.pods_document). Times in a document are the exporter's; each document's figures are placed on the adapter's
clock by the exporter's own idea of "now" when it sent them (the stream event's `answered_at`, or the
exporter.pods_document.ANSWERED_AT_HEADER of a plain answer), so that a node whose clock is off by minutes has neither
its pods dropped nor stale figures kept (see `exporter_clock_offset`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from http import HTTPStatus

import aiohttp
import msgspec

from adapter.metrics_config import MetricDefinition
from adapter.sources.device_figures import listed_values, pod_sample
from adapter.sources.metricsource import ListedValue, PodKey, PodSample, ServedValue
from exporter.pods_document import (
    ANSWERED_AT_HEADER,
    STREAM_CONTENT_TYPE,
    PodsDocumentError,
    ReceivedNodePods,
    parse_answered_at,
    parse_node_pods,
    parse_stream_event,
)
from toolkit.logs import fields
from toolkit.pods import Pod
from toolkit.responses import UpstreamAnswerError, read_bounded

log = logging.getLogger(__name__)

# A node's whole /pods document is about 0.5 KB per pod and device: 300 GPU pods on a node are about 0.15 MB. 4 MiB is
# over twenty times that, and bounds what a hostile node can make the adapter hold: feeds x this.
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
# A stream that sends nothing for this many of its expected gaps (and at least STALL_SECONDS) is stalled: reconnect.
STALL_GAPS = 3
STALL_SECONDS = 10.0
# Connections being made at once (to the first document): a cold start asks every node at the same moment, and
# exporters answer sooner when they are not all asked in the same millisecond.
MAX_CONNECTING = 64
# Namespaces asked about within this many seconds are gathered into one reconnect of a feed.
GATHER_SECONDS = 0.02
# A node whose pods are asked about in this many namespaces is followed whole: each further namespace would cost a
# reconnect (and a wait for the query that brings it), and by then most of the document is wanted anyway.
WHOLE_DOCUMENT_NAMESPACES = 3
# after an exporter refused a stream (429: its slots are taken), plain documents for this long before a stream again
STREAM_REFUSED_SECONDS = 30.0
# a warm-up (`warm`) is over when every node it opened has answered or failed, or after this many seconds
WARM_UP_SECONDS = 20.0
# A metric's pod figure index, made at its first question, takes the answers at hand this many nodes at a time, the
# event loop free between. Each answer's document is read again for it (NodeAnswer keeps only the bytes): 100 nodes of
# 10 GPU pods took 3.3 ms in-process, 2-4 times that on a loaded replica; all 2,000 at once would be a wait of a
# quarter of a second for every question in flight in a restarted replica's first seconds of serving.
INDEX_FILL_NODES = 25
# A feed served from the pod figure index is marked wanted again (`_want`) once its mark is this old (at most a quarter
# of `keep_warm_seconds`): a 1,000-pod answer then writes to a few feeds a second, not to 800 each time.
WANT_AGAIN_SECONDS = 1.0
FetchObserver = Callable[[str, float], None]  # (outcome "ok" | "error" | "timeout", seconds)


class Miss:
    """No answer can be given without waiting for the node."""


MISS = Miss()


ListedValues = Mapping[str, Mapping[str, ListedValue]]  # a document's figures of one metric: by namespace, by pod name
RereadDocument = Callable[[bytes], ReceivedNodePods]  # a document again from the bytes it came in


class NodeAnswer:
    """One node's `/pods` document, with each pod's value of a metric worked out once per document.

    `wanted` is shared by the answers of one cache: metrics ever asked about, which are worked out as soon as a
    document arrives, so that queries find them ready. Device by device samples (for a metricLabelSelector or an
    object's metric) are worked out on first use only.

    The decoded document is not kept: only the bytes it came in (`source`), read again (`reread`) when a metric not
    worked out yet or device by device samples are asked for (the document is kept from then on). A decoded document
    holds two tuples per pod (its containers, their devices) that the garbage collector tracks from the moment they
    are made; kept, a fleet's current documents filled the collector's young generation with some 100,000 of them
    (documents replacing documents free as many objects as they make, so a young pass came rarely, and then walked
    them all for 50-70 ms, docs/performance.md). Dropped at once, they are freed by reference counting before any pass
    sees them, and what an answer adds to the young generation no longer grows with its pods: itself and a dict.
    """

    __slots__ = (
        "_document",
        "_offset",
        "_reread",
        "_samples",
        "_source",
        "_values",
        "_wanted",
        "interval_seconds",
        "node",
    )

    def __init__(
        self,
        document: ReceivedNodePods,
        source: bytes,
        reread: RereadDocument,
        wanted: dict[str, MetricDefinition] | None = None,
        clock_offset: float = 0.0,
    ) -> None:
        """`source` and `reread`: `reread(source)` is `document` again. `clock_offset`: seconds to add to the
        document's times to place them on the adapter's clock."""
        self.node = document.node
        self.interval_seconds = document.interval_seconds
        self._source = source
        self._reread = reread
        self._document: ReceivedNodePods | None = None  # kept once samples are asked for
        self._offset = clock_offset
        self._values: dict[str, ListedValues] = {}  # by metric name (a definition hashes slowly)
        self._samples: dict[str, dict[PodKey, PodSample]] = {}
        self._wanted = wanted if wanted is not None else {}
        for metric in tuple(self._wanted.values()):
            self._values[metric.name] = listed_values(metric, document.pods, clock_offset)

    def document(self) -> ReceivedNodePods:
        """The document, decoded again unless samples were asked for (then it is kept)."""
        return self._document if self._document is not None else self._reread(self._source)

    def values(self, metric: MetricDefinition) -> ListedValues:
        found = self._values.get(metric.name)
        if found is None:
            self._wanted.setdefault(metric.name, metric)
            found = self._values[metric.name] = listed_values(metric, self.document().pods, self._offset)
        return found

    def samples(self, metric: MetricDefinition) -> Mapping[PodKey, PodSample]:
        found = self._samples.get(metric.name)
        if found is None:
            document = self._document = self.document()
            found = {}
            for pod in document.pods:
                sample = pod_sample(document.node, pod, metric.figure, self._offset)
                if sample is not None:
                    found[(pod.namespace, pod.name)] = sample
            self._samples[metric.name] = found
        return found


IndexKey = tuple[str, str, str]  # (node, namespace, pod): a pod name may stand in two nodes' documents for a while


class IndexedFigures(msgspec.Struct, frozen=True, gc=False):
    """A pod's value of one metric in the newest document of its node, and its uid there: an entry of the pod figure
    index (`NodePodsCache.served_at_hand`). One is made per pod of every document that arrives; like ServedValue it
    is never tracked by the garbage collector (adapter/sources/model.py says why). It takes part in no cycle: nothing
    it refers to refers back to it."""

    value: ServedValue
    uid: str | None
    answer: NodeAnswer  # the document it comes from: served only while that is its node's current answer


Namespaces = frozenset[str] | None  # what a feed carries: these namespaces, or every one (None)


def same_pod(uid: str | None, pod: Pod) -> bool:
    """Whether figures of a pod of this name (`uid` as the exporter knew it) are this pod's, not an earlier one's."""
    return not (uid and pod.uid and uid != pod.uid)


def _covers(carried: Namespaces, namespace: str | None) -> bool:
    if carried is None:
        return True
    return namespace is not None and namespace in carried


@dataclass(slots=True, eq=False)
class _Feed:
    node: str
    url: str
    wanted_at: float
    asked: dict[str, float] = field(default_factory=dict)  # namespace -> when a query last needed it
    everything_asked_at: float = -math.inf  # when a query last needed the whole document
    streamed: Namespaces = frozenset()  # what the connection being made or running carries
    answer: NodeAnswer | None = None
    carried: Namespaces = frozenset()  # what `answer` carries
    error: str | None = None
    failures: int = 0  # in a row
    interval: float = 1.0  # the exporter's, from its latest document
    plain_until: float = -math.inf  # a stream was refused (429): plain documents until then
    task: asyncio.Task[None] | None = None
    reconnect: asyncio.TimerHandle | None = None
    waiters: list[tuple[str | None, asyncio.Future[None]]] = field(default_factory=list)


class _FeedError(Exception):
    def __init__(self, problem: str, outcome: str = "error") -> None:
        super().__init__(problem)
        self.outcome = outcome


class NodePodsCache:
    """The `/pods` documents of the nodes clients asked about, each followed by one feed while it is asked about."""

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
        self._timeout = timeout
        self._headers = headers
        self._ssl = ssl_context
        self._keep_warm = keep_warm_seconds
        self._refresh = refresh
        self._failure_ttl = failure_ttl
        self._max_failure_ttl = max_failure_ttl
        self._max_bytes = max_document_bytes
        self._clock = clock
        self._wall_clock = wall_clock
        self._observe = observe
        self._feeds: dict[str, _Feed] = {}
        self._wanted_metrics: dict[str, MetricDefinition] = {}
        # the pod figure index: by metric name, each pod's value in its node's current answer; and the answer of each
        # node whose values are in it (always its current feed's current answer)
        self._indexes: dict[str, dict[IndexKey, IndexedFigures]] = {}
        self._indexed: dict[str, NodeAnswer] = {}
        self._fills: set[asyncio.Task[None]] = set()  # new indexes being filled from the answers at hand (`_fill`)
        self._want_again = min(WANT_AGAIN_SECONDS, keep_warm_seconds / 4)
        self._session: aiohttp.ClientSession | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        self._connecting = asyncio.Semaphore(MAX_CONNECTING)
        self._warming: dict[str, _Feed] = {}
        self._warm_since: float | None = None
        self.documents = 0  # documents received, all feeds
        self.connections = 0  # requests made to exporters, all feeds

    @property
    def size(self) -> int:
        return len(self._feeds)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=4, ssl=self._ssl or True)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="gpu-pulse-node-feeds-sweeper")

    async def close(self) -> None:
        self._closed = True
        feeds = list(self._feeds.values())
        self._feeds.clear()
        for feed in feeds:
            self._drop(feed)
        self._indexes.clear()
        self._indexed.clear()
        tasks = [t for t in (self._sweeper, *(f.task for f in feeds), *self._fills) if t is not None]
        if self._sweeper is not None:
            self._sweeper.cancel()
        for fill in self._fills:
            fill.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._sweeper = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def cached(self, node: str, url: str, namespace: str | None) -> NodeAnswer | Miss | None:
        """The node's newest document if it carries `namespace` (every namespace for None), None when the node does
        not answer, else MISS (nothing at hand: `answer` waits for it)."""
        return self.cached_many({node: url}, namespace)[node]

    def cached_many(self, urls: Mapping[str, str], namespace: str | None) -> dict[str, NodeAnswer | Miss | None]:
        """`cached` for each node -> exporter URL of `urls` (a 1,000-pod answer asks about some 800 nodes), with one
        reading of the clock."""
        now = self._clock()
        feeds = self._feeds
        found: dict[str, NodeAnswer | Miss | None] = {}
        for node, url in urls.items():
            feed = feeds.get(node)
            if feed is None or feed.url != url:
                found[node] = MISS
                continue
            self._want(feed, namespace, now)
            if feed.error is not None:
                found[node] = None  # its feed asks again after its retry delay, for what is wanted by then
                continue
            if feed.answer is not None and _covers(feed.carried, namespace):
                found[node] = feed.answer
                continue
            if not _covers(feed.streamed, namespace) and feed.reconnect is None:
                feed.reconnect = asyncio.get_running_loop().call_later(GATHER_SECONDS, self._reconnect, feed)
            found[node] = MISS
        return found

    def served_at_hand(
        self,
        metric: MetricDefinition,
        pods: Sequence[Pod],
        namespace: str | None,
        now: float,
        max_age: Callable[[float], float],
    ) -> tuple[list[ServedValue | None], list[int]]:
        """Each pod's value of `metric` in the current document of its node (`pod.node`) when one is at hand that
        carries `namespace` (every namespace for None, as `cached`) and lists the pod, and the value is fresh (no
        older at `now` than `max_age` of the document's interval) and the pod's own (the uid the exporter knew, when
        both know one); else None. And where in `pods` the scheduled pods without one are: whether those have a
        figure at all is for `cached_many` and `answer` to say. Each feed a value comes from stays wanted, as `cached`
        keeps it, its mark renewed once it is `_want_again` seconds old.

        The HPA's question goes through here for every pod it selects (1,000 pods over some 800 nodes): one loop,
        each pod looked up once in the index and its feed once in the feeds."""
        index = self._indexes.get(metric.name)
        if index is None:
            index = self._new_index(metric)
        feeds = self._feeds
        renew_before = self._clock() - self._want_again
        limits: dict[float, float] = {}  # max_age by document interval: a fleet's exporters mostly share one
        served: list[ServedValue | None] = []
        keep = served.append
        rest: list[int] = []
        for i, pod in enumerate(pods):
            node = pod.node
            if not node:
                keep(None)  # not scheduled: no node has figures of it
                continue
            entry = index.get((node, pod.namespace, pod.name))
            if entry is not None:
                feed = feeds.get(node)
                answer = entry.answer
                # the feed's answer is the entry's while the index is kept right (a lost answer's entries go with it);
                # a feed that does not carry the question's namespaces is for `cached_many` to reconnect
                if (
                    feed is not None
                    and feed.answer is answer
                    and feed.error is None
                    and _covers(feed.carried, namespace)
                ):
                    marked = feed.everything_asked_at if namespace is None else feed.asked.get(namespace, -math.inf)
                    if marked < renew_before:
                        self._want(feed, namespace, self._clock())
                    value = entry.value
                    interval = answer.interval_seconds
                    limit = limits.get(interval)
                    if limit is None:
                        limit = limits[interval] = max_age(interval)
                    if now - value.sampled_at <= limit and same_pod(entry.uid, pod):
                        keep(value)
                        continue
            keep(None)
            rest.append(i)
        return served, rest

    def warm(self, urls: Mapping[str, str]) -> None:
        """Follow these nodes (node -> exporter URL) before any question about them: whole documents, as a node asked
        about in WHOLE_DOCUMENT_NAMESPACES namespaces is followed. A replica that starts or restarts in a fleet gets
        every HPA's question within 15 s, and each question about a node not followed yet waits for its first
        document (or, with many such nodes, for the connections being made before it); `warmed` says when the wait is
        over, so that the replica is sent no question before. A node nobody asks about is closed after
        `keep_warm_seconds`, as any feed."""
        if self._closed:
            return
        now = self._clock()
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
        if self._warming and self._clock() - self._warm_since < WARM_UP_SECONDS:
            feeds = self._feeds
            for node, feed in list(self._warming.items()):
                if feeds.get(node) is feed and feed.answer is None and feed.error is None:
                    return False
                del self._warming[node]
        self._warming.clear()
        return True

    def _open(self, node: str, url: str, namespace: str | None, now: float) -> _Feed:
        """A new feed of `node` (replacing one for another URL), following it from now on."""
        old = self._feeds.get(node)
        if old is not None:
            self._drop(old)
        feed = self._feeds[node] = _Feed(node, url, now)
        self._want(feed, namespace, now)
        feed.task = asyncio.create_task(self._follow(feed), name=f"gpu-pulse-node-feed-{node}")
        return feed

    async def answer(self, node: str, url: str, namespace: str | None) -> NodeAnswer | None:
        """The node's document carrying `namespace` (every namespace for None), waited for up to `timeout` seconds
        when none is at hand; None when the exporter does not answer."""
        found = self.cached(node, url, namespace)
        if not isinstance(found, Miss):
            return found
        feed = self._feeds.get(node)
        if self._closed:
            return None
        if feed is None or feed.url != url:  # new, or the exporter moved (new pod IP): the old answer is not its
            feed = self._open(node, url, namespace, self._clock())
        arrived: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (namespace, arrived)
        feed.waiters.append(waiter)
        try:
            async with asyncio.timeout(self._timeout):
                await arrived
        except TimeoutError:
            return None
        finally:
            with contextlib.suppress(ValueError):
                feed.waiters.remove(waiter)
        if feed.answer is not None and _covers(feed.carried, namespace):
            return feed.answer
        return None

    # ---- what is wanted ----------------------------------------------------------------------------------------------
    def _want(self, feed: _Feed, namespace: str | None, now: float) -> None:
        feed.wanted_at = now
        if namespace is None:
            feed.everything_asked_at = now
        else:
            feed.asked[namespace] = now

    def _wanted(self, feed: _Feed) -> Namespaces:
        """What the feed's next connection carries: every namespace a query needed within `keep_warm_seconds` (the
        newest asked at least, should all be older); the whole document once that is WHOLE_DOCUMENT_NAMESPACES."""
        now = self._clock()
        horizon = now - self._keep_warm
        if feed.everything_asked_at >= horizon:
            return None
        recent = {ns: at for ns, at in feed.asked.items() if at >= horizon}
        if not recent and feed.asked:
            newest = max(feed.asked.values())
            recent = {ns: at for ns, at in feed.asked.items() if at == newest}
        feed.asked = recent
        return frozenset(recent) if len(recent) < WHOLE_DOCUMENT_NAMESPACES else None

    def _reconnect(self, feed: _Feed) -> None:
        """Connect again now, carrying what is wanted by now (a query asked about a namespace the feed lacks)."""
        feed.reconnect = None
        if self._closed or self._feeds.get(feed.node) is not feed or feed.error is not None:
            return  # dropped, or failing: its next attempt carries what is wanted then
        if feed.task is not None:
            feed.task.cancel()
        feed.task = asyncio.create_task(self._follow(feed), name=f"gpu-pulse-node-feed-{feed.node}")

    def _drop(self, feed: _Feed) -> None:
        self._unindex(feed)
        if feed.task is not None:
            feed.task.cancel()
        if feed.reconnect is not None:
            feed.reconnect.cancel()
        self._wake(feed, everyone=True)
        if self._feeds.get(feed.node) is feed:
            del self._feeds[feed.node]

    async def _sweep_loop(self) -> None:
        """Close the feeds nobody asked about within `keep_warm_seconds`."""
        while True:
            await asyncio.sleep(max(0.05, min(1.0, self._keep_warm / 4)))
            horizon = self._clock() - self._keep_warm
            for feed in [f for f in self._feeds.values() if f.wanted_at < horizon and not f.waiters]:
                self._drop(feed)

    # ---- following one node ------------------------------------------------------------------------------------------
    async def _follow(self, feed: _Feed) -> None:
        """Connect, read documents until the stream ends, connect again; after a failure, wait first."""
        # a task replaced by a reconnect, or of a closed cache, ends here even if its cancellation got lost (3.11's
        # wait_for can swallow one that arrives as its inner await completes)
        while not self._closed and feed.task is asyncio.current_task():
            carried = feed.streamed = self._wanted(feed)
            started = time.perf_counter()
            try:
                pause = await self._connect(feed, carried, started)
            except _FeedError as failure:
                self._failed(feed, str(failure), failure.outcome, started)
                pause = self._retry_after(feed.failures)
            if pause > 0:
                await asyncio.sleep(pause)

    async def _connect(self, feed: _Feed, carried: Namespaces, started: float) -> float:
        """One request to the exporter: read its stream until it ends (then 0: connect again at once), or its one
        plain document (then the seconds until it is asked again)."""
        session = self._session
        if session is None:
            raise _FeedError("the node cache is not started")
        stream = self._clock() >= feed.plain_until
        params: list[tuple[str, str]] = [("watch", "1"), ("every", f"{self._refresh:g}")] if stream else []
        if carried is not None:
            params.extend(("namespace", namespace) for namespace in sorted(carried))
        headers = dict(self._headers()) if self._headers is not None else None
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout, sock_read=None)
        url = f"{feed.url}/pods"
        self.connections += 1
        try:
            async with self._connecting, asyncio.timeout(self._timeout):  # the timeout runs from this one's turn
                request = session.get(url, params=params, headers=headers, allow_redirects=False, timeout=timeout)
                response = await request  # connected, and the answer's head read
            async with response:
                if stream and response.status == HTTPStatus.TOO_MANY_REQUESTS:
                    feed.plain_until = self._clock() + STREAM_REFUSED_SECONDS
                    log.info(
                        "%s refused a stream (429): plain documents for %g s",
                        url,
                        STREAM_REFUSED_SECONDS,
                        extra=fields(node=feed.node, url=url, reason="stream_refused"),
                    )
                    return 0.0  # a plain request at once
                if response.status != 200:
                    raise _FeedError(f"{url} answered HTTP {response.status}")
                if response.content_type == STREAM_CONTENT_TYPE:
                    await self._read_stream(feed, carried, response, started)
                    return 0.0
                async with asyncio.timeout(self._stall_seconds(feed)):
                    body = await read_bounded(response, self._max_bytes)
                exporter_now = parse_answered_at(response.headers.get(ANSWERED_AT_HEADER))
                if exporter_now is None:
                    exporter_now = _http_date(response.headers.get("Date"))
                document = self._plain_document(feed, url, body)
                self._arrived(feed, document, body, parse_node_pods, exporter_now, carried, started)
                return max(self._refresh, document.interval_seconds)
        except UpstreamAnswerError as exc:
            raise _FeedError(f"{url}: {exc}") from None
        except TimeoutError:
            raise _FeedError(f"{url} did not answer in time", "timeout") from None
        except aiohttp.ClientError as exc:
            raise _FeedError(f"{url}: {exc.__class__.__name__}: {exc}") from None

    async def _read_stream(
        self, feed: _Feed, carried: Namespaces, response: aiohttp.ClientResponse, started: float
    ) -> None:
        url = f"{feed.url}/pods"
        async for line in _lines(response.content, self._max_bytes, lambda: self._stall_seconds(feed)):
            if not _current(feed):
                return
            exporter_now, document = self._stream_event(feed, url, line)
            self._arrived(feed, document, line, _document_of_event, exporter_now, carried, started)
            del document  # freed now, not when the next line arrives (NodeAnswer says why)
            started = math.nan  # only the first document of a connection is timed

    def _checked(self, feed: _Feed, url: str, document: ReceivedNodePods) -> ReceivedNodePods:
        if document.node != feed.node:
            raise _FeedError(f"{url} describes node {document.node!r}, not {feed.node!r}")
        return document

    def _plain_document(self, feed: _Feed, url: str, body: bytes) -> ReceivedNodePods:
        try:
            return self._checked(feed, url, parse_node_pods(body))
        except PodsDocumentError as exc:
            raise _FeedError(f"{url} is {exc}") from None

    def _stream_event(self, feed: _Feed, url: str, line: bytes) -> tuple[float, ReceivedNodePods]:
        try:
            exporter_now, document = parse_stream_event(line)
        except PodsDocumentError as exc:
            raise _FeedError(f"{url} streams {exc}") from None
        return exporter_now, self._checked(feed, url, document)

    def _arrived(
        self,
        feed: _Feed,
        document: ReceivedNodePods,
        source: bytes,
        reread: RereadDocument,
        exporter_now: float | None,
        carried: Namespaces,
        started: float,
    ) -> None:
        if not _current(feed):
            return
        received = self._wall_clock()
        if feed.error is not None:
            log.info("exporter on node %s answers again", feed.node, extra=fields(node=feed.node))
        offset = exporter_clock_offset(document, exporter_now, received)
        feed.answer = NodeAnswer(document, source, reread, self._wanted_metrics, offset)
        feed.carried, feed.error, feed.failures = carried, None, 0
        self._index(feed)
        feed.interval = document.interval_seconds
        self.documents += 1
        if self._observe is not None and not math.isnan(started):
            self._observe("ok", time.perf_counter() - started)
        self._wake(feed)

    def _failed(self, feed: _Feed, problem: str, outcome: str, started: float) -> None:
        if not _current(feed):
            return
        if feed.error is None:
            log.warning(
                "exporter on node %s does not answer: %s",
                feed.node,
                problem,
                extra=fields(node=feed.node, reason=problem),
            )
        self._unindex(feed)
        feed.answer, feed.carried, feed.error = None, frozenset(), problem
        feed.failures += 1
        if self._observe is not None:
            self._observe(outcome, time.perf_counter() - started)
        self._wake(feed, everyone=True)

    # ---- the pod figure index ----------------------------------------------------------------------------------------
    def _new_index(self, metric: MetricDefinition) -> dict[IndexKey, IndexedFigures]:
        """The index of a metric asked about for the first time. It starts empty: from now on each document that
        arrives works the metric's values out and adds its node's (`_index`), and the answers already at hand are added
        INDEX_FILL_NODES at a time by a task of its own (`_fill`), the event loop free between. Until a node's values
        are in, questions about its pods take the node by node way (`served_at_hand` lists them in `rest`), which
        works out the values of just their nodes."""
        self._wanted_metrics.setdefault(metric.name, metric)  # worked out for each document from now on
        index: dict[IndexKey, IndexedFigures] = {}
        self._indexes[metric.name] = index
        if self._indexed:
            task = asyncio.create_task(
                self._fill(metric, index, list(self._indexed.items())), name=f"gpu-pulse-index-{metric.name}"
            )
            self._fills.add(task)
            task.add_done_callback(self._fills.discard)
        return index

    async def _fill(
        self, metric: MetricDefinition, index: dict[IndexKey, IndexedFigures], answers: Sequence[tuple[str, NodeAnswer]]
    ) -> None:
        """Add to a new `index` the values of `answers` (each node's answer when the index was made) that are still
        their node's current answer: one replaced since has added its own values as it arrived, one lost since has
        none to add."""
        for start in range(0, len(answers), INDEX_FILL_NODES):
            if self._indexes.get(metric.name) is not index:
                return  # the cache closed
            for node, answer in answers[start : start + INDEX_FILL_NODES]:
                if self._indexed.get(node) is answer:
                    _add_entries(index, node, answer, answer.values(metric))
            await asyncio.sleep(0)

    def _index(self, feed: _Feed) -> None:
        """Replace the node's entries by those of the feed's new answer: about 25 pods a document, a thousand documents
        a second at fleet size. The feed of a dropped node (its task outlived its cancellation) adds none."""
        answer = feed.answer
        if answer is None or self._feeds.get(feed.node) is not feed:
            return
        node = feed.node
        previous = self._indexed.get(node)
        self._indexed[node] = answer
        for name, index in self._indexes.items():
            metric = self._wanted_metrics[name]
            values = answer.values(metric)
            if previous is not None:
                for namespace, before in previous.values(metric).items():
                    still = values.get(namespace)
                    for pod in before if still is None else before.keys() - still.keys():
                        index.pop((node, namespace, pod), None)
            _add_entries(index, node, answer, values)

    def _unindex(self, feed: _Feed) -> None:
        """Remove the node's entries if they come from the feed's answer (which it is about to lose)."""
        answer = feed.answer
        node = feed.node
        if answer is None or self._indexed.get(node) is not answer:
            return
        del self._indexed[node]
        for name, index in self._indexes.items():
            for namespace, pods in answer.values(self._wanted_metrics[name]).items():
                for pod in pods:
                    index.pop((node, namespace, pod), None)

    def _wake(self, feed: _Feed, *, everyone: bool = False) -> None:
        """Wake the queries waiting for a document carrying their namespace (all of them after a failure)."""
        for namespace, arrived in feed.waiters:
            if not arrived.done() and (everyone or _covers(feed.carried, namespace)):
                arrived.set_result(None)

    def _stall_seconds(self, feed: _Feed) -> float:
        gap = max(self._refresh, feed.interval)
        return max(STALL_SECONDS, STALL_GAPS * gap)

    def _retry_after(self, failures: int) -> float:
        """Seconds until a node that failed `failures` times in a row is asked again: doubling, capped."""
        return min(self._max_failure_ttl, self._failure_ttl * 2.0 ** min(max(failures, 1) - 1, 30))


def _add_entries(index: dict[IndexKey, IndexedFigures], node: str, answer: NodeAnswer, values: ListedValues) -> None:
    """The index's entries of the answer's `values`. A pod already in the index keeps its key: the dict holds on to
    the first tuple made for it, and the one made here is freed at once."""
    for namespace, pods in values.items():
        for pod, figures in pods.items():
            index[(node, namespace, pod)] = IndexedFigures(figures.value, figures.uid, answer)


def _document_of_event(line: bytes) -> ReceivedNodePods:
    """The document of a stream's line (a NodeAnswer's `reread`)."""
    return parse_stream_event(line)[1]


def _current(feed: _Feed) -> bool:
    """Whether the running task is the feed's. A task replaced by a reconnect is cancelled, but a cancellation can be
    lost (3.11's asyncio.wait_for swallows one that arrives just as what it waits for completes): such a task must not
    hand the feed its documents, which carry what was asked before, or its failures."""
    return feed.task is asyncio.current_task()


async def _lines(
    content: aiohttp.StreamReader, max_bytes: int, stall_seconds: Callable[[], float]
) -> AsyncIterator[bytes]:
    """The newest complete line of a stream each time more arrives, each at most `max_bytes` long; UpstreamAnswerError
    past that, TimeoutError when nothing arrives for `stall_seconds()`.

    Lines that a newer one followed before they were read are skipped, unread: each is a whole document, and only the
    newest counts. An adapter that falls behind (a busy moment, a slow core) so catches up at once, with the newest
    figures, instead of working through a backlog of stale ones.
    """
    buffer = bytearray()
    while True:
        async with asyncio.timeout(stall_seconds()):  # not wait_for: no task per read, and no lost cancellation
            chunk = await content.readany()
        if not chunk:
            if buffer.strip():
                raise UpstreamAnswerError("the stream ended in the middle of a line")
            return
        buffer += chunk  # everything that has arrived (readany hands over the whole buffer)
        end = buffer.rfind(b"\n")
        if end >= 0:
            start = buffer.rfind(b"\n", 0, end) + 1  # the newest complete line
            if end - start > max_bytes:
                raise UpstreamAnswerError(f"a line of the stream is larger than {max_bytes} bytes")
            newest = bytes(buffer[start:end])
            del buffer[: end + 1]
            if newest.strip():
                yield newest
        if len(buffer) > max_bytes:
            raise UpstreamAnswerError(f"a line of the stream is larger than {max_bytes} bytes")


def exporter_clock_offset(document: ReceivedNodePods, exporter_now: float | None, received: float) -> float:
    """Seconds to add to the document's times to place them on the adapter's clock (`received`: when the answer
    arrived, on the adapter's wall clock; `exporter_now`: when the exporter answered, on its own clock, from its
    answered-at or `Date` header).

    The exporter's "now" is taken as the later of what it said and the document's `generated_at` (the snapshot's time,
    at most one interval early; no pod in it is sampled later, see exporter.pods_document), so an exporter that says
    nothing of its time is taken to answer at once. A figure sampled `age` seconds before that "now" on the exporter's
    clock was sampled `age` seconds before `received` on ours, whatever the two clocks say: ages are the exporter's
    own, and no time from the exporter's clock reaches an HPA. A document dated in the future only makes its own
    figures look as fresh as it says they are, never fresher than "just now".
    """
    generated = document.generated_at.timestamp()
    return received - (generated if exporter_now is None else max(generated, exporter_now))


def _http_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        parsed: datetime = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed.tzinfo is None:
        return None
    try:
        return parsed.timestamp()
    except (OverflowError, OSError, ValueError):
        return None
