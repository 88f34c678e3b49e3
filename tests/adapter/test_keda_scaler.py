"""KEDA's external scaler API over gRPC, on the simulated cluster (tests.adapter.simcluster), driven by a client that
owes nothing to the adapter's stubs (tests.support.keda): the spec, the sum KEDA's HPA divides, activity with
hysteresis, pushed activity, typed errors and the bounds."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from adapter.keda.activity import Hysteresis
from adapter.keda.followed_workloads import ActivityBoard, BoardFullError
from adapter.keda.selfmetrics import KedaMetrics
from adapter.keda.servicer import ExternalScaler
from adapter.keda.serving import ExternalScalerServer
from adapter.keda.trigger import parse_trigger
from adapter.keda.workload import WorkloadReader
from adapter.metrics_config import default_metrics_config
from adapter.quantity import parse_quantity
from adapter.sources.direct import DirectSource
from adapter.sources.exporters import StaticExporters
from adapter.sources.metricsource import MetricSource
from adapter.sources.nodefeeds import NodeFeeds
from tests.adapter.simcluster import AdapterFactory, Cluster
from tests.adapter.simnodes import Gpu, engine
from tests.support import keda
from tests.support.clocks import ManualClock
from tests.support.waiting import eventually
from toolkit.settings import ListenAddress

INFER = {"metric": "gpu_utilization", "podSelector": "app=infer", "target": "60"}


@dataclass
class Scaler:
    client: keda.ScalerClient
    board: ActivityBoard
    clock: ManualClock
    registry: CollectorRegistry
    source: MetricSource
    server: ExternalScalerServer

    async def observe(self, seconds: float = 0.0) -> None:
        """Move the activity clock on, then observe every followed workload once."""
        self.clock.advance(seconds)
        await self.board.observe_all()

    def calls(self, method: str, code: str) -> float:
        value = self.registry.get_sample_value(
            "gpu_pulse_adapter_keda_call_duration_seconds_count", {"method": method, "code": code}
        )
        return value or 0.0


ScalerFactory = Callable[..., Awaitable[Scaler]]


@pytest.fixture
async def make_scaler(cluster: Cluster) -> AsyncIterator[ScalerFactory]:
    made: list[tuple[ExternalScalerServer, grpc.aio.Channel, MetricSource]] = []

    async def make(
        *,
        source: MetricSource | None = None,
        hysteresis: Hysteresis | None = None,
        max_streams: int = 100,
        call_timeout: float = 5.0,
        capacity: int = 100,
    ) -> Scaler:
        if source is None:
            source = DirectSource(cluster.locator(), NodeFeeds(timeout=1.0))
        await source.start()
        clock = ManualClock()
        registry = CollectorRegistry()
        metrics = KedaMetrics(registry)
        reader = WorkloadReader(default_metrics_config(), cluster.pods, source)
        board = ActivityBoard(
            reader,
            hysteresis or Hysteresis(activate_after=0, deactivate_after=30),
            interval=3600,  # the tests observe by hand (Scaler.observe)
            clock=clock,
            capacity=capacity,
            on_change=metrics.activity_changed,
        )
        servicer = ExternalScaler(
            reader, board, metrics, call_timeout=call_timeout, max_streams=max_streams, registry=registry
        )
        server = ExternalScalerServer(servicer, ListenAddress("127.0.0.1", 0), max_streams=max_streams)
        await server.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        made.append((server, channel, source))
        return Scaler(keda.ScalerClient.on(channel), board, clock, registry, source, server)

    yield make
    for server, channel, source in made:
        await channel.close()
        await server.stop(grace=0.5)
        await source.close()


def ref(metadata: dict[str, str] | None = None, namespace: str = "ml") -> Any:
    return keda.scaled_object(namespace, INFER if metadata is None else metadata)


async def refused(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await call
    return failure.value


# ---- GetMetricSpec and GetMetrics ------------------------------------------------------------------------------------


async def test_metric_spec_is_the_trigger_metric_with_its_target(make_scaler: ScalerFactory) -> None:
    scaler = await make_scaler()
    answer = await scaler.client.get_metric_spec(ref(INFER | {"target": "62.5"}))
    (spec,) = answer.metricSpecs
    assert spec.metricName == "gpu_utilization"
    assert spec.targetSizeFloat == 62.5
    assert spec.targetSize == 0, "KEDA reads the deprecated integer only when the float is 0"
    memory = await scaler.client.get_metric_spec(ref(INFER | {"metric": "gpu_memory_used_bytes", "target": "40Gi"}))
    assert memory.metricSpecs[0].targetSizeFloat == 40 * 2**30


async def test_metrics_are_the_sum_of_what_the_custom_metrics_api_serves_for_the_same_pods(
    make_scaler: ScalerFactory, make_adapter: AdapterFactory
) -> None:
    scaler = await make_scaler()
    http = await make_adapter(source=scaler.source)  # one source: the same figures at the same moment
    for metric in ("gpu_utilization", "gpu_memory_used_bytes", "gpu_power_watts"):
        response = await http.get(
            f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/{metric}?labelSelector=app%3Dinfer"
        )
        items = (await response.json())["items"]
        served = sum(parse_quantity(i["value"]) for i in items)
        answer = await scaler.client.get_metrics(keda.metrics_request("ml", INFER | {"metric": metric}, metric))
        (value,) = answer.metricValues
        assert value.metricName == metric
        assert value.metricValueFloat == float(served), metric
        assert value.metricValue == 0
    # infer-a 80 + infer-b (40 + 60.5) / 2: the pending pod has no node and no figure
    answer = await scaler.client.get_metrics(keda.metrics_request("ml", INFER, "gpu_utilization"))
    assert answer.metricValues[0].metricValueFloat == 130.25


async def test_a_trigger_on_the_serving_engines_queue_sums_the_ready_pods_queues(
    make_scaler: ScalerFactory, cluster: Cluster
) -> None:
    cluster.nodes["gpu-1"].set_inference("ml", "infer-a", engine(queued=3.0))
    cluster.nodes["gpu-2"].set_inference("ml", "infer-b", engine(queued=5.0))
    cluster.nodes["gpu-1"].set_inference("ml", "train-0", engine(queued=40.0, state="warming"))
    scaler = await make_scaler()
    trigger = INFER | {"metric": "inference_queued_requests", "target": "2"}
    answer = await scaler.client.get_metrics(keda.metrics_request("ml", trigger, "inference_queued_requests"))
    assert answer.metricValues[0].metricValueFloat == 8.0  # KEDA's HPA divides it by the target: 4 replicas
    everything = trigger | {"podSelector": "app in (infer, train)"}
    answer = await scaler.client.get_metrics(keda.metrics_request("ml", everything, "inference_queued_requests"))
    assert answer.metricValues[0].metricValueFloat == 8.0  # train-0's engine is warming: left out


async def test_no_selected_pod_is_a_sum_of_zero(make_scaler: ScalerFactory) -> None:
    scaler = await make_scaler()
    answer = await scaler.client.get_metrics(keda.metrics_request("ml", INFER | {"podSelector": "app=gone"}, ""))
    assert answer.metricValues[0].metricValueFloat == 0.0


async def test_pods_whose_figures_aged_past_max_age_are_unavailable_never_stale(
    make_scaler: ScalerFactory, cluster: Cluster
) -> None:
    clock = ManualClock(time.time())
    for node in cluster.nodes.values():
        node.clock = clock.time
    cache = NodeFeeds(clock=clock.monotonic, wall_clock=clock.time)
    scaler = await make_scaler(source=DirectSource(cluster.locator(), cache, max_age=3.0, clock=clock.time))
    request = keda.metrics_request("ml", INFER, "gpu_utilization")
    assert (await scaler.client.get_metrics(request)).metricValues[0].metricValueFloat == 130.25
    cluster.nodes["gpu-1"].freeze()  # infer-a's exporter stops sampling: its figure ages, infer-b's does not
    clock.advance(3.5)
    await cluster.next_documents()
    assert (await scaler.client.get_metrics(request)).metricValues[0].metricValueFloat == 50.25
    cluster.nodes["gpu-2"].freeze()
    clock.advance(3.5)
    await cluster.next_documents()
    failure = await refused(scaler.client.get_metrics(request))
    assert failure.code() is grpc.StatusCode.UNAVAILABLE
    assert "none of the 3 pods app=infer selects in ml has a fresh figure of gpu_utilization" in failure.details()


async def test_no_exporter_answering_is_unavailable(make_scaler: ScalerFactory) -> None:
    dead = StaticExporters({"gpu-1": "http://127.0.0.1:1", "gpu-2": "http://127.0.0.1:1"})
    cache = NodeFeeds(timeout=0.5)
    scaler = await make_scaler(source=DirectSource(dead, cache))
    failure = await refused(scaler.client.get_metrics(keda.metrics_request("ml", INFER, "")))
    assert failure.code() is grpc.StatusCode.UNAVAILABLE and "no exporter answered" in failure.details()
    assert scaler.calls("GetMetrics", "UNAVAILABLE") == 1


async def test_a_source_slower_than_the_call_deadline_is_unavailable(
    make_scaler: ScalerFactory, cluster: Cluster
) -> None:
    for node in cluster.nodes.values():
        node.delay = 3.0
    scaler = await make_scaler(call_timeout=0.3)
    failure = await refused(scaler.client.get_metrics(keda.metrics_request("ml", INFER, "")))
    assert failure.code() is grpc.StatusCode.UNAVAILABLE
    assert "no answer within 0.3 s (--keda-call-timeout)" in failure.details()


# ---- typed errors ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "key"),
    [
        ({"podSelector": "app=infer", "target": "60"}, "metric"),
        ({"metric": "gpu_utilization", "target": "60"}, "podSelector"),
        ({"metric": "gpu_utilization", "podSelector": "app=infer"}, "target"),
        (INFER | {"target": "0"}, "target"),
        (INFER | {"target": "sixty"}, "target"),
        (INFER | {"podSelector": "app in (a"}, "podSelector"),
        (INFER | {"activationTarget": "-1"}, "activationTarget"),
        (INFER | {"activationTreshold": "5"}, "activationTreshold"),
        (INFER | {"targetFromEnv": "60"}, "targetFromEnv"),
    ],
)
async def test_malformed_metadata_is_invalid_argument_naming_the_key(
    make_scaler: ScalerFactory, metadata: dict[str, str], key: str
) -> None:
    scaler = await make_scaler()
    for call in (
        scaler.client.get_metric_spec(ref(metadata)),
        scaler.client.get_metrics(keda.metrics_request("ml", metadata, "")),
        scaler.client.is_active(ref(metadata)),
    ):
        failure = await refused(call)
        assert failure.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert failure.details().startswith(f"scalerMetadata.{key}: "), failure.details()
    stream = scaler.client.stream_is_active(ref(metadata))
    failure = await refused(stream.read())
    assert failure.code() is grpc.StatusCode.INVALID_ARGUMENT and key in failure.details()


async def test_kedas_own_keys_and_from_env_keys_are_accepted(make_scaler: ScalerFactory) -> None:
    scaler = await make_scaler()
    metadata = {
        "scalerAddress": "gpu-pulse-adapter.gpu-pulse.svc:9443",
        "enableTLS": "true",
        "metric": "gpu_utilization",
        "podSelectorFromEnv": "app=infer",  # KEDA sends the variable's value under the key it was given as
        "target": "60",
    }
    answer = await scaler.client.get_metrics(keda.metrics_request("ml", metadata, "gpu_utilization"))
    assert answer.metricValues[0].metricValueFloat == 130.25


async def test_an_unknown_metric_is_not_found(make_scaler: ScalerFactory) -> None:
    scaler = await make_scaler()
    for call in (
        scaler.client.get_metric_spec(ref(INFER | {"metric": "gpu_temperature"})),
        scaler.client.get_metrics(keda.metrics_request("ml", INFER | {"metric": "gpu_temperature"}, "")),
        scaler.client.is_active(ref(INFER | {"metric": "namespace_gpu_utilization"})),  # external, not a pod metric
    ):
        failure = await refused(call)
        assert failure.code() is grpc.StatusCode.NOT_FOUND
        assert "serves no pod metric" in failure.details() and "gpu_utilization" in failure.details()


async def test_a_missing_namespace_or_another_metric_name_is_invalid(make_scaler: ScalerFactory) -> None:
    scaler = await make_scaler()
    failure = await refused(scaler.client.get_metric_spec(ref(namespace="")))
    assert failure.code() is grpc.StatusCode.INVALID_ARGUMENT and failure.details().startswith("namespace: required")
    failure = await refused(scaler.client.get_metrics(keda.metrics_request("ml", INFER, "gpu_power_watts")))
    assert failure.code() is grpc.StatusCode.INVALID_ARGUMENT and failure.details().startswith("metricName: ")


async def test_stream_metric_spec_is_unimplemented_so_keda_keeps_to_get_metric_spec(make_scaler: ScalerFactory) -> None:
    scaler = await make_scaler()
    failure = await refused(scaler.client.stream_metric_spec(ref()).read())
    assert failure.code() is grpc.StatusCode.UNIMPLEMENTED


# ---- activity --------------------------------------------------------------------------------------------------------


def set_infer_a(cluster: Cluster, utilization: float) -> None:
    cluster.nodes["gpu-1"].set_pod("ml", "infer-a", [Gpu(utilization=utilization, memory_used=20 * 2**30)])


async def test_activity_follows_the_activation_target_with_hysteresis(
    make_scaler: ScalerFactory, cluster: Cluster
) -> None:
    scaler = await make_scaler(hysteresis=Hysteresis(activate_after=0, deactivate_after=30))
    trigger = ref(INFER | {"activationTarget": "70"})
    assert (await scaler.client.is_active(trigger)).result is True  # infer-a at 80 %
    set_infer_a(cluster, 10.0)  # every pod now at or below 70 %
    await cluster.next_documents()
    await scaler.observe(0)
    await scaler.observe(29)
    assert (await scaler.client.is_active(trigger)).result is True, "quiet for 29 s of 30: still active"
    set_infer_a(cluster, 71.0)  # one busy moment
    await cluster.next_documents()
    await scaler.observe(1)
    set_infer_a(cluster, 10.0)
    await cluster.next_documents()
    await scaler.observe(1)
    await scaler.observe(29)
    assert (await scaler.client.is_active(trigger)).result is True, "the busy moment started the countdown again"
    await scaler.observe(1)
    assert (await scaler.client.is_active(trigger)).result is False
    set_infer_a(cluster, 95.0)
    await cluster.next_documents()
    await scaler.observe(1)
    assert (await scaler.client.is_active(trigger)).result is True, "activated at once (activate_after 0)"
    assert scaler.registry.get_sample_value("gpu_pulse_adapter_keda_activity_changes_total", {"state": "inactive"}) == 1
    assert scaler.registry.get_sample_value("gpu_pulse_adapter_keda_activity_changes_total", {"state": "active"}) == 1


async def test_a_workload_without_pods_is_inactive_at_once(make_scaler: ScalerFactory) -> None:
    scaler = await make_scaler()
    assert (await scaler.client.is_active(ref(INFER | {"podSelector": "app=scaled-to-zero"}))).result is False


async def test_quiet_pods_seen_first_count_as_active_until_quiet_long_enough(
    make_scaler: ScalerFactory, cluster: Cluster
) -> None:
    """An adapter that restarts (or the replica KEDA reaches next) never declares a workload idle sooner than one
    that watched it all along."""
    scaler = await make_scaler(hysteresis=Hysteresis(activate_after=0, deactivate_after=30))
    trigger = ref(INFER | {"activationTarget": "95"})
    assert (await scaler.client.is_active(trigger)).result is True
    await scaler.observe(30)
    assert (await scaler.client.is_active(trigger)).result is False


async def test_activity_is_unavailable_until_a_figure_is_known(make_scaler: ScalerFactory) -> None:
    dead = StaticExporters({"gpu-1": "http://127.0.0.1:1", "gpu-2": "http://127.0.0.1:1"})
    cache = NodeFeeds(timeout=0.5)
    scaler = await make_scaler(source=DirectSource(dead, cache))
    failure = await refused(scaler.client.is_active(ref()))
    assert failure.code() is grpc.StatusCode.UNAVAILABLE and "no exporter answered" in failure.details()


async def test_stream_sends_the_state_at_once_then_each_change(make_scaler: ScalerFactory, cluster: Cluster) -> None:
    scaler = await make_scaler(hysteresis=Hysteresis(activate_after=0, deactivate_after=10))
    trigger = ref(INFER | {"activationTarget": "70"})
    stream = scaler.client.stream_is_active(trigger)
    assert (await stream.read()).result is True
    set_infer_a(cluster, 5.0)
    await cluster.next_documents()
    await scaler.observe(1)
    await scaler.observe(10)
    assert (await stream.read()).result is False
    assert (await scaler.client.is_active(trigger)).result is False, "the stream and IsActive share one state"
    await scaler.observe(5)  # no change: nothing is sent
    set_infer_a(cluster, 90.0)
    await cluster.next_documents()
    await scaler.observe(1)
    assert (await stream.read()).result is True
    assert scaler.registry.get_sample_value("gpu_pulse_adapter_keda_streams") == 1
    assert scaler.registry.get_sample_value("gpu_pulse_adapter_keda_workloads") == 1, "one workload, followed once"
    stream.cancel()
    await eventually(lambda: scaler.registry.get_sample_value("gpu_pulse_adapter_keda_streams") == 0, "stream gone")


async def test_stopping_the_server_ends_the_streams(make_scaler: ScalerFactory) -> None:
    scaler = await make_scaler()
    stream = scaler.client.stream_is_active(ref())
    assert (await stream.read()).result is True
    await scaler.server.stop(grace=5)
    assert await stream.read() is grpc.aio.EOF
    assert await stream.code() is grpc.StatusCode.OK


# ---- bounds ----------------------------------------------------------------------------------------------------------


async def test_streams_past_the_bound_are_refused(make_scaler: ScalerFactory) -> None:
    scaler = await make_scaler(max_streams=2)
    streams = [scaler.client.stream_is_active(ref()) for _ in range(2)]
    for stream in streams:
        assert (await stream.read()).result is True
    failure = await refused(scaler.client.stream_is_active(ref()).read())
    assert failure.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and "--keda-max-streams" in failure.details()
    assert (await scaler.client.is_active(ref())).result is True, "unary calls still pass"
    streams[0].cancel()
    await eventually(lambda: scaler.registry.get_sample_value("gpu_pulse_adapter_keda_streams") == 1, "one closed")
    third = scaler.client.stream_is_active(ref())
    assert (await third.read()).result is True


async def test_workloads_followed_past_the_bound_are_refused(make_scaler: ScalerFactory) -> None:
    scaler = await make_scaler(capacity=1)
    assert (await scaler.client.is_active(ref())).result is True
    assert (await scaler.client.is_active(ref())).result is True  # asked again: KEDA's, out of a newcomer's reach
    failure = await refused(scaler.client.is_active(ref(INFER | {"activationTarget": "1"})))
    assert failure.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    # a stream is refused with the same status, not UNKNOWN and a traceback (issue 42)
    stream = scaler.client.stream_is_active(ref(INFER | {"activationTarget": "2"}))
    failure = await refused(stream.read())
    assert failure.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and "already following 1" in failure.details()


async def test_a_flood_of_made_up_triggers_displaces_only_its_own_kind(make_scaler: ScalerFactory) -> None:
    """One caller filled all 10,000 places for 15 minutes and KEDA's new triggers were refused (issue 42): triggers
    asked about once make room for new ones, and a workload KEDA asks about again or streams keeps its place."""
    scaler = await make_scaler(capacity=16)
    polled, streamed = ref(), ref(INFER | {"activationTarget": "0.5"})
    assert (await scaler.client.is_active(polled)).result is True
    stream = scaler.client.stream_is_active(streamed)
    assert (await stream.read()).result is True
    for number in range(40):  # made-up triggers, each asked once
        flood = ref(INFER | {"activationTarget": f"{number + 1}"})
        await scaler.client.is_active(flood)  # answered, never RESOURCE_EXHAUSTED
        if number == 2:
            assert (await scaler.client.is_active(polled)).result is True  # KEDA's next poll, amid the flood
    assert scaler.board.size == 8 and scaler.board.displaced >= 32  # one caller here: its share, half the places
    fresh = ref(INFER | {"activationTarget": "0.25"})  # a trigger KEDA asks about for the first time
    assert (await scaler.client.is_active(fresh)).result is True
    for activation in ("0", "0.5", "0.25"):
        assert scaler.board.follows("ml", parse_trigger(INFER | {"activationTarget": activation})), activation
    stream.cancel()


async def test_one_caller_fills_only_its_share_of_the_board(make_scaler: ScalerFactory) -> None:
    """A caller that asks about each made-up trigger twice (so that none is displaced as a passer-by's) took every
    place (issue 42, item 3): each caller's workloads hold at most half the places, so the workloads another caller
    (KEDA) asks about still find room."""
    scaler = await make_scaler(capacity=8)
    assert (await scaler.client.is_active(ref())).result is True  # over gRPC: the caller is the peer's address
    assert scaler.board.held_by("peer:ipv4:127.0.0.1") == 1
    flooder = "user:mallory"
    for number in range(20):
        trigger = parse_trigger(INFER | {"activationTarget": f"{number + 1}"})
        try:
            for _ in range(2):
                await scaler.board.is_active("ml", trigger, flooder)
        except BoardFullError as exc:
            assert number >= 4 and "for this caller" in str(exc)
    assert scaler.board.held_by(flooder) == 4
    for number in range(4):  # KEDA's triggers, new ones among them, each asked about twice
        trigger = parse_trigger(INFER | {"activationTarget": f"0.{number + 1}"})
        for _ in range(2):
            assert await scaler.board.is_active("ml", trigger, "user:keda-operator") is True
    assert scaler.board.held_by("user:keda-operator") == 4


async def test_an_oversized_message_is_refused(make_scaler: ScalerFactory) -> None:
    scaler = await make_scaler()
    failure = await refused(scaler.client.is_active(ref(INFER | {"scalerAddress": "x" * 100_000})))
    assert failure.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
