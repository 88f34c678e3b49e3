"""The poll loop on the real pipeline (simulated GPUs -> pynvml -> NvmlCollector): one immutable Published per cycle,
swapped atomically; failures counted and survived; readiness; drift-free scheduling; a graceful stop."""

from __future__ import annotations

import gzip
import json
import math
import threading
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from exporter.attribution.pods_builder import PodsDocumentBuilder
from exporter.catalogue import Dialect
from exporter.collection import Attribution, DeviceCollection, HistoryPoint
from exporter.exposition import ExpositionRenderer
from exporter.loop import PollLoop, Published, Readiness, next_tick
from exporter.nvml import NvmlCollector
from exporter.pods_answers import SerializedPods
from exporter.snapshot import ProcessVisibility, Snapshot
from simulation import Simulator, install
from tests.support.clocks import ManualClock
from tests.support.snapshots import simulated_node
from toolkit.pods_contract import ContainerView, DeviceFigures, NodePods, PodView, parse_node_pods


class DefectiveCollector:
    """The real collector, made to raise on chosen cycles: a defect the loop must survive (NVML faults never raise)."""

    def __init__(self, inner: NvmlCollector, fail_on: set[int]) -> None:
        self.inner = inner
        self.fail_on = fail_on
        self.calls = 0

    def start(self) -> None:
        self.inner.start()

    def collect(self) -> DeviceCollection:
        self.calls += 1
        if self.calls in self.fail_on:
            raise RuntimeError(f"injected defect in cycle {self.calls}")
        return self.inner.collect()

    def rediscover(self) -> None:
        self.inner.rediscover()

    def history(self, uuid: str, seconds: float) -> tuple[HistoryPoint, ...]:
        return self.inner.history(uuid, seconds)

    def close(self) -> None:
        self.inner.close()


