"""One node's feed: the connection that keeps a node's newest `/pods` document coming from its exporter.

A feed holds one long-lived `/pods?watch=1` stream, which sends a document for each snapshot the exporter publishes (at
most one per `refresh` seconds), filtered to the namespaces queries asked about within `keep_warm_seconds`
(toolkit.pods_contract, "the stream"); asked about in WHOLE_DOCUMENT_NAMESPACES namespaces, it carries the whole
document. An exporter that answers a plain document instead (one without streams, or one that refuses the stream with
429: every stream slot taken, exporter/server.py) is asked again each `refresh` seconds (at least its interval), and a
refused stream is tried again after STREAM_REFUSED_SECONDS. A node that does not answer (refused, timeout, HTTP error,
bad document, stalled stream) is asked again after a delay that doubles with each failure in a row.

An exporter's answer is not trusted: redirects are not followed, a document (or a stream's line) is read up to
`max_document_bytes`, each document is validated number by number (toolkit.pods_contract) and must describe the
feed's node. The feed hands each document, or its failure, to the feeds it is one of (nodefeeds.NodeFeeds).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from http import HTTPStatus

import aiohttp

from adapter.sources.nodeanswer import Namespaces, NodeAnswer, RereadDocument
from toolkit.logs import fields
from toolkit.pods_contract import (
    ANSWERED_AT_HEADER,
    STREAM_CONTENT_TYPE,
    NodePods,
    PodsDocumentError,
    parse_answered_at,
    parse_node_pods,
    parse_stream_event,
)
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
# A node whose pods are asked about in this many namespaces is followed whole: each further namespace would cost a
# reconnect (and a wait for the query that brings it), and by then most of the document is wanted anyway.
WHOLE_DOCUMENT_NAMESPACES = 3
# after an exporter refused a stream (429: its slots are taken), plain documents for this long before a stream again
STREAM_REFUSED_SECONDS = 30.0


class FeedError(Exception):
    """A node did not answer as it should; `outcome` is "error" or "timeout" (the source-call self-metric's label)."""

    def __init__(self, problem: str, outcome: str = "error") -> None:
        super().__init__(problem)
        self.outcome = outcome


@dataclass(frozen=True, slots=True)
class FeedSettings:
    """How feeds connect and retry. `timeout`: seconds to connect. `refresh`: the least number of seconds between two
    documents of a node (0: each snapshot the exporter publishes)."""

    timeout: float = 1.0
    refresh: float = 0.0
    keep_warm_seconds: float = 120.0
    failure_ttl: float = 1.0
    max_failure_ttl: float = 30.0
    max_document_bytes: int = MAX_DOCUMENT_BYTES
    headers: Callable[[], Mapping[str, str]] | None = None

    def retry_after(self, failures: int) -> float:
        """Seconds until a node that failed `failures` times in a row is asked again: doubling, capped."""
        return min(self.max_failure_ttl, self.failure_ttl * 2.0 ** min(max(failures, 1) - 1, 30))


@dataclass(slots=True, eq=False)
class ExporterClient:
    """What the feeds of one NodeFeeds share to reach exporters: the HTTP session (once started), the cap on
    connections being made, the settings, the monotonic clock, and the count of requests made."""

    settings: FeedSettings
    clock: Callable[[], float]
    session: aiohttp.ClientSession | None = None
    connecting: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_CONNECTING))
    connections: int = 0  # requests made to exporters, all feeds
    closed: bool = False


# (feed, document, the bytes it came in, how to read them again, the exporter's "now", what it carries, when the
# connection began (perf_counter; NaN: not timed))
DocumentHandler = Callable[["NodeFeed", NodePods, bytes, RereadDocument, "float | None", Namespaces, float], None]
FailureHandler = Callable[["NodeFeed", str, str, float], None]  # (feed, problem, outcome, when the attempt began)


