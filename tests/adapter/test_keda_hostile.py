"""Hostile clients of the KEDA port (issue 42), written in the test: streams that send their headers and never their
message, connections that never speak. KEDA's own calls must get through meanwhile, and the port must let go."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import grpc
from prometheus_client import CollectorRegistry

from adapter.keda.activity import Hysteresis
from adapter.keda.admission import CallAdmission
from adapter.keda.followed_workloads import ActivityBoard
from adapter.keda.selfmetrics import KedaMetrics
from adapter.keda.servicer import ExternalScaler
from adapter.keda.serving import ExternalScalerServer, ScalerConnections
from adapter.keda.workload import WorkloadReader
from adapter.metrics_config import default_metrics_config
from adapter.sources.direct import DirectSource
from adapter.sources.nodefeeds import NodeFeeds
from tests.adapter.simcluster import Cluster
from tests.support import keda
from tests.support.waiting import eventually, patience
from toolkit.settings import ListenAddress

METADATA = {"metric": "gpu_utilization", "podSelector": "app=infer", "target": "60"}
IS_ACTIVE = "/externalscaler.ExternalScaler/IsActive"


def _servicer(cluster: Cluster, max_streams: int = 4) -> ExternalScaler:
    source = DirectSource(cluster.locator(), NodeFeeds(timeout=1.0))
    reader = WorkloadReader(default_metrics_config(), cluster.pods, source)
    return ExternalScaler(
        reader, ActivityBoard(reader, Hysteresis()), KedaMetrics(CollectorRegistry()), max_streams=max_streams
    )


async def _headers_only(hold: asyncio.Event) -> AsyncIterator[bytes]:
    """A request stream that sends its headers and never a message."""
    await hold.wait()
    yield b""  # pragma: no cover


async def test_streams_that_never_send_their_message_do_not_keep_kedas_calls_out(cluster: Cluster) -> None:
    admission = CallAdmission(request_seconds=1.0, max_waiting=32)
    server = ExternalScalerServer(_servicer(cluster), ListenAddress("127.0.0.1", 0), max_streams=4, admission=admission)
    await server.start()
    hold = asyncio.Event()
    try:
        own = [("grpc.use_local_subchannel_pool", 1)]  # a connection of its own each, as separate clients have
        async with contextlib.AsyncExitStack() as channels:
            strangers = [await channels.enter_async_context(grpc.aio.insecure_channel(server.address, options=own))
                         for _ in range(3)]  # fmt: skip
            kedas = await channels.enter_async_context(grpc.aio.insecure_channel(server.address, options=own))
            calls = [  # more than every slot the port had (260), over three connections
                stranger.stream_unary(IS_ACTIVE, request_serializer=bytes, response_deserializer=bytes)(
                    _headers_only(hold)
                )
                for stranger in strangers
                for _ in range(100)
            ]
            await asyncio.gather(*(call.wait_for_connection() for call in calls))

            def every_stream_started() -> bool:  # before the fix: 260 held a slot each, the rest and KEDA's refused
                stats = admission.stats()
                return stats.waiting + stats.displaced + stats.request_timeouts == 300

            await eventually(every_stream_started, "the port took every silent stream", timeout=patience(10))
            client = keda.ScalerClient.on(kedas)
            for _ in range(3):  # while the strangers' streams are held, and as they are ended
                spec = await client.get_metric_spec(keda.scaled_object("ml", METADATA), timeout=patience(5))
                assert spec.metricSpecs[0].metricName == "gpu_utilization"
                # a stream's call reaches the servicer too (which answers this method UNIMPLEMENTED)
                stream = client.stream_metric_spec(keda.scaled_object("ml", METADATA), timeout=patience(5))
                assert await stream.code() is grpc.StatusCode.UNIMPLEMENTED
            ended = await asyncio.wait_for(asyncio.gather(*(call.code() for call in calls)), patience(15))
            # each silent stream was ended by the port: past its deadline, or to make room for a newer one
            assert set(ended) <= {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
            stats = admission.stats()
            assert stats.request_timeouts + stats.displaced == 300 and stats.waiting == 0
    finally:
        hold.set()
        await server.stop(grace=0.5)


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server closed the connection (its SETTINGS frame, if any, read and dropped)."""
    while True:
        try:
            if not sock.recv(65536):
                return True
        except BlockingIOError:
            return False
        except OSError:  # reset
            return True


async def test_silent_connections_are_bounded_and_closed(cluster: Cluster) -> None:
    limits = ScalerConnections(max_connections=8, handshake_seconds=0.5, idle_seconds=60)
    server = ExternalScalerServer(_servicer(cluster), ListenAddress("127.0.0.1", 0), connections=limits)
    await server.start()
    silent: list[socket.socket] = []
    try:
        for _ in range(20):
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.setblocking(False)
            silent.append(sock)
        # the 12 past the port's share are closed as they are accepted, the others when the handshake bound passes
        await eventually(lambda: all(_closed_by_peer(sock) for sock in silent), "every silent connection closed",
                         timeout=patience(10))  # fmt: skip
        async with grpc.aio.insecure_channel(server.address) as kedas:
            spec = await keda.ScalerClient.on(kedas).get_metric_spec(keda.scaled_object("ml", METADATA), timeout=5)
            assert spec.metricSpecs[0].metricName == "gpu_utilization"
    finally:
        for sock in silent:
            sock.close()
        await server.stop(grace=0.5)
