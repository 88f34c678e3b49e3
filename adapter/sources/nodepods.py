"""Fetching and caching the exporters' `/pods` documents, one entry per (node, namespace).

A document is fetched again after one exporter interval (the document's own `interval_seconds`). Entries that clients
asked for recently are kept warm: a background task fetches them again as they expire, spread over the interval, so
an HPA query every 15 s finds fresh documents instead of waiting on dozens of nodes. Until its successor arrives, a
document up to two intervals old still answers (the figures inside face the source's max-age check all the same).
Entries nobody asked for within `keep_warm_seconds` are dropped. A node that does not answer (refused, timeout, bad
document) has no document until it answers again: its pods drop out, and it is asked again after a delay that doubles
with each failure in a row (`failure_ttl` up to `max_failure_ttl`), so neither queries nor the keep-warm loop hammer it.

An exporter's answer is not trusted: redirects are not followed, the body is read up to `max_document_bytes` (chunked
or not, see responses), and the document is validated number by number (exporter.pods_document). Times in the
document are the exporter's; each answer's figures are placed on the adapter's clock by the exporter's own idea of
"now" when it answered (exporter.pods_document.ANSWERED_AT_HEADER), so that a node whose clock is off by minutes has
neither its pods dropped nor stale figures kept (see `exporter_clock_offset`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import NamedTuple

import aiohttp

from adapter.metrics_config import MetricDefinition
from adapter.sources.figures import pod_sample
from adapter.sources.model import PodKey, PodSample, ServedValue
from adapter.sources.responses import UpstreamAnswerError, read_bounded
from adapter.sources.values import pod_value
from exporter.pods_document import ANSWERED_AT_HEADER, NodePods, PodsDocumentError, parse_answered_at, parse_node_pods

log = logging.getLogger(__name__)

# A node's whole /pods document is about 0.7 KB per pod and device: 300 GPU pods on a node are about 0.2 MB. 4 MiB is
# over ten times that, and bounds what a hostile node can make the adapter hold: max_parallel x this.
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
FetchObserver = Callable[[str, float], None]  # (outcome "ok" | "error" | "timeout", seconds)


class Miss:
    """No answer can be given without fetching."""


MISS = Miss()


class PodFigures(NamedTuple):
    """A pod's figures of one metric in one document, worked out when the document arrives."""

    sample: PodSample  # device by device
    value: ServedValue  # over all its devices: `pod_value`


class NodeAnswer:
    """One node's `/pods` document, with each pod's figures of a metric worked out once per document.

    `wanted` is shared by the answers of one cache: metrics ever asked about, which the refresher works out as soon as
    a document arrives, so that queries find them ready.
    """

    __slots__ = ("_figures", "_offset", "_wanted", "document")

    def __init__(
        self, document: NodePods, wanted: set[MetricDefinition] | None = None, clock_offset: float = 0.0
    ) -> None:
        """`clock_offset`: seconds to add to the document's times to place them on the adapter's clock."""
        self.document = document
        self._offset = clock_offset
        self._figures: dict[MetricDefinition, dict[PodKey, PodFigures]] = {}
        self._wanted = wanted if wanted is not None else set()
        for metric in tuple(self._wanted):
            self.figures(metric)

    def figures(self, metric: MetricDefinition) -> Mapping[PodKey, PodFigures]:
        found = self._figures.get(metric)
        if found is None:
            self._wanted.add(metric)
            found = {}
            for pod in self.document.pods:
                sample = pod_sample(self.document.node, pod, metric.figure, self._offset)
                if sample is not None:
                    found[(pod.namespace, pod.name)] = PodFigures(sample, pod_value(metric, sample))
            self._figures[metric] = found
        return found


@dataclass(slots=True)
class _Entry:
    node: str
    namespace: str | None
    url: str
    wanted_at: float
    answer: NodeAnswer | None = None
    error: str | None = None
    fetched_at: float = -math.inf
    ttl: float = 0.0
    failures: int = 0  # in a row
    task: asyncio.Task[None] | None = None