def _sample(text: bytes, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    raise AssertionError(f"{name} {labels} not found")


def test_one_cycle_publishes_everything_a_request_can_ask_for() -> None:
    with simulated_node("h100x8", pods_view=PodsDocumentBuilder(interval_seconds=1.0)) as node:
        assert node.loop.published is None
        published = node.loop.poll_once()
        assert published is not None and node.loop.published is published
        assert published.cycle == 1
        assert len([d for d in published.snapshot.devices if not d.is_mig]) == 8
        families = {f.name for f in text_string_to_metric_families(published.text.decode())}
        assert "DCGM_FI_DEV_GPU_UTIL" in families
        assert published.openmetrics.endswith(b"# EOF\n")
        assert sum(len(f.samples) for f in parse_openmetrics(published.openmetrics.decode())) > 200
        assert published.pods is not None
        document = json.loads(published.pods.full)
        assert document["node"] == "sim-node"
        assert document["interval_seconds"] == 1.0
        assert _sample(published.text, "gpu_pulse_snapshot_timestamp_seconds") == pytest.approx(
            published.snapshot.taken_at, rel=5e-15, abs=0
        )


def test_every_cycle_swaps_in_a_new_immutable_published() -> None:
    with simulated_node("h100x8") as node:
        first = node.loop.poll_once()
        assert first is not None
        first_text = first.text
        second = node.loop.poll_once()
        assert second is not None and second is not first
        assert (first.cycle, second.cycle) == (1, 2)
        assert first.text is first_text  # what a request already holds never changes under it
        with pytest.raises(AttributeError):
            first.text = b""  # type: ignore[misc]
        assert second.snapshot.taken_at >= first.snapshot.taken_at


def test_gzip_is_computed_once_per_snapshot_and_format() -> None:
    with simulated_node("h100x8") as node:
        published = node.loop.poll_once()
        assert published is not None
        assert published.gzipped_if_ready(False) is None
        compressed = published.gzipped(False)
        assert gzip.decompress(compressed) == published.text
        assert published.gzipped(False) is compressed
        assert published.gzipped_if_ready(False) is compressed
        assert gzip.decompress(published.gzipped(True)) == published.openmetrics
        assert len(compressed) < len(published.text) / 4


def test_a_collector_defect_is_counted_logged_and_survived(caplog: pytest.LogCaptureFixture) -> None:
    with simulated_node("h100x8") as node:
        defective = DefectiveCollector(node.collector, fail_on={2, 3})
        loop = PollLoop(defective, ExpositionRenderer(Dialect.DCGM), interval=1.0, node="sim-node")
        first = loop.poll_once()
        assert first is not None
        second = loop.poll_once()  # fails: the previous data, this cycle's statuses
        assert second is not None and second.snapshot.devices == first.snapshot.devices
        assert second.snapshot.taken_at == first.snapshot.taken_at  # the data is as old as it is
        assert _sample(second.text, "gpu_pulse_collector_success", collector="poll") == 0
        assert _sample(second.text, "gpu_pulse_collector_errors_total", collector="poll") == 1
        assert "injected defect in cycle 2" in loop.readiness().reason or loop.readiness().ready
        third = loop.poll_once()
        assert third is not None
        assert _sample(third.text, "gpu_pulse_collector_errors_total", collector="poll") == 2
        fourth = loop.poll_once()  # recovered
        assert fourth is not None and fourth.snapshot.taken_at > first.snapshot.taken_at
        assert _sample(fourth.text, "gpu_pulse_collector_success", collector="poll") == 1
        assert _sample(fourth.text, "gpu_pulse_collector_errors_total", collector="poll") == 2
    failures = [r for r in caplog.records if "poll cycle failed" in r.getMessage()]
    assert failures, "the failure is logged"
    assert len([r for r in failures if r.levelname == "ERROR"]) == 1, "a repeated failure is logged once at error"


def test_a_failing_pods_builder_keeps_the_previous_document() -> None:
    calls = {"n": 0}
    builder = PodsDocumentBuilder(interval_seconds=1.0)

    def flaky(snapshot: Snapshot) -> NodePods:
        calls["n"] += 1
        if calls["n"] == 2:
            raise ValueError("injected")
        return builder(snapshot)

    with simulated_node("h100x8", pods_view=flaky) as node:
        first = node.loop.poll_once()
        second = node.loop.poll_once()
        assert first is not None and second is not None
        assert second.pods is first.pods
        third = node.loop.poll_once()
        assert third is not None
        assert _sample(third.text, "gpu_pulse_collector_errors_total", collector="pods") == 1


def test_readiness_follows_the_age_of_the_data() -> None:
    clock = ManualClock()
    with simulated_node("h100x8", interval=2.0, clock=clock) as node:
        readiness = node.loop.readiness()
        assert not readiness.ready and "no snapshot yet" in readiness.reason
        node.loop.poll_once()
        assert node.loop.readiness().ready
        clock.now += 5.9
        assert node.loop.readiness().ready
        clock.now += 0.2  # 6.1 s: older than 3 intervals of 2 s
        readiness = node.loop.readiness()
        assert not readiness.ready and "6.1 s old" in readiness.reason and "6 s" in readiness.reason
        node.loop.poll_once()
        assert node.loop.readiness().ready


def test_the_worker_thread_polls_until_stopped() -> None:
    with simulated_node("h100x8", interval=0.05) as node:
        published = threading.Event()
        node.loop.start()
        with pytest.raises(RuntimeError):
            node.loop.start()
        for _ in range(200):
            current = node.loop.published
            if current is not None and current.cycle >= 3:
                published.set()
                break
            threading.Event().wait(0.02)
        assert published.is_set()
        node.loop.stop()
        assert not node.loop.running
        stopped_at = node.loop.published
        threading.Event().wait(0.15)
        assert node.loop.published is stopped_at  # no cycle after stop()


@given(
    st.floats(-1e6, 1e6),
    st.floats(0, 1e4),
    st.floats(1e-3, 1e3),
)
def test_next_tick_stays_on_the_grid_and_in_the_future(deadline: float, elapsed: float, interval: float) -> None:
    now = deadline + elapsed
    tick, missed = next_tick(deadline, now, interval)
    assert tick > now
    steps = (tick - deadline) / interval
    assert math.isclose(steps, round(steps), abs_tol=1e-6 * max(1.0, steps))
    assert round(steps) == missed + 1
    assert tick - interval <= now + 1e-9 * max(1.0, abs(now))  # the first tick after now, not a later one


def test_next_tick_examples() -> None:
    assert next_tick(10.0, 10.3, 1.0) == (11.0, 0)  # on time
    assert next_tick(10.0, 12.5, 1.0) == (13.0, 2)  # overran: 11 and 12 skipped


def _document() -> NodePods:
    def pod(namespace: str, name: str) -> PodView:
        figures = DeviceFigures(uuid="GPU-1", gpu=0, gpu_uuid="GPU-1", model="H100", share="exclusive")
        return PodView(
            namespace=namespace,
            name=name,
            containers=(ContainerView(name="main", devices=(figures,)),),
            sampled_at=datetime(2026, 1, 1, tzinfo=UTC),
            window_seconds=60,
        )

    return NodePods(
        node="n1",
        generated_at=datetime(2026, 1, 1, tzinfo=UTC),
        interval_seconds=1,
        kubelet_up=True,
        pods=(pod("ml", "a"), pod("web", "b"), pod("ml", "c")),
    )


def test_pods_document_per_namespace() -> None:
    document = SerializedPods.of(_document())
    assert [p["name"] for p in json.loads(document.for_namespace(None))["pods"]] == ["a", "b", "c"]
    assert [p["name"] for p in json.loads(document.for_namespace("ml"))["pods"]] == ["a", "c"]
    other = json.loads(document.for_namespace("nothing-here"))
    assert other["pods"] == [] and other["node"] == "n1" and other["kubelet_up"] is True
    assert parse_node_pods(document.for_namespace("web")).pods[0].name == "b"
    assert parse_node_pods(document.for_namespace(None)) == _document()  # the joins lose nothing


class _FixedAttribution:
    """A pod side whose answer is given: what the loop does with it is under test."""

    def __init__(self, attribution: Attribution) -> None:
        self.attribution = attribution

    def start(self) -> None:
        """Nothing runs."""

    def attribute(self, collection: DeviceCollection) -> Attribution:
        return self.attribution

    def close(self) -> None:
        """Nothing runs."""


def _one_poll_with(attribution: Attribution) -> tuple[Published | None, Readiness]:
    """One poll of h100x8 with this attribution: what it published, and the loop's readiness after it."""
    with install(Simulator("h100x8")):
        collector = NvmlCollector()
        collector.start()
        try:
            renderer = ExpositionRenderer(Dialect.PROMETHEUS, version="test")
            loop = PollLoop(collector, renderer, interval=1.0, node="n", attributor=_FixedAttribution(attribution))
            return loop.poll_once(), loop.readiness()
        finally:
            collector.close()


@pytest.mark.parametrize("visible", [True, False])
def test_process_visibility_shows_in_a_self_metric_and_in_readiness(visible: bool) -> None:
    reason = "none of the 8 GPU process(es) NVML lists is in the proc root"
    attribution = Attribution((), True, 1.0, process_visibility=ProcessVisibility(visible, reason))
    published, readiness = _one_poll_with(attribution)
    assert published is not None
    assert _sample(published.text, "gpu_pulse_process_visibility") == (1.0 if visible else 0.0)
    assert readiness.ready, "degraded, still serving"
    assert (reason in readiness.reason) is not visible


@pytest.mark.parametrize(
    ("attribution", "words"),
    [
        (Attribution((), True, 2.0), None),
        (
            Attribution((), False, None, kubelet_error="socket /k/kubelet.sock does not exist"),
            "kubelet pod-resources unavailable (socket /k/kubelet.sock does not exist): no pod mapping yet",
        ),
        (
            Attribution((), False, 42.0, kubelet_error="List failed: UNAVAILABLE"),
            "(List failed: UNAVAILABLE): keeping the last pod mapping (42 s old) for now",
        ),
    ],
)
def test_a_kubelet_that_cannot_be_asked_leaves_it_ready_and_says_why(
    attribution: Attribution, words: str | None
) -> None:
    published, readiness = _one_poll_with(attribution)
    assert published is not None and readiness.ready
    assert _sample(published.text, "gpu_pulse_kubelet_up") == (1.0 if attribution.kubelet_up else 0.0)
    if words is None:
        assert "kubelet" not in readiness.reason
    else:
        assert words in readiness.reason, readiness.reason
