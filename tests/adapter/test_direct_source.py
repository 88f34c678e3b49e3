"""The direct source: exporters found per node, each node's documents followed by one stream while queries need it,
stale figures and silent nodes left out rather than served."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest

from adapter.api.selfmetrics import AdapterMetrics
from adapter.metrics_config import default_metrics_config
from adapter.quantity import parse_quantity
from adapter.selectors import parse_selector
from adapter.sources import nodefeed, nodefeeds
from adapter.sources.aggregation import pod_value
from adapter.sources.direct import DirectSource
from adapter.sources.exporters import PodExporters, StaticExporters
from adapter.sources.nodefeeds import Miss, NodeFeeds
from tests.adapter.simcluster import EXPORTER_LABELS, AdapterFactory, Cluster
from tests.adapter.simnodes import Gpu, SimulatedNode
from tests.support.clocks import ManualClock
from tests.support.waiting import eventually

PODS = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/gpu_utilization"


async def served(client: Any, path: str = PODS) -> dict[str, dict[str, Any]]:
    response = await client.get(path)
    body = await response.json()
    assert response.status == 200, body
    return {item["describedObject"]["name"]: item for item in body["items"]}


async def served_until(client: Any, condition: Callable[[set[str]], bool], what: str) -> dict[str, dict[str, Any]]:
    """Ask again until the served pods satisfy `condition` (a document being fetched in the background arrives);
    fail naming `what` after a deadline."""
    deadline = time.monotonic() + 10
    while True:
        items = await served(client)
        if condition(set(items)):
            return items
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what} (served {sorted(items)})")
        await asyncio.sleep(0.02)


def timestamp(item: dict[str, Any]) -> float:
    return datetime.fromisoformat(item["timestamp"].replace("Z", "+00:00")).timestamp()


def direct(cluster: Cluster, clock: ManualClock, max_age: float | None = None, **cache: Any) -> DirectSource:
    nodes_cache = NodeFeeds(clock=clock.monotonic, wall_clock=clock.time, **cache)
    return DirectSource(cluster.locator(), nodes_cache, max_age=max_age, clock=clock.time)


async def test_served_figures_are_never_older_than_max_age(make_adapter: AdapterFactory, cluster: Cluster) -> None:
    clock = ManualClock(time.time())
    for node in cluster.nodes.values():
        node.clock = clock.time
    client = await make_adapter(source=direct(cluster, clock, max_age=3.0))
    cluster.nodes["gpu-1"].freeze()  # gpu-1's exporter stops producing new samples; gpu-2 goes on
    frozen_sample = clock.now - cluster.nodes["gpu-1"].lag
    seen_a = []
    for _ in range(12):
        items = await served(client)
        for item in items.values():
            # timestamps are whole seconds, rounded down: at most one second older than the sample
            assert clock.now - timestamp(item) <= 3.0 + 1.0
        if "infer-a" in items:
            seen_a.append(clock.now)
            assert clock.now - frozen_sample <= 3.0
        assert "infer-b" in items  # the healthy node keeps being served
        clock.advance(0.5)
        await cluster.next_documents()
    assert seen_a, "the frozen node's pod was served while its figures were fresh"
    assert max(seen_a) - frozen_sample <= 3.0
    assert "infer-a" not in await served(client)


async def test_default_max_age_is_three_intervals_and_two_seconds(
    make_adapter: AdapterFactory, cluster: Cluster
) -> None:
    clock = ManualClock(time.time())
    node = cluster.nodes["gpu-1"]
    node.clock, node.interval, node.lag = clock.time, 2.0, 0.0
    client = await make_adapter(source=direct(cluster, clock))
    assert "infer-a" in await served(client)
    node.freeze()
    clock.advance(7.9)  # 3 x 2 s + 2 s = 8 s
    await cluster.next_documents()
    assert "infer-a" in await served(client)
    clock.advance(0.2)
    await cluster.next_documents()
    assert "infer-a" not in await served(client)


async def test_stopped_exporter_drops_its_pods_and_they_return(make_adapter: AdapterFactory, cluster: Cluster) -> None:
    clock = ManualClock(time.time())
    client = await make_adapter(source=direct(cluster, clock))
    assert set(await served(client)) == {"infer-a", "infer-b", "train-0"}
    gpu2 = cluster.nodes["gpu-2"]
    await gpu2.stop()
    clock.advance(1.1)  # past the document's interval: asked again in the background, refused
    await served_until(client, lambda pods: pods == {"infer-a", "train-0"}, "the stopped node's pod drops out")
    await gpu2.start()  # same port
    clock.advance(1.1)  # past the failure's retry time
    await served_until(client, lambda pods: "infer-b" in pods, "the restarted node's pod is back")


class UnlistedExporters(StaticExporters):
    """Exporters whose nodes cannot be listed before questions come (as a URL template's): nothing is warmed up."""

    def known_nodes(self) -> tuple[str, ...]:
        return ()


async def test_each_node_is_followed_by_one_stream_whatever_the_queries(
    make_adapter: AdapterFactory, cluster: Cluster
) -> None:
    client = await make_adapter(locator=UnlistedExporters({n: node.url for n, node in cluster.nodes.items()}))
    gpu1 = cluster.nodes["gpu-1"]
    for _ in range(5):
        await served(client)
    await cluster.next_documents()
    for _ in range(5):
        await served(client)
    assert gpu1.requests == 1 and gpu1.documents > 3  # one stream, many documents
    assert gpu1.namespaces_asked == [("ml",)]  # only the namespace asked about travels
    await served(client, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/other/pods/*/gpu_utilization")
    assert cluster.nodes["gpu-2"].namespaces_asked == [("ml",), ("ml", "other")]  # reconnected with both
    assert gpu1.requests == 1  # gpu-1 holds no pod of `other`
    await served(client, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/*/gpu_utilization")
    assert gpu1.namespaces_asked[-1] is None  # several namespaces: the whole document
    await served(client)
    assert gpu1.requests == 2  # which carries `ml` too


async def test_known_exporters_are_followed_before_any_question_and_readiness_waits_for_them(
    make_adapter: AdapterFactory, cluster: Cluster
) -> None:
    """A replica starting (or restarting) in a fleet follows every node it knows an exporter on, whole, before any
    question, and says it is ready only once each has answered or failed: a node that refuses does not hold it."""
    await cluster.nodes["gpu-2"].stop()
    client = await make_adapter()
    deadline = time.monotonic() + 10
    while (response := await client.get("/readyz?verbose")).status != 200:
        assert "[-]metrics-source failed" in await response.text()
        assert time.monotonic() < deadline, "never ready"
        await asyncio.sleep(0.02)
    gpu1 = cluster.nodes["gpu-1"]
    assert gpu1.requests == 1 and gpu1.namespaces_asked == [None]  # followed whole, before any question
    assert set(await served(client)) == {"infer-a", "train-0"}  # gpu-2's pod is left out: its exporter is down
    assert gpu1.requests == 1  # the question found its document at hand


async def test_a_warm_up_is_over_after_warm_up_seconds_whatever_the_nodes_do() -> None:
    """An exporter that accepts the connection and then says nothing holds the warm-up WARM_UP_SECONDS at most."""
    silent = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    clock = ManualClock(time.time())
    cache = NodeFeeds(timeout=60.0, clock=clock.monotonic, wall_clock=clock.time)
    await cache.start()
    try:
        assert not cache.warmed()  # not before a warm-up began
        cache.warm({"gpu-9": f"http://127.0.0.1:{port}"})
        await asyncio.sleep(0.2)
        assert not cache.warmed() and isinstance(cache.cached("gpu-9", f"http://127.0.0.1:{port}", None), Miss)
        clock.advance(nodefeeds.WARM_UP_SECONDS)
        assert cache.warmed()
        cache.warm({})  # a warm-up of nothing is over at once
        assert cache.warmed()
    finally:
        await cache.close()
        silent.close()


class LostCancellations(NodeFeeds):
    """A cache whose reconnects never reach the task they replace, as when a cancellation is swallowed."""

    def _reconnect(self, feed: Any) -> None:
        feed.task = None  # so the replaced task is not cancelled: it goes on reading its stream
        super()._reconnect(feed)


async def test_a_replaced_stream_never_speaks_for_its_feed(cluster: Cluster) -> None:
    """A feed reconnected for another namespace takes its documents from the new stream only: the one it replaced,
    should it outlive its cancellation, carries only what was asked before and must never become the feed's answer
    (queries about the new namespace would wait for the next document, again and again)."""
    cache = LostCancellations(timeout=5.0)
    await cache.start()
    try:
        gpu2 = cluster.nodes["gpu-2"]
        assert await cache.answer("gpu-2", gpu2.url, "ml") is not None
        assert await cache.answer("gpu-2", gpu2.url, "other") is not None  # a second stream, with both namespaces
        assert gpu2.namespaces_asked == [("ml",), ("ml", "other")]
        await eventually(lambda: gpu2.open_streams == 1, "the replaced stream is left by its task")
        for _ in range(3):
            await cluster.next_documents()
            for namespace in ("ml", "other"):
                assert not isinstance(cache.cached("gpu-2", gpu2.url, namespace), Miss), namespace
    finally:
        await cache.close()


async def test_an_exporter_without_streams_is_asked_each_interval(
    make_adapter: AdapterFactory, cluster: Cluster
) -> None:
    for node in cluster.nodes.values():
        node.streams, node.interval = False, 0.2
    client = await make_adapter()
    gpu1 = cluster.nodes["gpu-1"]
    assert set(await served(client)) == {"infer-a", "infer-b", "train-0"}
    await eventually(lambda: gpu1.requests >= 4, "asked again each interval")
    assert set(await served(client)) == {"infer-a", "infer-b", "train-0"}
    started, requests = time.monotonic(), gpu1.requests
    await asyncio.sleep(0.5)
    assert gpu1.requests - requests <= (time.monotonic() - started) / 0.2 + 1  # not more often than its interval


async def test_a_node_whose_stream_slots_are_taken_is_read_by_plain_documents(
    make_adapter: AdapterFactory, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another client holds every stream slot of gpu-1's exporter (429 to watch=1): its pods are served from plain
    documents asked each interval, and the feed takes a stream again once a slot is free."""
    monkeypatch.setattr(nodefeed, "STREAM_REFUSED_SECONDS", 0.5)
    gpu1 = cluster.nodes["gpu-1"]
    gpu1.streams_taken, gpu1.interval = True, 0.2
    client = await make_adapter()
    assert set(await served(client)) == {"infer-a", "infer-b", "train-0"}
    documents = gpu1.documents
    await eventually(lambda: gpu1.documents >= documents + 3, "plain documents asked again")
    assert gpu1.open_streams == 0
    assert set(await served(client)) == {"infer-a", "infer-b", "train-0"}
    gpu1.streams_taken = False
    await eventually(lambda: gpu1.open_streams == 1, "a stream again once a slot is free")
    assert set(await served(client)) == {"infer-a", "infer-b", "train-0"}


async def test_followed_nodes_are_dropped_when_nobody_asks(cluster: Cluster) -> None:
    cache = NodeFeeds(keep_warm_seconds=0.6)
    source = DirectSource(cluster.locator(), cache)
    await source.start()
    try:
        gpu1 = cluster.nodes["gpu-1"]
        answer = await cache.answer("gpu-1", gpu1.url, "ml")
        assert answer is not None
        await eventually(lambda: cache.documents >= 3, "documents keep arriving for a node someone asked about")
        await eventually(lambda: cache.size == 0, "a node nobody asks about any more is no longer followed")
        await eventually(lambda: gpu1.open_streams == 0, "its stream is closed")
        settled = gpu1.documents
        await asyncio.sleep(0.3)
        assert gpu1.documents == settled
    finally:
        await source.close()


async def test_recreated_pod_does_not_inherit_old_figures(make_adapter: AdapterFactory, cluster: Cluster) -> None:
    clock = ManualClock(time.time())
    client = await make_adapter(source=direct(cluster, clock))
    cluster.nodes["gpu-1"].set_pod("ml", "infer-a", [Gpu(utilization=99.0)], uid="uid-of-an-earlier-infer-a")
    assert "infer-a" not in await served(client)
    pod = cluster.pods.get("ml", "infer-a")
    assert pod is not None
    cluster.nodes["gpu-1"].set_pod("ml", "infer-a", [Gpu(utilization=99.0)], uid=pod.uid)
    clock.advance(1.0)
    items = await served_until(client, lambda pods: "infer-a" in pods, "the pod's own figures are served")
    assert parse_quantity(items["infer-a"]["value"]) == Decimal(99)


async def test_slow_or_broken_exporters_drop_only_their_pods(make_adapter: AdapterFactory, cluster: Cluster) -> None:
    cluster.nodes["gpu-2"].delay = 2.0
    metrics = AdapterMetrics("direct")
    client = await make_adapter(
        source=DirectSource(cluster.locator(), NodeFeeds(timeout=0.3, observe=metrics.observe_source_call)),
        metrics=metrics,
    )
    assert set(await served(client)) == {"infer-a", "train-0"}
    await eventually(
        lambda: (
            metrics.registry.get_sample_value(
                "gpu_pulse_adapter_source_duration_seconds_count", {"source": "direct", "outcome": "timeout"}
            )
            == 1
        ),
        "the slow node's timeout is counted",
    )
    for broken in ("not json", '{"api_version": "gpu-pulse.dev/v1"}'):
        cluster.nodes["gpu-1"].broken = broken
        client = await make_adapter(source=DirectSource(cluster.locator(), NodeFeeds(timeout=0.3)))
        response = await client.get(PODS)
        assert response.status == 503  # no node gave a usable answer
        assert "no exporter answered" in (await response.json())["message"]


async def test_a_document_about_another_node_is_refused(make_adapter: AdapterFactory, cluster: Cluster) -> None:
    swapped = StaticExporters({"gpu-1": cluster.nodes["gpu-2"].url, "gpu-2": cluster.nodes["gpu-2"].url})
    client = await make_adapter(locator=swapped)
    assert set(await served(client)) == {"infer-b"}


async def test_exporters_are_found_by_their_pods(make_adapter: AdapterFactory, cluster: Cluster) -> None:
    # two exporters on one port, on two loopback addresses, as two nodes' exporter pods would be
    first = SimulatedNode("gpu-1", host="127.0.0.2")
    await first.start()
    second = SimulatedNode("gpu-2", host="127.0.0.3", port=first.port)
    await second.start()
    try:
        first.set_pod("ml", "infer-a", [Gpu(utilization=11.0)])
        second.set_pod("ml", "infer-b", [Gpu(utilization=22.0)])
        kube = cluster.kube
        kube.put_pod("gpu-pulse", "exporter-1", node="gpu-1", labels=EXPORTER_LABELS, pod_ip="127.0.0.2")
        kube.put_pod("gpu-pulse", "exporter-2", node="gpu-2", labels=EXPORTER_LABELS, pod_ip="127.0.0.3")
        kube.put_pod("gpu-pulse", "impostor", node="gpu-1", labels={"app": "other"}, pod_ip="127.0.0.1")
        await eventually(lambda: len(cluster.pods.pods_in_namespace("gpu-pulse")) == 3, "the exporter pods are cached")
        locator = PodExporters(cluster.pods, parse_selector("app.kubernetes.io/name=gpu-pulse-exporter"), first.port)
        client = await make_adapter(locator=locator)
        values = {name: parse_quantity(item["value"]) for name, item in (await served(client)).items()}
        assert values == {"infer-a": Decimal(11), "infer-b": Decimal(22)}
        # an exporter pod that is not running does not count
        kube.put_pod(
            "gpu-pulse", "exporter-2", node="gpu-2", labels=EXPORTER_LABELS, pod_ip="127.0.0.3", phase="Failed"
        )
        await eventually(lambda: cluster.pods.get("gpu-pulse", "exporter-2").phase == "Failed", "the pod failed")  # type: ignore[union-attr]
        assert locator.base_url("gpu-2") is None
        assert locator.base_url("gpu-1") == f"http://127.0.0.2:{first.port}"
        assert locator.known_nodes() == {"gpu-1"}  # what a warm-up follows: the running exporter pods' nodes
        # many nodes at once (a large answer): the same verdicts; a replaced exporter pod is found at its new address
        kube.put_pod("gpu-pulse", "exporter-1", node="gpu-1", labels=EXPORTER_LABELS, pod_ip="127.0.0.9")
        await eventually(lambda: cluster.pods.get("gpu-pulse", "exporter-1").pod_ip == "127.0.0.9", "moved")  # type: ignore[union-attr]
        assert locator.base_urls(["gpu-1", "gpu-2", "gpu-3"]) == {"gpu-1": f"http://127.0.0.9:{first.port}"}
    finally:
        await first.stop()
        await second.stop()


async def test_an_exporter_pod_replaced_at_a_new_address_is_followed_there(
    make_adapter: AdapterFactory, cluster: Cluster
) -> None:
    """A rolling update replaces gpu-1's exporter pod by one at another IP. The HPA's answers come from the pod figure
    index, which does not ask the locator (see adapter/sources/direct.py): they serve the old exporter's figures while
    it answers, and the new exporter's once the old one is gone, never nothing in between for long."""
    old = SimulatedNode("gpu-1", host="127.0.0.2")
    await old.start()
    new = SimulatedNode("gpu-1", host="127.0.0.4", port=old.port)
    await new.start()
    try:
        old.set_pod("ml", "infer-a", [Gpu(utilization=11.0)])
        new.set_pod("ml", "infer-a", [Gpu(utilization=44.0)])
        kube = cluster.kube
        kube.put_pod("gpu-pulse", "exporter-1", node="gpu-1", labels=EXPORTER_LABELS, pod_ip="127.0.0.2")
        await eventually(lambda: cluster.pods.get("gpu-pulse", "exporter-1") is not None, "the exporter pod is cached")
        locator = PodExporters(cluster.pods, parse_selector("app.kubernetes.io/name=gpu-pulse-exporter"), old.port)
        client = await make_adapter(locator=locator)
        for _ in range(3):  # the first answer opens the node's feed, the next ones come from the index
            assert parse_quantity((await served(client))["infer-a"]["value"]) == Decimal(11)
        kube.put_pod("gpu-pulse", "exporter-1", node="gpu-1", labels=EXPORTER_LABELS, pod_ip="127.0.0.4")
        await eventually(lambda: cluster.pods.get("gpu-pulse", "exporter-1").pod_ip == "127.0.0.4", "moved")  # type: ignore[union-attr]
        await old.stop()  # the old pod's exporter goes away
        deadline = time.monotonic() + 10
        while (value := (await served(client)).get("infer-a")) is None or parse_quantity(value["value"]) != 44:
            assert value is None or parse_quantity(value["value"]) == Decimal(11)
            assert time.monotonic() < deadline, "the new exporter's figures are never served"
            await asyncio.sleep(0.02)
        assert new.requests == 1 and old.requests == 1  # one stream each
    finally:
        await old.stop()
        await new.stop()


async def test_pod_values_leave_out_what_samples_leave_out(cluster: Cluster) -> None:
    """The HPA's pods answers (`pod_values`) and every other answer (`samples`) see the same fresh figures: a pod
    whose figures are too old, that is not scheduled, or whose node has no exporter has neither."""
    clock = ManualClock(time.time())
    for node in cluster.nodes.values():
        node.clock = clock.time
    source = direct(cluster, clock, max_age=3.0)
    await source.start()
    try:
        metric = default_metrics_config().custom("gpu_utilization")
        assert metric is not None
        pods = cluster.pods.pods_in_namespace("ml")
        assert [p.name for p in pods] == ["infer-a", "infer-b", "infer-pending", "train-0", "web-0"]
        assert [v is not None for v in await source.pod_values(metric, pods)] == [True, True, False, True, False]
        cluster.nodes["gpu-1"].freeze()
        clock.advance(3.5)  # gpu-1's figures grow too old; gpu-2 goes on sampling
        await cluster.next_documents()
        samples = await source.samples(metric, pods)
        values = await source.pod_values(metric, pods)
        assert set(samples) == {("ml", "infer-b")}
        assert values == [None, pod_value(metric, samples[("ml", "infer-b")]), None, None, None]
        assert values[1] is not None and values[1].value == Decimal("50.25")  # the mean of its two GPUs
    finally:
        await source.close()


async def test_workload_values_leave_out_stale_pods(make_adapter: AdapterFactory, cluster: Cluster) -> None:
    clock = ManualClock(time.time())
    for node in cluster.nodes.values():
        node.clock = clock.time
    client = await make_adapter(source=direct(cluster, clock, max_age=3.0))
    path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/deployments.apps/infer/gpu_utilization"
    mean_of_three_gpus = Decimal("60.167")  # (80 + 40 + 60.5) / 3, served to the milli-unit the HPA reads
    assert parse_quantity((await served(client, path))["infer"]["value"]) == mean_of_three_gpus
    cluster.nodes["gpu-1"].freeze()
    clock.advance(3.5)
    await cluster.next_documents()
    assert parse_quantity((await served(client, path))["infer"]["value"]) == Decimal("50.25")  # infer-b's GPUs only