@dataclass(slots=True, eq=False)
class NodeFeed:
    """One node followed: what queries asked of it, its current answer or failure, and the task that follows it."""

    node: str
    url: str
    client: ExporterClient
    on_document: DocumentHandler
    on_failure: FailureHandler
    wanted_at: float  # when a query last needed it (monotonic)
    asked: dict[str, float] = field(default_factory=dict)  # namespace -> when a query last needed it
    everything_asked_at: float = -math.inf  # when a query last needed the whole document
    streamed: Namespaces = frozenset()  # what the connection being made or running carries
    answer: NodeAnswer | None = None
    error: str | None = None
    failures: int = 0  # in a row
    interval: float = 1.0  # the exporter's, from its latest document
    plain_until: float = -math.inf  # a stream was refused (429): plain documents until then
    task: asyncio.Task[None] | None = None
    reconnect: asyncio.TimerHandle | None = None
    waiters: list[tuple[str | None, asyncio.Future[None]]] = field(default_factory=list)

    # ---- what is wanted ----------------------------------------------------------------------------------------------
    def want(self, namespace: str | None, now: float) -> None:
        """A query needs `namespace` (None: the whole document) at `now` (monotonic)."""
        self.wanted_at = now
        if namespace is None:
            self.everything_asked_at = now
        else:
            self.asked[namespace] = now

    def wanted_since(self, namespace: str | None) -> float:
        """When a query last needed `namespace` (None: the whole document)."""
        return self.everything_asked_at if namespace is None else self.asked.get(namespace, -math.inf)

    def wanted(self) -> Namespaces:
        """What the next connection carries: every namespace a query needed within `keep_warm_seconds` (the newest
        asked at least, should all be older); the whole document once that is WHOLE_DOCUMENT_NAMESPACES."""
        horizon = self.client.clock() - self.client.settings.keep_warm_seconds
        if self.everything_asked_at >= horizon:
            return None
        recent = {ns: at for ns, at in self.asked.items() if at >= horizon}
        if not recent and self.asked:
            newest = max(self.asked.values())
            recent = {ns: at for ns, at in self.asked.items() if at == newest}
        self.asked = recent
        return frozenset(recent) if len(recent) < WHOLE_DOCUMENT_NAMESPACES else None

    # ---- what arrives ------------------------------------------------------------------------------------------------
    def current(self) -> bool:
        """Whether the running task is the feed's. A task replaced by a reconnect is cancelled, but a cancellation can
        be lost (3.11's asyncio.wait_for swallows one that arrives just as what it waits for completes): such a task
        must not hand the feed its documents, which carry what was asked before, or its failures."""
        return self.task is asyncio.current_task()

    def arrived(
        self,
        document: NodePods,
        source: bytes,
        reread: RereadDocument,
        exporter_now: float | None,
        carried: Namespaces,
        started: float,
    ) -> None:
        if self.current():
            self.on_document(self, document, source, reread, exporter_now, carried, started)

    def took(self, answer: NodeAnswer) -> None:
        """The node answered: `answer` is its current one."""
        if self.error is not None:
            log.info("exporter on node %s answers again", self.node, extra=fields(node=self.node))
        self.answer, self.error, self.failures = answer, None, 0
        self.interval = answer.interval_seconds

    def lost(self, problem: str) -> None:
        """The node did not answer: it has no answer until it does again."""
        if self.error is None:
            log.warning(
                "exporter on node %s does not answer: %s",
                self.node,
                problem,
                extra=fields(node=self.node, reason=problem),
            )
        self.answer, self.error = None, problem
        self.failures += 1

    # ---- following the node ------------------------------------------------------------------------------------------
    async def follow(self) -> None:
        """Connect, read documents until the stream ends, connect again; after a failure, wait first."""
        client = self.client
        # a task replaced by a reconnect, or of a closed cache, ends here even if its cancellation got lost (3.11's
        # wait_for can swallow one that arrives as its inner await completes)
        while not client.closed and self.current():
            carried = self.streamed = self.wanted()
            started = time.perf_counter()
            try:
                pause = await self.connect(carried, started)
            except FeedError as failure:
                if self.current():
                    self.on_failure(self, str(failure), failure.outcome, started)
                pause = client.settings.retry_after(self.failures)
            if pause > 0:
                await asyncio.sleep(pause)

    def stall_seconds(self) -> float:
        gap = max(self.client.settings.refresh, self.interval)
        return max(STALL_SECONDS, STALL_GAPS * gap)

    async def connect(self, carried: Namespaces, started: float) -> float:
        """One request to the exporter: read its stream until it ends (then 0: connect again at once), or its one
        plain document (then the seconds until it is asked again)."""
        client = self.client
        settings = client.settings
        session = client.session
        if session is None:
            raise FeedError("the node feeds are not started")
        stream = client.clock() >= self.plain_until
        params: list[tuple[str, str]] = [("watch", "1"), ("every", f"{settings.refresh:g}")] if stream else []
        if carried is not None:
            params.extend(("namespace", namespace) for namespace in sorted(carried))
        headers = dict(settings.headers()) if settings.headers is not None else None
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=settings.timeout, sock_read=None)
        url = f"{self.url}/pods"
        client.connections += 1
        try:
            async with client.connecting, asyncio.timeout(settings.timeout):  # the timeout runs from this one's turn
                request = session.get(url, params=params, headers=headers, allow_redirects=False, timeout=timeout)
                response = await request  # connected, and the answer's head read
            async with response:
                if stream and response.status == HTTPStatus.TOO_MANY_REQUESTS:
                    self.plain_until = client.clock() + STREAM_REFUSED_SECONDS
                    log.info(
                        "%s refused a stream (429): plain documents for %g s",
                        url,
                        STREAM_REFUSED_SECONDS,
                        extra=fields(node=self.node, url=url, reason="stream_refused"),
                    )
                    return 0.0  # a plain request at once
                if response.status != 200:
                    raise FeedError(f"{url} answered HTTP {response.status}")
                if response.content_type == STREAM_CONTENT_TYPE:
                    await self._read_stream(carried, response, started)
                    return 0.0
                async with asyncio.timeout(self.stall_seconds()):
                    body = await read_bounded(response, settings.max_document_bytes)
                exporter_now = parse_answered_at(response.headers.get(ANSWERED_AT_HEADER))
                if exporter_now is None:
                    exporter_now = _http_date(response.headers.get("Date"))
                document = self._plain_document(url, body)
                self.arrived(document, body, parse_node_pods, exporter_now, carried, started)
                return max(settings.refresh, document.interval_seconds)
        except UpstreamAnswerError as exc:
            raise FeedError(f"{url}: {exc}") from None
        except TimeoutError:
            raise FeedError(f"{url} did not answer in time", "timeout") from None
        except aiohttp.ClientError as exc:
            raise FeedError(f"{url}: {exc.__class__.__name__}: {exc}") from None

    async def _read_stream(self, carried: Namespaces, response: aiohttp.ClientResponse, started: float) -> None:
        url = f"{self.url}/pods"
        lines = _lines(response.content, self.client.settings.max_document_bytes, self.stall_seconds)
        async for line in lines:
            if not self.current():
                return
            exporter_now, document = self._stream_event(url, line)
            self.arrived(document, line, _document_of_event, exporter_now, carried, started)
            del document  # freed now, not when the next line arrives (nodeanswer says why)
            started = math.nan  # only the first document of a connection is timed

    def _checked(self, url: str, document: NodePods) -> NodePods:
        if document.node != self.node:
            raise FeedError(f"{url} describes node {document.node!r}, not {self.node!r}")
        return document

    def _plain_document(self, url: str, body: bytes) -> NodePods:
        try:
            return self._checked(url, parse_node_pods(body))
        except PodsDocumentError as exc:
            raise FeedError(f"{url} is {exc}") from None

    def _stream_event(self, url: str, line: bytes) -> tuple[float, NodePods]:
        try:
            exporter_now, document = parse_stream_event(line)
        except PodsDocumentError as exc:
            raise FeedError(f"{url} streams {exc}") from None
        return exporter_now, self._checked(url, document)


def _document_of_event(line: bytes) -> NodePods:
    """The document of a stream's line (a NodeAnswer's `reread`)."""
    return parse_stream_event(line)[1]


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
