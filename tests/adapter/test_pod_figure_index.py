"""The pod figure index (nodefeeds.NodeFeeds.served_at_hand) behind the HPA's question (DirectSource.pod_values):
it serves the very values the node by node way serves (DirectSource._values_at_nodes), holds exactly the pods of each
followed node's current document, and keeps the feeds it serves followed."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Awaitable, Collection
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from adapter.metrics_config import MetricDefinition, default_metrics_config
from adapter.sources import figureindex
from adapter.sources.aggregation import pod_value
from adapter.sources.direct import DirectSource, _asked_namespace
from adapter.sources.exporters import StaticExporters
from adapter.sources.freshness import default_max_age
from adapter.sources.metricsource import ServedValue, SourceUnavailableError
from tests.adapter.scriptedfeeds import Figure, PodFiguresByKey, ScriptedFeeds, node_document
from tests.support.clocks import ManualClock
from toolkit.pods import Pod

NODES = ("n1", "n2", "n3")
URLS = {node: f"http://{node}.exporters" for node in NODES}


def gpu_utilization() -> MetricDefinition:
    metric = default_metrics_config().custom("gpu_utilization")
    assert metric is not None
    return metric


class CountingExporters(StaticExporters):
    """Static exporters that count how often the node by node way asks where they are."""

    def __init__(self, endpoints: dict[str, str]) -> None:
        super().__init__(endpoints)
        self.lookups = 0

    def base_urls(self, nodes: Collection[str]) -> dict[str, str]:
        self.lookups += 1
        return super().base_urls(nodes)


@dataclass
class Scripted:
    clock: ManualClock
    cache: ScriptedFeeds
    locator: CountingExporters
    source: DirectSource
    metric: MetricDefinition

    async def send(self, node: str, pods: PodFiguresByKey | str, interval: float = 1.0) -> None:
        sent = pods if isinstance(pods, str) else node_document(node, pods, self.clock.now, interval)
        await self.cache.send(URLS[node], sent)

    async def values(self, pods: list[Pod]) -> list[ServedValue | None]:
        return await self.source.pod_values(self.metric, pods)


def pod(name: str, node: str | None, namespace: str = "ml", uid: str = "") -> Pod:
    return Pod(namespace=namespace, name=name, uid=uid, node=node, phase="Running")


async def scripted_source(**options: Any) -> Scripted:
    clock = ManualClock()
    cache = ScriptedFeeds(clock, **options)
    locator = CountingExporters(dict(URLS))
    source = DirectSource(locator, cache, clock=clock.time)
    await cache.start()  # not source.start(): no warm-up, nodes are followed once asked about
    return Scripted(clock, cache, locator, source, gpu_utilization())


@pytest.fixture
async def scripted() -> AsyncIterator[Scripted]:
    made = await scripted_source()
    try:
        yield made
    finally:
        await made.cache.close()


def utilizations(values: list[ServedValue | None]) -> list[float | None]:
    return [None if v is None else float(v.value) for v in values]


async def test_a_second_question_is_answered_from_the_index_alone(scripted: Scripted) -> None:
    await scripted.send("n1", {("ml", "a"): Figure(10.0), ("ml", "b"): Figure(20.0)})
    await scripted.send("n2", {("ml", "c"): Figure(30.0)})
    pods = [pod("a", "n1"), pod("b", "n1"), pod("c", "n2")]
    assert utilizations(await scripted.values(pods)) == [10.0, 20.0, 30.0]  # the nodes' feeds opened, waited for
    lookups = scripted.locator.lookups
    assert utilizations(await scripted.values(pods)) == [10.0, 20.0, 30.0]
    assert scripted.locator.lookups == lookups  # no node by node work: no exporter located
    await scripted.send("n1", {("ml", "a"): Figure(11.0), ("ml", "b"): Figure(21.0)})
    assert utilizations(await scripted.values(pods)) == [11.0, 21.0, 30.0]
    assert scripted.locator.lookups == lookups


async def test_a_pod_its_node_no_longer_lists_leaves_the_index(scripted: Scripted) -> None:
    await scripted.send("n1", {("ml", "a"): Figure(10.0), ("ml", "b"): Figure(20.0)})
    pods = [pod("a", "n1"), pod("b", "n1")]
    assert utilizations(await scripted.values(pods)) == [10.0, 20.0]
    await scripted.send("n1", {("ml", "a"): Figure(12.0)})
    assert scripted.cache.indexed_keys("gpu_utilization") == {("n1", "ml", "a")}
    lookups = scripted.locator.lookups
    assert utilizations(await scripted.values(pods)) == [12.0, None]  # left out, not waited for
    assert scripted.locator.lookups == lookups + 1  # the unlisted pod asked its node's answer, which was at hand
    assert scripted.cache.exporter(URLS["n1"]).connections == [frozenset({"ml"})]  # no reconnect


async def test_a_failing_node_takes_its_figures_with_it_until_it_answers_again(scripted: Scripted) -> None:
    await scripted.send("n1", {("ml", "a"): Figure(10.0)})
    await scripted.send("n2", {("ml", "b"): Figure(20.0)})
    pods = [pod("a", "n1"), pod("b", "n2")]
    assert utilizations(await scripted.values(pods)) == [10.0, 20.0]
    await scripted.send("n1", "connection refused")
    assert scripted.cache.indexed_keys("gpu_utilization") == {("n2", "ml", "b")}
    assert utilizations(await scripted.values(pods)) == [None, 20.0]  # a partial answer, not "unavailable"
    await scripted.send("n2", "connection refused")
    assert scripted.cache.indexed_keys("gpu_utilization") == set()
    with pytest.raises(SourceUnavailableError, match="no exporter answered"):
        await scripted.values(pods)
    await scripted.send("n1", {("ml", "a"): Figure(13.0)})
    assert utilizations(await scripted.values(pods)) == [13.0, None]


async def test_a_question_partly_served_from_the_index_is_not_unavailable(scripted: Scripted) -> None:
    """The index serves n1's pod; the node by node way finds nothing at n2, whose exporter fails: a partial answer."""
    await scripted.send("n1", {("ml", "a"): Figure(10.0)})
    await scripted.send("n2", {("ml", "b"): Figure(20.0)})
    pods = [pod("a", "n1"), pod("b", "n2")]
    assert utilizations(await scripted.values(pods)) == [10.0, 20.0]
    await scripted.send("n2", "HTTP 500")
    assert utilizations(await scripted.values(pods)) == [10.0, None]


