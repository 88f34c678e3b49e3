"""The `direct` source: figures straight from the exporters on the nodes that host the selected pods.

For a query it groups the selected pods by node, asks each node's exporter for its `/pods` document (in parallel,
cached for one exporter interval, see nodepods), and keeps the figures of the selected pods that are fresh:
a figure older than `max_age` (default 3 x the exporter's interval + 2 s, measured from the pod figures' sample time)
is left out rather than served stale, and a node whose exporter does not answer drops its pods.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from adapter.kube.pods import PodInfo
from adapter.metrics_config import MetricDefinition
from adapter.sources.exporters import ExporterLocator
from adapter.sources.model import PodKey, PodSample, SourceUnavailableError
from adapter.sources.nodepods import Miss, NodeAnswer, NodePodsCache


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

    async def samples(self, metric: MetricDefinition, pods: Sequence[PodInfo]) -> Mapping[PodKey, PodSample]:
        by_node: dict[str, list[PodInfo]] = defaultdict(list)
        namespaces: set[str] = set()
        for pod in pods:
            if pod.node:
                by_node[pod.node].append(pod)
                namespaces.add(pod.namespace)
        namespace = next(iter(namespaces)) if len(namespaces) == 1 else None
        asked: list[tuple[str, str]] = []
        answers: list[NodeAnswer | None] = []
        missing: list[int] = []
        for node in by_node:
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
            return {}
        if missing:
            fetched = await asyncio.gather(*(self._cache.answer(*asked[i], namespace) for i in missing))
            for i, answer in zip(missing, fetched, strict=True):
                answers[i] = answer
        if all(answer is None for answer in answers):
            nodes = ", ".join(sorted(node for node, _ in asked)[:5]) + (", ..." if len(asked) > 5 else "")
            raise SourceUnavailableError(f"no exporter answered for the nodes of the selected pods ({nodes})")
        now = self._clock()
        found: dict[PodKey, PodSample] = {}
        for (node, _), answer in zip(asked, answers, strict=True):
            if answer is None:
                continue
            max_age = self._max_age if self._max_age is not None else default_max_age(answer.document.interval_seconds)
            samples = answer.samples(metric.figure)
            for pod in by_node[node]:
                key = (pod.namespace, pod.name)
                sample = samples.get(key)
                if sample is None or now - sample.sampled_at > max_age:
                    continue
                if sample.uid and pod.uid and sample.uid != pod.uid:
                    continue  # figures of an earlier pod of the same name
                found[key] = sample
        return found
