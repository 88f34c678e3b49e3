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
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence

from adapter.metrics_config import MetricDefinition
from adapter.sources.exporters import ExporterLocator
from adapter.sources.model import PodKey, PodSample, ServedValue, SourceUnavailableError
from adapter.sources.nodepods import Miss, NodeAnswer, NodePodsCache, PodFigures
from toolkit.pods import Pod

_NO_FIGURES: tuple[Mapping[PodKey, PodFigures], float] = ({}, 0.0)  # for a pod whose node gave no answer
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
        at_node = await self._answers(pods)
        now = self._clock()
        found: dict[PodKey, PodSample] = {}
        for pod in pods:
            answer, max_age = at_node.get(pod.node or "", _NO_ANSWER)
            if answer is None:
                continue
            sample = answer.samples(metric).get((pod.namespace, pod.name))
            if sample is not None and now - sample.sampled_at <= max_age and _same_pod(sample.uid, pod):
                found[(pod.namespace, pod.name)] = sample
        return found

    async def pod_values(self, metric: MetricDefinition, pods: Sequence[Pod]) -> list[ServedValue | None]:
        at_node = await self._answers(pods)
        now = self._clock()
        values: dict[str, tuple[Mapping[PodKey, PodFigures], float]] = {
            node: (answer.values(metric), max_age) for node, (answer, max_age) in at_node.items() if answer is not None
        }
        served: list[ServedValue | None] = []
        keep = served.append
        for pod in pods:
            figures, max_age = values.get(pod.node or "", _NO_FIGURES)
            found = figures.get((pod.namespace, pod.name))
            if found is None:
                keep(None)
                continue
            value, uid = found
            keep(value if now - value.sampled_at <= max_age and _same_pod(uid, pod) else None)
        return served

    async def _answers(self, pods: Sequence[Pod]) -> dict[str, tuple[NodeAnswer | None, float]]:
        """The document of each node of `pods` (None for a node whose exporter does not answer), with the age past
        which its figures are not served. SourceUnavailableError when no node answers."""
        nodes = {pod.node for pod in pods if pod.node}
        namespaces = {pod.namespace for pod in pods if pod.node}
        namespace = next(iter(namespaces)) if len(namespaces) == 1 else None
        urls = self._locator.base_urls(nodes)
        if not urls:
            return {}
        answers = self._cache.cached_many(urls, namespace)  # most queries: every document is at hand
        missing = [node for node, answer in answers.items() if isinstance(answer, Miss)]
        if missing:
            fetched = await asyncio.gather(*(self._cache.answer(node, urls[node], namespace) for node in missing))
            answers.update(zip(missing, fetched, strict=True))
        if all(answer is None for answer in answers.values()):
            nodes_asked = sorted(urls)
            listed = ", ".join(nodes_asked[:5]) + (", ..." if len(urls) > 5 else "")
            raise SourceUnavailableError(f"no exporter answered for the nodes of the selected pods ({listed})")
        at_node: dict[str, tuple[NodeAnswer | None, float]] = {}
        fixed_age = self._max_age
        for node, answer in answers.items():
            if isinstance(answer, NodeAnswer):
                max_age = fixed_age if fixed_age is not None else default_max_age(answer.document.interval_seconds)
                at_node[node] = (answer, max_age)
        return at_node


def _same_pod(uid: str | None, pod: Pod) -> bool:
    """Whether figures of a pod of this name (`uid` as the exporter knew it) are this pod's, not an earlier one's."""
    return not (uid and pod.uid and uid != pod.uid)