async def test_a_feed_replaced_for_a_new_exporter_url_takes_its_figures_with_it(scripted: Scripted) -> None:
    await scripted.send("n1", {("ml", "a"): Figure(10.0)})
    assert utilizations(await scripted.values([pod("a", "n1")])) == [10.0]
    moved = "http://n1.exporters.new"
    await scripted.cache.send(moved, node_document("n1", {("ml", "b"): Figure(40.0)}, scripted.clock.now))
    scripted.cache.warm({"n1": moved})  # the old feed is dropped: its pod leaves the index at once
    assert scripted.cache.indexed_keys("gpu_utilization") == set()
    await scripted.cache.send(moved, node_document("n1", {("ml", "b"): Figure(41.0)}, scripted.clock.now))
    assert scripted.cache.indexed_keys("gpu_utilization") == {("n1", "ml", "b")}
    scripted.locator = CountingExporters({**URLS, "n1": moved})
    source = DirectSource(scripted.locator, scripted.cache, clock=scripted.clock.time)
    assert utilizations(await source.pod_values(scripted.metric, [pod("a", "n1"), pod("b", "n1")])) == [None, 41.0]


async def test_a_pod_that_moved_node_is_served_from_the_node_it_is_on(scripted: Scripted) -> None:
    """A StatefulSet's pod re-created on another node: both nodes' documents list it for a while."""
    await scripted.send("n1", {("ml", "db-0"): Figure(10.0, uid="old")})
    await scripted.send("n2", {("ml", "db-0"): Figure(70.0, uid="new")})
    assert utilizations(await scripted.values([pod("db-0", "n1", uid="old")])) == [10.0]
    assert utilizations(await scripted.values([pod("db-0", "n2", uid="new")])) == [70.0]
    await scripted.cache.filled()
    assert scripted.cache.indexed_keys("gpu_utilization") == {("n1", "ml", "db-0"), ("n2", "ml", "db-0")}
    await scripted.send("n1", {})
    assert utilizations(await scripted.values([pod("db-0", "n2", uid="new")])) == [70.0]
    assert scripted.cache.indexed_keys("gpu_utilization") == {("n2", "ml", "db-0")}


