"""The `direct` source: figures straight from the exporters on the nodes that host the selected pods.

For a query it finds the nodes of the selected pods, takes each node's newest `/pods` document (followed as a stream
while queries need it, see nodepods; the first query about a node waits for it), and keeps the figures of the selected
pods that are fresh:
a figure older than `max_age` (default 3 x the exporter's interval + 2 s, measured from the pod figures' sample time)
is left out rather than served stale, and a node whose exporter does not answer drops its pods.

Once the nodes with exporters are known (the pod cache has synced), every one is followed before any question comes,
and the source is `ready` when each has answered or failed (nodepods.NodePodsCache.warm): a replica that restarts in a
fleet is sent questions only once it answers them as its peer does, not with every pod whose node it does not follow
yet left out, or after a wait for hundreds of first documents.

The HPA's question (`pod_values`: 1,000 pods over some 800 nodes, every 15 s) looks each pod up in the pod figure
index (nodepods.NodePodsCache.served_at_hand) and serves what it finds there fresh and of the same uid. Every other
pod (its node not followed yet, failing, carrying too little of its document, not listing the pod; a stale figure; a
uid that differs) goes the node by node way as before (`_values_at_nodes`), which opens, reconnects and waits for
feeds, and drops the pods of silent nodes, as it did for every pod. A pod served from the index costs no work per
node, which at fleet size was most of the answer's time: touching 800 feeds, answers and value maps.

The index path does not ask the locator whether each node's exporter is still the one its feed follows (`base_urls`:
a pod cache lookup per node, under the cache's lock, a large part of that per-node work). A fresh figure from the feed
of a replaced exporter pod is still a true, fresh figure of that node's GPUs (documents about another node are refused,
nodepods.NodePodsCache._checked), and the feed does not outlive its exporter for long: a stopped exporter ends its
stream, and the feed's next connection is refused or times out within `timeout`, which takes its node's figures out
of the index; an exporter that goes silent is stalled within nodepods.STALL_SECONDS, and its figures are not served
once older than `max_age` meanwhile. Pods the index does not serve meet the locator as before, so the new exporter's
feed is opened by the first question that needs it. tests/adapter/test_direct_source.py holds both to it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence

from adapter.metrics_config import MetricDefinition
from adapter.sources.exporters import ExporterLocator
from adapter.sources.metricsource import ListedValue, PodKey, PodSample, ServedValue, SourceUnavailableError
from adapter.sources.nodepods import ListedValues, Miss, NodeAnswer, NodePodsCache, same_pod
from toolkit.pods import Pod

_NO_FIGURES: tuple[ListedValues, float] = ({}, 0.0)  # for a pod whose node gave no answer
_NO_PODS: Mapping[str, ListedValue] = {}
_NO_ANSWER: tuple[NodeAnswer | None, float] = (None, 0.0)


WARM_UP_POLL_SECONDS = 0.2  # how often the warm-up asks whether the nodes with exporters are known yet


def default_max_age(interval_seconds: float) -> float:
    """How old a figure may be before it is left out: three exporter intervals and two seconds."""
    return 3 * interval_seconds + 2.0


class DirectSource:
    name = "direct"

    def __init__(
        self,
        locator: ExporterLocator,
        cache: NodePodsCache,
        *,
        max_age: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._locator = locator
        self._cache = cache
        self._max_age = max_age
        self._clock = clock
        self._warming: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._cache.start()
        self._warming = asyncio.create_task(self._warm_up(), name="gpu-pulse-node-feeds-warm-up")

    async def close(self) -> None:
        if self._warming is not None:
            self._warming.cancel()
            await asyncio.gather(self._warming, return_exceptions=True)
        await self._cache.close()

    def ready(self) -> bool:
        return self._cache.warmed()

    async def _warm_up(self) -> None:
        """Follow every node known to have an exporter as soon as the nodes are known (the pod cache synced)."""
        while (nodes := self._locator.known_nodes()) is None:
            await asyncio.sleep(WARM_UP_POLL_SECONDS)
        self._cache.warm(self._locator.base_urls(nodes))

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
            if sample is not None and now - sample.sampled_at <= max_age and same_pod(sample.uid, pod):
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
        fixed_age = self._max_age
        max_age = default_max_age if fixed_age is None else (lambda _interval: fixed_age)
        return self._cache.served_at_hand(metric, pods, namespace, self._clock(), max_age)

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
            keep(value if now - value.sampled_at <= max_age and same_pod(found.uid, pod) else None)
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
        answers = self._cache.cached_many(urls, namespace)  # most queries: every document is at hand
        missing = [node for node, answer in answers.items() if isinstance(answer, Miss)]
        if missing:
            fetched = await asyncio.gather(*(self._cache.answer(node, urls[node], namespace) for node in missing))
            answers.update(zip(missing, fetched, strict=True))
        if not some_answered and all(answer is None for answer in answers.values()):
            nodes_asked = sorted(urls)
            listed = ", ".join(nodes_asked[:5]) + (", ..." if len(urls) > 5 else "")
            raise SourceUnavailableError(f"no exporter answered for the nodes of the selected pods ({listed})")
        at_node: dict[str, tuple[NodeAnswer | None, float]] = {}
        fixed_age = self._max_age
        for node, answer in answers.items():
            if isinstance(answer, NodeAnswer):
                max_age = fixed_age if fixed_age is not None else default_max_age(answer.interval_seconds)
                at_node[node] = (answer, max_age)
        return at_node


def _asked_namespace(pods: Sequence[Pod]) -> str | None:
    """The namespace a question is about when its scheduled pods are all in one, else None (the whole documents)."""
    namespaces = {pod.namespace for pod in pods if pod.node}
    return next(iter(namespaces)) if len(namespaces) == 1 else None
