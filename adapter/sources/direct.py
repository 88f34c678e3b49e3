"""The `direct` source: figures straight from the exporters on the nodes that host the selected pods.

For a query it finds the nodes of the selected pods, asks each node's exporter for its `/pods` document (in parallel,
cached for one exporter interval, see nodepods), and keeps the figures of the selected pods that are fresh:
a figure older than `max_age` (default 3 x the exporter's interval + 2 s, measured from the pod figures' sample time)
is left out rather than served stale, and a node whose exporter does not answer drops its pods.
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

    async def start(self) -> None:
        await self._cache.start()

    async def close(self) -> None:
        await self._cache.close()

    def serves(self, metric: MetricDefinition) -> bool:
        return True

    async def samples(self, metric: MetricDefinition, pods: Sequence[Pod]) -> Mapping[PodKey, PodSample]:
        fresh = await self._fresh(metric, pods)
        return {(p.namespace, p.name): found.sample for p, found in zip(pods, fresh, strict=True) if found is not None}

    async def pod_values(self, metric: MetricDefinition, pods: Sequence[Pod]) -> list[ServedValue | None]:
        return [found.value if found is not None else None for found in await self._fresh(metric, pods)]

    async def _fresh(self, metric: MetricDefinition, pods: Sequence[Pod]) -> list[PodFigures | None]:
        """Each pod's figures of `metric` (None for a pod whose exporter does not answer or whose figures are not
        fresh), in the order of `pods`."""
        nodes = dict.fromkeys(pod.node for pod in pods if pod.node)
        namespaces = {pod.namespace for pod in pods if pod.node}
        namespace = next(iter(namespaces)) if len(namespaces) == 1 else None
        asked: list[tuple[str, str]] = []
        answers: list[NodeAnswer | None] = []
        missing: list[int] = []
        for node in nodes:
            url = self._locator.base_url(node)
            if url is None:
                continue
            at_hand = self._cache.cached(node, url, namespace)  # most queries: every document is at hand
            if isinstance(at_hand, Miss):
                missing.append(len(asked))
                at_hand = None
            asked.append((node, url))
            answers.append(at_hand)
        if not asked:
            return [None] * len(pods)
        if missing:
            fetched = await asyncio.gather(*(self._cache.answer(*asked[i], namespace) for i in missing))
            for i, answer in zip(missing, fetched, strict=True):
                answers[i] = answer
        if all(answer is None for answer in answers):
            nodes_asked = sorted(node for node, _ in asked)
            listed = ", ".join(nodes_asked[:5]) + (", ..." if len(asked) > 5 else "")
            raise SourceUnavailableError(f"no exporter answered for the nodes of the selected pods ({listed})")
        at_node: dict[str, tuple[Mapping[PodKey, PodFigures], float]] = {}  # node -> its figures, their max age
        for (node, _), answer in zip(asked, answers, strict=True):
            if answer is not None:
                interval = answer.document.interval_seconds
                max_age = self._max_age if self._max_age is not None else default_max_age(interval)
                at_node[node] = (answer.figures(metric), max_age)
        now = self._clock()
        found: list[PodFigures | None] = []
        for pod in pods:
            figures, max_age = at_node.get(pod.node or "", _NO_FIGURES)
            pod_figures = figures.get((pod.namespace, pod.name))
            if pod_figures is not None:
                sample = pod_figures.sample
                if now - sample.sampled_at > max_age:
                    pod_figures = None
                elif sample.uid and pod.uid and sample.uid != pod.uid:
                    pod_figures = None  # figures of an earlier pod of the same name
            found.append(pod_figures)
        return found