async def test_figures_of_an_earlier_pod_of_that_name_are_not_served(scripted: Scripted) -> None:
    await scripted.send("n1", {("ml", "a"): Figure(10.0, uid="uid-of-an-earlier-a")})
    assert utilizations(await scripted.values([pod("a", "n1", uid="uid-a")])) == [None]
    assert utilizations(await scripted.values([pod("a", "n1", uid="uid-a")])) == [None]  # from the index, too
    await scripted.send("n1", {("ml", "a"): Figure(15.0, uid="uid-a")})
    assert utilizations(await scripted.values([pod("a", "n1", uid="uid-a")])) == [15.0]
    assert utilizations(await scripted.values([pod("a", "n1")])) == [15.0]  # a pod without uid: any figure of its name


async def test_stale_figures_are_left_out_and_fresh_ones_served_again(scripted: Scripted) -> None:
    await scripted.send("n1", {("ml", "a"): Figure(10.0, age=1.0)}, interval=2.0)
    assert utilizations(await scripted.values([pod("a", "n1")])) == [10.0]
    scripted.clock.advance(default_max_age(2.0) - 1.0)  # 8 s old: just fresh
    assert utilizations(await scripted.values([pod("a", "n1")])) == [10.0]
    scripted.clock.advance(0.5)
    assert utilizations(await scripted.values([pod("a", "n1")])) == [None]
    await scripted.send("n1", {("ml", "a"): Figure(12.0)}, interval=2.0)
    assert utilizations(await scripted.values([pod("a", "n1")])) == [12.0]


async def test_a_feed_served_only_from_the_index_stays_followed_with_its_namespace() -> None:
    """The sweep closes feeds nobody asked about within keep_warm_seconds; a feed whose pods the index serves is
    asked about, and the namespaces it serves travel on its next connection."""
    scripted = await scripted_source(keep_warm_seconds=0.4)
    try:
        await scripted.send("n1", {("ml", "a"): Figure(10.0), ("other", "x"): Figure(5.0)})
        assert utilizations(await scripted.values([pod("a", "n1")])) == [10.0]
        feed = scripted.cache.following(URLS["n1"])
        lookups = scripted.locator.lookups
        for _ in range(12):  # 1.8 s of the cache's clock, 4.5 keep_warm_seconds; sweeps run every 0.1 s
            scripted.clock.advance(0.15)
            await scripted.send("n1", {("ml", "a"): Figure(10.0), ("other", "x"): Figure(5.0)})
            assert utilizations(await scripted.values([pod("a", "n1")])) == [10.0]
            await asyncio.sleep(0.15)
        assert scripted.locator.lookups == lookups  # served from the index only
        assert scripted.cache.following(URLS["n1"]) is feed  # never closed
        assert utilizations(await scripted.values([pod("x", "n1", namespace="other")])) == [5.0]
        assert scripted.cache.exporter(URLS["n1"]).connections == [frozenset({"ml"}), frozenset({"ml", "other"})]
        scripted.clock.advance(0.5)  # nobody asks any more
        await _eventually(lambda: scripted.cache.following(URLS["n1"]) is None, "the feed is closed")
        assert scripted.cache.indexed_keys("gpu_utilization") == set()
    finally:
        await scripted.cache.close()


async def test_index_entries_are_not_tracked_by_the_garbage_collector(scripted: Scripted) -> None:
    await scripted.send("n1", {("ml", f"p-{i}"): Figure(float(i)) for i in range(10)})
    await scripted.values([pod("p-0", "n1")])
    await scripted.cache.filled()
    indexed = scripted.cache.entries("gpu_utilization")
    assert indexed is not None
    entries = list(indexed.values())
    assert len(entries) == 10
    gc.collect()
    assert not any(gc.is_tracked(entry) for entry in entries)