class NodePodsCache:
    """The `/pods` documents of the nodes clients asked about, fetched in parallel and kept for one interval."""

    def __init__(
        self,
        *,
        timeout: float = 1.0,
        headers: Callable[[], Mapping[str, str]] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        keep_warm_seconds: float = 120.0,
        failure_ttl: float = 1.0,
        max_failure_ttl: float = 30.0,
        max_parallel: int = 64,
        max_document_bytes: int = MAX_DOCUMENT_BYTES,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        observe: FetchObserver | None = None,
    ) -> None:
        self._timeout = timeout
        self._headers = headers
        self._ssl = ssl_context
        self._keep_warm = keep_warm_seconds
        self._failure_ttl = failure_ttl
        self._max_failure_ttl = max_failure_ttl
        self._max_parallel = max_parallel
        self._max_bytes = max_document_bytes
        self._clock = clock
        self._wall_clock = wall_clock
        self._observe = observe
        self._entries: dict[tuple[str, str | None], _Entry] = {}
        self._wanted_metrics: set[MetricDefinition] = set()
        self._session: aiohttp.ClientSession | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._slots: asyncio.Semaphore | None = None

    @property
    def size(self) -> int:
        return len(self._entries)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=self._max_parallel * 2, limit_per_host=4, ssl=self._ssl or True)
        self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=self._timeout))
        self._slots = asyncio.Semaphore(self._max_parallel)
        self._refresher = asyncio.create_task(self._keep_warm_loop(), name="gpu-pulse-node-pods-refresher")

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None
        tasks = [e.task for e in self._entries.values() if e.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    def cached(self, node: str, url: str, namespace: str | None) -> NodeAnswer | Miss | None:
        """The answer if it can be given without waiting, else MISS.

        A document (or a failure) younger than one interval is the answer. One younger than two intervals is too,
        while a fresh one is fetched in the background: the refresher keeps asked-for entries at most one interval
        late, and the figures inside still face the source's max-age check.
        """
        entry = self._entries.get((node, namespace))
        if entry is None or entry.url != url:
            return MISS
        now = self._clock()
        entry.wanted_at = now
        age = now - entry.fetched_at
        if age >= 2 * entry.ttl:
            return MISS
        if age >= entry.ttl and entry.task is None:
            entry.task = asyncio.create_task(self._refresh(entry))
        return entry.answer

    async def answer(self, node: str, url: str, namespace: str | None) -> NodeAnswer | None:
        """The node's document (filtered to `namespace` when given), fetched now if none recent enough is cached;
        None when the exporter does not answer."""
        found = self.cached(node, url, namespace)
        if not isinstance(found, Miss):
            return found
        now = self._clock()
        key = (node, namespace)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(node, namespace, url, now)
        entry.wanted_at = now
        if entry.url != url:  # the exporter moved (new pod IP): the old answer is not this exporter's
            entry.url, entry.fetched_at, entry.answer = url, -math.inf, None
        if entry.task is None:
            entry.task = asyncio.create_task(self._refresh(entry))
        await asyncio.shield(entry.task)
        return entry.answer

    async def _refresh(self, entry: _Entry) -> None:
        assert self._slots is not None
        try:
            async with self._slots:
                answer, error, outcome, seconds = await self._fetch(entry)
            if answer is not None and entry.error is not None:
                log.info("exporter on node %s answers again", entry.node)
            elif error is not None and entry.error is None:
                log.warning("exporter on node %s does not answer: %s", entry.node, error)
            entry.answer, entry.error = answer, error
            entry.fetched_at = self._clock()
            entry.failures = 0 if answer is not None else entry.failures + 1
            entry.ttl = answer.document.interval_seconds if answer is not None else self._retry_after(entry.failures)
            if self._observe is not None:
                self._observe(outcome, seconds)
        finally:
            entry.task = None

    def _retry_after(self, failures: int) -> float:
        """Seconds until a node that failed `failures` times in a row is asked again: doubling, capped."""
        return min(self._max_failure_ttl, self._failure_ttl * 2.0 ** min(failures - 1, 30))

    async def _fetch(self, entry: _Entry) -> tuple[NodeAnswer | None, str | None, str, float]:
        session = self._session
        if session is None:
            return None, "the node cache is not started", "error", 0.0
        params = {"namespace": entry.namespace} if entry.namespace is not None else None
        headers = dict(self._headers()) if self._headers is not None else None
        started = time.perf_counter()
        try:
            async with session.get(
                f"{entry.url}/pods", params=params, headers=headers, allow_redirects=False
            ) as response:
                if response.status != 200:
                    return None, f"{entry.url}/pods answered HTTP {response.status}", "error", _since(started)
                body = await read_bounded(response, self._max_bytes)
                exporter_now = parse_answered_at(response.headers.get(ANSWERED_AT_HEADER))
                if exporter_now is None:
                    exporter_now = _http_date(response.headers.get("Date"))
            received = self._wall_clock()
        except UpstreamAnswerError as exc:
            return None, f"{entry.url}/pods: {exc}", "error", _since(started)
        except TimeoutError:
            return None, f"{entry.url}/pods did not answer within {self._timeout:g} s", "timeout", _since(started)
        except aiohttp.ClientError as exc:
            return None, f"{entry.url}/pods: {exc.__class__.__name__}: {exc}", "error", _since(started)
        try:
            document = parse_node_pods(body)
        except PodsDocumentError as exc:
            return None, f"{entry.url}/pods is {exc}", "error", 0.0
        if document.node != entry.node:
            problem = f"{entry.url}/pods describes node {document.node!r}, not {entry.node!r}"
            return None, problem, "error", _since(started)
        offset = exporter_clock_offset(document, exporter_now, received)
        seconds = _since(started)
        return NodeAnswer(document, self._wanted_metrics, offset), None, "ok", seconds

    async def _keep_warm_loop(self) -> None:
        """Refresh the entries that are one interval old, oldest first, spread evenly over the interval: with N
        entries, one every interval/N. Started together, the fetches would make one burst each interval that queries
        wait behind; spread, each query finds at most one fetch's work in its way."""
        while True:
            count = len(self._entries)
            shortest = min((e.ttl for e in self._entries.values() if e.ttl > 0), default=1.0)
            tick = min(0.1, max(0.005, shortest / max(count, 1)))
            await asyncio.sleep(tick)
            now = self._clock()
            due: list[_Entry] = []
            for key, entry in list(self._entries.items()):
                if now - entry.wanted_at > self._keep_warm:
                    if entry.task is None:
                        del self._entries[key]
                    continue
                if entry.task is None and now - entry.fetched_at >= entry.ttl:
                    due.append(entry)
            if not due:
                continue
            budget = max(1, math.ceil(count * tick / max(shortest, tick)))
            due.sort(key=lambda e: e.fetched_at)
            for entry in due[:budget]:
                entry.task = asyncio.create_task(self._refresh(entry))


def exporter_clock_offset(document: NodePods, exporter_now: float | None, received: float) -> float:
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


def _since(started: float) -> float:
    return time.perf_counter() - started
