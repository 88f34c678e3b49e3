"""The `direct` source: figures straight from the exporters on the nodes that host the selected pods.

For a query it finds the nodes of the selected pods, takes each node's newest `/pods` document (nodefeeds: followed as
a stream while queries need it; the first query about a node waits for it), and keeps the figures of the selected pods
that may be served (freshness: no older than `max_age`, by default 3 x the exporter's interval + 2 s, and the pod's
own); a node whose exporter does not answer drops its pods.

Once the nodes with exporters are known (the pod cache has synced), every one is followed before any question comes,
and the source is `ready` when each has answered or failed (nodefeeds.NodeFeeds.warm): a replica that restarts in a
fleet is sent questions only once it answers them as its peer does.

The HPA's question (`pod_values`: 1,000 pods over some 800 nodes, every 15 s) looks each pod up in the pod figure
index (nodefeeds.NodeFeeds.served_at_hand). Every other pod (its node not followed yet, failing, carrying too little
of its document, not listing the pod; a stale figure; a uid that differs) goes the node by node way
(`_values_at_nodes`), which opens, reconnects and waits for feeds, and drops the pods of silent nodes.

The index path does not ask the locator whether each node's exporter is still the one its feed follows (a pod cache
lookup per node, docs/decisions/2026-11-28-adapter-hot-path.md). A fresh figure from the feed of a replaced exporter
pod is still a true, fresh figure of that node's GPUs (documents about another node are refused), and the feed does
not outlive its exporter for long: a stopped exporter ends its stream, and the feed's next connection is refused or
times out within `timeout`, which takes its node's figures out of the index; an exporter that goes silent is stalled
within nodefeed.STALL_SECONDS, and its figures are not served once older than `max_age` meanwhile. Pods the index does
not serve meet the locator as before, so the new exporter's feed is opened by the first question that needs it.
tests/adapter/test_direct_source.py holds both to it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence

from adapter.metrics_config import MetricDefinition
from adapter.sources.exporters import ExporterLocator
from adapter.sources.freshness import Freshness, servable
from adapter.sources.metricsource import (
    ListedValue,
    ListedValues,
    PodKey,
    PodSample,
    ServedValue,
    SourceUnavailableError,
)
from adapter.sources.nodeanswer import NodeAnswer
from adapter.sources.nodefeeds import Miss, NodeFeeds
from toolkit.pods import Pod

_NO_FIGURES: tuple[ListedValues, float] = ({}, 0.0)  # for a pod whose node gave no answer
_NO_PODS: Mapping[str, ListedValue] = {}
_NO_ANSWER: tuple[NodeAnswer | None, float] = (None, 0.0)


WARM_UP_POLL_SECONDS = 0.2  # how often the warm-up asks whether the nodes with exporters are known yet


class DirectSource:
    name = "direct"

    def __init__(
        self,
        locator: ExporterLocator,
        feeds: NodeFeeds,
        *,
        max_age: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`max_age`: seconds a figure may be old before it is left out (default: freshness.default_max_age of its
        exporter's interval). `clock`: the wall clock figures are served on."""
        self._locator = locator
        self._feeds = feeds
        self._freshness = Freshness(max_age)
        self._clock = clock
        self._warming: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._feeds.start()
        self._warming = asyncio.create_task(self._warm_up(), name="gpu-pulse-node-feeds-warm-up")

    async def close(self) -> None:
        if self._warming is not None:
            self._warming.cancel()
            await asyncio.gather(self._warming, return_exceptions=True)
        await self._feeds.close()

    def ready(self) -> bool:
        return self._feeds.warmed()

    async def _warm_up(self) -> None:
        """Follow every node known to have an exporter as soon as the nodes are known (the pod cache synced)."""
        while (nodes := self._locator.known_nodes()) is None:
            await asyncio.sleep(WARM_UP_POLL_SECONDS)
        self._feeds.warm(self._locator.base_urls(nodes))

    def serves(self, metric: MetricDefinition) -> bool:
        return True

    async def samples(self, metric: MetricDefinition, pods: Sequence[Pod]) -> Mapping[PodKey, PodSample]:
        at_node = await self._answers(pods, _asked_namespace(pods))
        now = self._clock()
        found: dict[PodKey, PodSample] = {}
        for pod in pods:
            answer, max_age = at_node.get(pod.node or "", _NO_ANSWER)
            if answer is None:
                continue
            sample = answer.samples(metric).get((pod.namespace, pod.name))
            if sample is not None and servable(sample.sampled_at, sample.uid, pod, now, max_age):
                found[(pod.namespace, pod.name)] = sample
        return found

    async def pod_values(self, metric: MetricDefinition, pods: Sequence[Pod]) -> list[ServedValue | None]:
        """From the pod figure index where it serves the pod, else as `_values_at_nodes` (which says so for the pods
        it is asked about exactly as it would have for all of them): see the module's docstring."""
        namespace = _asked_namespace(pods)
        served, rest = self._indexed_values(metric, pods, namespace)
        if rest:
            some_answered = len(rest) < len(served) and any(value is not None for value in served)
            others = await self._values_at_nodes(
                metric, [pods[i] for i in rest], namespace, some_answered=some_answered
            )
            for i, value in zip(rest, others, strict=True):
                served[i] = value
        return served

    def _indexed_values(
        self, metric: MetricDefinition, pods: Sequence[Pod], namespace: str | None
    ) -> tuple[list[ServedValue | None], list[int]]:
        """Each pod's value from the pod figure index when it is there, fresh and the pod's own, else None; and where
        in `pods` the scheduled pods without one are (for `_values_at_nodes`)."""
        return self._feeds.served_at_hand(metric, pods, namespace, self._clock(), self._freshness.max_age)

    async def _values_at_nodes(
        self, metric: MetricDefinition, pods: Sequence[Pod], namespace: str | None, *, some_answered: bool = False
    ) -> list[ServedValue | None]:
        """Each pod's value from its node's answer (`_answers`), node by node."""
        at_node = await self._answers(pods, namespace, some_answered=some_answered)
        now = self._clock()
        values: dict[str, tuple[ListedValues, float]] = {
            node: (answer.values(metric), max_age) for node, (answer, max_age) in at_node.items() if answer is not None
        }
        served: list[ServedValue | None] = []
        keep = served.append
        for pod in pods:
            figures, max_age = values.get(pod.node or "", _NO_FIGURES)
            found = figures.get(pod.namespace, _NO_PODS).get(pod.name)
            if found is None:
                keep(None)
                continue
            value = found.value
            keep(value if servable(value.sampled_at, found.uid, pod, now, max_age) else None)
        return served

    async def _answers(
        self, pods: Sequence[Pod], namespace: str | None, *, some_answered: bool = False
    ) -> dict[str, tuple[NodeAnswer | None, float]]:
        """The document of each node of `pods` carrying `namespace` (every one for None; None for a node whose
        exporter does not answer), with the age past which its figures are not served. SourceUnavailableError when no
        node answers, unless `some_answered` (other nodes of the question did)."""
        nodes = {pod.node for pod in pods if pod.node}
        urls = self._locator.base_urls(nodes)
        if not urls:
            return {}
        answers = self._feeds.cached_many(urls, namespace)  # most queries: every document is at hand
        missing = [node for node, answer in answers.items() if isinstance(answer, Miss)]
        if missing:
            fetched = await asyncio.gather(*(self._feeds.answer(node, urls[node], namespace) for node in missing))
            answers.update(zip(missing, fetched, strict=True))
        if not some_answered and all(answer is None for answer in answers.values()):
            nodes_asked = sorted(urls)
            listed = ", ".join(nodes_asked[:5]) + (", ..." if len(urls) > 5 else "")
            raise SourceUnavailableError(f"no exporter answered for the nodes of the selected pods ({listed})")
        at_node: dict[str, tuple[NodeAnswer | None, float]] = {}
        max_age = self._freshness.max_age
        for node, answer in answers.items():
            if isinstance(answer, NodeAnswer):
                at_node[node] = (answer, max_age(answer.interval_seconds))
        return at_node


def _asked_namespace(pods: Sequence[Pod]) -> str | None:
    """The namespace a question is about when its scheduled pods are all in one, else None (the whole documents)."""
    namespaces = {pod.namespace for pod in pods if pod.node}
    return next(iter(namespaces)) if len(namespaces) == 1 else None