async def _eventually(condition: Any, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"never happened: {what}")


# ---- the index against the node by node way, over random documents, failures, clocks and questions ------------------
NAMES = [(namespace, name) for namespace in ("ml", "other") for name in ("a", "b", "c")]
UIDS = ("own", "earlier", None)  # the exporter knows the pod's own uid, an earlier pod's of that name, or none
figures = st.builds(
    Figure,
    utilization=st.sampled_from([0.0, 12.5, 50.0, 99.9]),
    uid=st.sampled_from(UIDS),
    age=st.sampled_from([0.0, 1.0, 4.0, 6.0]),
)
questions = st.lists(
    st.tuples(st.sampled_from(NAMES), st.sampled_from([*NODES, None, "n9"]), st.booleans()),
    min_size=1,
    max_size=6,
    unique_by=lambda asked: asked[0],
)


def own_uid(namespace: str, name: str) -> str:
    return f"uid-{namespace}-{name}"


class IndexAgreesWithNodeByNode(RuleBasedStateMachine):
    """Nodes send documents (the same pod names on several nodes, uids of earlier pods, old samples) or fail, time
    passes, and questions come: the HPA's answer is what the node by node way answers, what `samples` holds, and what
    the nodes last sent; the index holds exactly the current answers' pods."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.scripted = self.run(scripted_source())
        self.sent: dict[str, tuple[float, float, PodFiguresByKey] | str] = {}  # node -> (at, interval, pods) | failure
        for node in NODES:
            self.run(self._send(node, {}, 1.0))

    def run(self, work: Awaitable[Any]) -> Any:
        async def running() -> Any:
            return await work

        return self.loop.run_until_complete(running())

    def teardown(self) -> None:
        self.run(self.scripted.cache.close())
        self.loop.close()

    async def _send(self, node: str, pods: PodFiguresByKey | str, interval: float) -> None:
        if isinstance(pods, str):
            self.sent[node] = pods
        else:
            pods = {key: _with_uid(key, figure) for key, figure in pods.items()}
            self.sent[node] = (self.scripted.clock.now, interval, pods)
        await self.scripted.send(node, pods, interval)

    @rule(node=st.sampled_from(NODES), pods=st.dictionaries(st.sampled_from(NAMES), figures, max_size=5))
    def send_a_document(self, node: str, pods: PodFiguresByKey) -> None:
        self.run(self._send(node, pods, 1.0))

    @rule(node=st.sampled_from(NODES), pods=st.dictionaries(st.sampled_from(NAMES), figures, max_size=5))
    def send_a_document_of_a_slower_exporter(self, node: str, pods: PodFiguresByKey) -> None:
        self.run(self._send(node, pods, 2.0))

    @rule(node=st.sampled_from(NODES))
    def fail(self, node: str) -> None:
        self.run(self._send(node, "connection refused", 1.0))

    @rule(seconds=st.sampled_from([0.5, 1.0, 3.0]))
    def advance(self, seconds: float) -> None:
        self.scripted.clock.advance(seconds)

    @rule(asked=questions)
    def ask(self, asked: list[tuple[tuple[str, str], str | None, bool]]) -> None:
        pods = [
            pod(name, node, namespace, own_uid(namespace, name) if uid else "")
            for (namespace, name), node, uid in asked
        ]
        new = self.run(_outcome(self.scripted.values(pods)))
        old = self.run(_outcome(self._node_by_node(pods)))
        sampled = self.run(_outcome(self._from_samples(pods)))
        assert new == old == sampled
        assert _served(new) == self._expected(pods)

    async def _node_by_node(self, pods: list[Pod]) -> list[ServedValue | None]:
        source = self.scripted.source
        return await source._values_at_nodes(self.scripted.metric, pods, _asked_namespace(pods))

    async def _from_samples(self, pods: list[Pod]) -> list[ServedValue | None]:
        metric = self.scripted.metric
        samples = await self.scripted.source.samples(metric, pods)
        found = (samples.get((p.namespace, p.name)) for p in pods)
        return [None if sample is None else pod_value(metric, sample) for sample in found]

    def _expected(self, pods: list[Pod]) -> list[float | None] | str:
        """What the nodes last sent says: each pod's figure where its node lists it, fresh and of its uid; "no
        exporter answered" when every node of the question with an exporter fails."""
        now = self.scripted.clock.now
        asked = {p.node for p in pods if p.node in NODES}
        if asked and all(isinstance(self.sent[node], str) for node in asked):
            return "unavailable"
        expected: list[float | None] = []
        for p in pods:
            sent = self.sent.get(p.node or "")
            figure = None if sent is None or isinstance(sent, str) else sent[2].get((p.namespace, p.name))
            if sent is None or isinstance(sent, str) or figure is None:
                expected.append(None)
                continue
            at, interval, _ = sent
            fresh = now - (at - figure.age) <= default_max_age(interval)
            own = figure.uid in (None, p.uid) or not p.uid
            expected.append(figure.utilization if fresh and own else None)
        return expected

    @invariant()
    def the_index_holds_the_current_answers_exactly(self) -> None:
        cache = self.scripted.cache
        self.run(cache.filled())
        entries = cache.entries("gpu_utilization")
        if entries is not None:
            assert cache.indexed_keys("gpu_utilization") == cache.current_keys("gpu_utilization")
            for (node, _, _), entry in entries.items():
                assert entry.answer is cache._feeds[node].answer


