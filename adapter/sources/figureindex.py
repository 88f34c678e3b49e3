"""The pod figure index: for each metric asked about, each pod's value in its node's current answer.

The HPA's question (1,000 pods over some 800 nodes) looks each pod up once here, instead of visiting each node's feed,
answer and values (docs/decisions/2026-11-28-adapter-hot-path.md). The index knows answers, not feeds: whoever follows
the nodes tells it when a node's answer is replaced (`replace`) or lost (`drop`), so that at every moment it holds
only values of the nodes' current answers, and once a metric's index is filled, all of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence

import msgspec

from adapter.metrics_config import MetricDefinition
from adapter.sources.freshness import servable
from adapter.sources.metricsource import ListedValues, ServedValue
from adapter.sources.nodeanswer import NodeAnswer
from toolkit.pods import Pod

# A metric's index, made at its first question, takes the answers at hand this many nodes at a time, the event loop
# free between: each answer's document is read again for it (an answer keeps only the bytes).
INDEX_FILL_NODES = 25

IndexKey = tuple[str, str, str]  # (node, namespace, pod): a pod name may stand in two nodes' documents for a while


class IndexedValue(msgspec.Struct, frozen=True, gc=False):
    """A pod's value of one metric in the current answer of its node, its uid there, and that answer. One is made per
    pod of every answer; like ServedValue it is never tracked by the garbage collector, and it takes part in no cycle:
    nothing it refers to refers back to it."""

    value: ServedValue
    uid: str | None
    answer: NodeAnswer


class PodFigureIndex:
    """By metric, each pod's value in its node's current answer."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[IndexKey, IndexedValue]] = {}  # by metric name
        self._metrics: dict[str, MetricDefinition] = {}
        self._answers: dict[str, NodeAnswer] = {}  # by node: the answer whose values are in
        self._fills: set[asyncio.Task[None]] = set()  # new metrics' entries being filled from the answers at hand

    def metrics(self) -> Collection[MetricDefinition]:
        """The metrics indexed: an answer that arrives works their values out at once."""
        return self._metrics.values()

    def entries(self, metric_name: str) -> Mapping[IndexKey, IndexedValue] | None:
        """A metric's entries; None before its first question."""
        return self._entries.get(metric_name)

    def replace(self, node: str, answer: NodeAnswer) -> None:
        """The node's entries become those of its new `answer`: about 25 pods a document, a thousand documents a second
        at fleet size. A pod already in keeps its key (the dict holds on to the first tuple made for it)."""
        previous = self._answers.get(node)
        self._answers[node] = answer
        for name, entries in self._entries.items():
            metric = self._metrics[name]
            values = answer.values(metric)
            if previous is not None:
                for namespace, before in previous.values(metric).items():
                    still = values.get(namespace)
                    for pod in before if still is None else before.keys() - still.keys():
                        entries.pop((node, namespace, pod), None)
            _add_entries(entries, node, answer, values)

    def drop(self, node: str, answer: NodeAnswer) -> None:
        """Remove the node's entries if they come from `answer` (which its node has lost)."""
        if self._answers.get(node) is not answer:
            return
        del self._answers[node]
        for name, entries in self._entries.items():
            for namespace, pods in answer.values(self._metrics[name]).items():
                for pod in pods:
                    entries.pop((node, namespace, pod), None)

    def serve(
        self,
        metric: MetricDefinition,
        pods: Sequence[Pod],
        namespace: str | None,
        now: float,
        max_age: Callable[[float], float],
    ) -> tuple[list[ServedValue | None], list[int], set[str]]:
        """Each pod's value of `metric` where its node's current answer carries `namespace` (every namespace for None)
        and lists the pod, and the value is servable at `now` (freshness.servable, `max_age` of the answer's
        interval); else None. And where in `pods` the scheduled pods without one are, and the nodes whose answers
        carried the question. A metric asked about for the first time is indexed from now on (`_add`).

        One loop, each pod looked up once: the HPA's question comes here for every pod it selects."""
        entries = self._entries.get(metric.name)
        if entries is None:
            entries = self._add(metric)
        limits: dict[float, float] = {}  # max_age by document interval: a fleet's exporters mostly share one
        served: list[ServedValue | None] = []
        keep = served.append
        rest: list[int] = []
        nodes: set[str] = set()
        carrying = nodes.add
        for i, pod in enumerate(pods):
            node = pod.node
            if not node:
                keep(None)  # not scheduled: no node has figures of it
                continue
            entry = entries.get((node, pod.namespace, pod.name))
            if entry is not None:
                answer = entry.answer
                carried = answer.carried
                # nodeanswer.covers, inline; an answer that does not carry the question is for the node by node way
                if carried is None or namespace in carried:
                    carrying(node)
                    value = entry.value
                    interval = answer.interval_seconds
                    limit = limits.get(interval)
                    if limit is None:
                        limit = limits[interval] = max_age(interval)
                    if servable(value.sampled_at, entry.uid, pod, now, limit):
                        keep(value)
                        continue
            keep(None)
            rest.append(i)
        return served, rest, nodes

    async def filled(self) -> None:
        """Once the metrics being filled from the answers at hand (`_fill`) are."""
        while self._fills:
            await asyncio.gather(*self._fills)

    async def close(self) -> None:
        self._entries.clear()
        self._answers.clear()
        fills = list(self._fills)
        for fill in fills:
            fill.cancel()
        await asyncio.gather(*fills, return_exceptions=True)

    def _add(self, metric: MetricDefinition) -> dict[IndexKey, IndexedValue]:
        """The entries of a metric asked about for the first time. They start empty: from now on each answer that
        arrives adds its node's (`replace`), and the answers already at hand are added INDEX_FILL_NODES at a time by a
        task of its own (`_fill`), the event loop free between. Until a node's values are in, questions about its pods
        take the node by node way (`serve` lists them in its `rest`)."""
        self._metrics.setdefault(metric.name, metric)
        entries: dict[IndexKey, IndexedValue] = {}
        self._entries[metric.name] = entries
        if self._answers:
            task = asyncio.create_task(
                self._fill(metric, entries, list(self._answers.items())), name=f"gpu-pulse-index-{metric.name}"
            )
            self._fills.add(task)
            task.add_done_callback(self._fills.discard)
        return entries

    async def _fill(
        self,
        metric: MetricDefinition,
        entries: dict[IndexKey, IndexedValue],
        answers: Sequence[tuple[str, NodeAnswer]],
    ) -> None:
        """Add to a metric's new `entries` the values of `answers` (each node's answer when they were made) that are
        still their node's current answer: one replaced since has added its own values as it arrived, one lost since
        has none to add."""
        for start in range(0, len(answers), INDEX_FILL_NODES):
            if self._entries.get(metric.name) is not entries:
                return  # the index closed
            for node, answer in answers[start : start + INDEX_FILL_NODES]:
                if self._answers.get(node) is answer:
                    _add_entries(entries, node, answer, answer.values(metric))
            await asyncio.sleep(0)


def _add_entries(entries: dict[IndexKey, IndexedValue], node: str, answer: NodeAnswer, values: ListedValues) -> None:
    for namespace, pods in values.items():
        for pod, listed in pods.items():
            entries[(node, namespace, pod)] = IndexedValue(listed.value, listed.uid, answer)
