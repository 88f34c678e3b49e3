"""Fetching and caching the exporters' `/pods` documents, one entry per (node, namespace).

A document is fetched again after one exporter interval (the document's own `interval_seconds`). Entries that clients
asked for recently are kept warm: a background task fetches them again as they expire, spread over the interval, so
an HPA query every 15 s finds fresh documents instead of waiting on dozens of nodes. Until its successor arrives, a
document up to two intervals old still answers (the figures inside face the source's max-age check all the same).
Entries nobody asked for within `keep_warm_seconds` are dropped. A node that does not answer (refused, timeout, bad
document) has no document until it answers again: its pods drop out.
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
from typing import NamedTuple

import aiohttp

from adapter.metrics_config import MetricDefinition
from adapter.sources.figures import pod_sample
from adapter.sources.model import PodKey, PodSample, ServedValue
from adapter.sources.values import pod_value
from exporter.pods_document import NodePods, PodsDocumentError, parse_node_pods

log = logging.getLogger(__name__)

MAX_DOCUMENT_BYTES = 32 * 1024 * 1024
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

    __slots__ = ("_figures", "_wanted", "document")

    def __init__(self, document: NodePods, wanted: set[MetricDefinition] | None = None) -> None:
        self.document = document
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
                sample = pod_sample(self.document.node, pod, metric.figure)
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
        max_parallel: int = 64,
        clock: Callable[[], float] = time.monotonic,
        observe: FetchObserver | None = None,
    ) -> None:
        self._timeout = timeout
        self._headers = headers
        self._ssl = ssl_context
        self._keep_warm = keep_warm_seconds
        self._failure_ttl = failure_ttl
        self._max_parallel = max_parallel
        self._clock = clock
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
            entry.ttl = answer.document.interval_seconds if answer is not None else self._failure_ttl
            if self._observe is not None:
                self._observe(outcome, seconds)
        finally:
            entry.task = None

    async def _fetch(self, entry: _Entry) -> tuple[NodeAnswer | None, str | None, str, float]:
        session = self._session
        if session is None:
            return None, "the node cache is not started", "error", 0.0
        params = {"namespace": entry.namespace} if entry.namespace is not None else None
        headers = dict(self._headers()) if self._headers is not None else None
        started = time.perf_counter()
        try:
            async with session.get(f"{entry.url}/pods", params=params, headers=headers) as response:
                if response.status != 200:
                    return None, f"{entry.url}/pods answered HTTP {response.status}", "error", _since(started)
                if (response.content_length or 0) > MAX_DOCUMENT_BYTES:
                    return None, f"{entry.url}/pods document is larger than {MAX_DOCUMENT_BYTES} bytes", "error", 0.0
                body = await response.read()
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
        seconds = _since(started)
        return NodeAnswer(document, self._wanted_metrics), None, "ok", seconds

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


def _since(started: float) -> float:
    return time.perf_counter() - started