def _with_uid(key: tuple[str, str], figure: Figure) -> Figure:
    uid = {"own": own_uid(*key), "earlier": "uid-of-an-earlier-pod", None: None}[figure.uid]
    return Figure(figure.utilization, uid, figure.age)


async def _outcome(values: Awaitable[list[ServedValue | None]]) -> list[ServedValue | None] | str:
    try:
        return await values
    except SourceUnavailableError:
        return "unavailable"


def _served(outcome: list[ServedValue | None] | str) -> list[float | None] | str:
    return outcome if isinstance(outcome, str) else utilizations(outcome)


TestIndexAgreesWithNodeByNode = IndexAgreesWithNodeByNode.TestCase
TestIndexAgreesWithNodeByNode.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)


async def test_an_index_made_at_the_first_question_fills_a_slice_at_a_time(
    scripted: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first question about a metric does not build its index from every document at hand at once: it is
    answered the node by node way for the nodes not in yet, and the index takes the answers at hand a slice at a
    time; a document arriving meanwhile puts its own values in, which the slice then leaves alone."""
    monkeypatch.setattr(figureindex, "INDEX_FILL_NODES", 1)
    for node in NODES:
        await scripted.send(node, {("ml", f"{node}-p"): Figure(10.0)})
    # the nodes are followed (a question about another metric), but nothing is indexed for utilization yet
    other = default_metrics_config().custom("gpu_power_watts")
    assert other is not None
    await scripted.source.pod_values(other, [pod("n1-p", "n1")])
    assert scripted.cache.indexed_keys("gpu_utilization") == set()
    pods = [pod(f"{node}-p", node) for node in NODES]
    served, rest = scripted.cache.served_at_hand(scripted.metric, pods, "ml", scripted.clock.now, default_max_age)
    assert (served, rest) == ([None, None, None], [0, 1, 2])  # for the node by node way: nothing is in yet
    assert scripted.cache.indexed_keys("gpu_utilization") == set()
    await asyncio.sleep(0)
    assert len(scripted.cache.indexed_keys("gpu_utilization")) == 1  # a slice of one node, then the loop is free
    assert utilizations(await scripted.values(pods)) == [10.0, 10.0, 10.0]
    await scripted.send("n3", {("ml", "n3-p"): Figure(30.0), ("ml", "n3-q"): Figure(31.0)})
    await scripted.cache.filled()
    assert scripted.cache.indexed_keys("gpu_utilization") == {
        ("n1", "ml", "n1-p"),
        ("n2", "ml", "n2-p"),
        ("n3", "ml", "n3-p"),
        ("n3", "ml", "n3-q"),
    }
    assert utilizations(await scripted.values(pods)) == [10.0, 10.0, 30.0]
