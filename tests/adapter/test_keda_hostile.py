"""Hostile clients of the KEDA port (issue 42), written in the test: streams that send their headers and never their
message, connections that never speak, HTTP/2 floods (rapid reset, SETTINGS). KEDA's own calls must get through
meanwhile, and the port must let go."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import pytest
from prometheus_client import CollectorRegistry

from adapter.keda.activity import Hysteresis
from adapter.keda.admission import CallAdmission
from adapter.keda.followed_workloads import ActivityBoard
from adapter.keda.frames import SETTINGS, FrameLimits
from adapter.keda.selfmetrics import KedaMetrics
from adapter.keda.servicer import ExternalScaler
from adapter.keda.serving import ExternalScalerServer, ScalerConnections, ScalerTls
from adapter.keda.workload import WorkloadReader
from adapter.metrics_config import default_metrics_config
from adapter.sources.direct import DirectSource
from adapter.sources.nodefeeds import NodeFeeds
from tests.adapter.simcluster import Cluster
from tests.support import keda
from tests.support.clocks import ManualClock
from tests.support.waiting import eventually, patience
from toolkit.certs import CertificateAuthority
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


REQUEST_HEADERS = keda.request_headers("IsActive")


def _flood(
    port: int,
    frames: Callable[[h2.connection.H2Connection], bytes],
    rounds: int,
    tls: ssl.SSLContext | None = None,
) -> list[h2.events.Event]:
    """One HTTP/2 connection (over `tls` when given) that sends `rounds` times what `frames` writes, then reads until
    the server closes it; the events it read. Before the front, neither flood was ever cut off (issue 42)."""
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    events: list[h2.events.Event] = []
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
        if tls is not None:
            sock = stack.enter_context(tls.wrap_socket(sock, server_hostname="localhost"))
            assert sock.selected_alpn_protocol() == "h2"
        sock.sendall(connection.data_to_send())
        sock.settimeout(patience(10))
        with contextlib.suppress(OSError):  # the server closes the connection mid-flood
            for _ in range(rounds):
                sock.sendall(frames(connection))
        with contextlib.suppress(OSError):
            while data := sock.recv(65536):
                with contextlib.suppress(h2.exceptions.ProtocolError):
                    events += connection.receive_data(data)
    return events


def _rapid_reset(connection: h2.connection.H2Connection) -> bytes:
    stream = connection.get_next_available_stream_id()
    connection.send_headers(stream, REQUEST_HEADERS)
    connection.reset_stream(stream)
    return connection.data_to_send()


def _settings(connection: h2.connection.H2Connection) -> bytes:
    return (0).to_bytes(3, "big") + bytes((SETTINGS, 0)) + (0).to_bytes(4, "big")  # an empty SETTINGS frame


@pytest.mark.parametrize(("frames", "reason"), [(_rapid_reset, "stream resets"), (_settings, "SETTINGS frames")])
async def test_a_connection_that_floods_the_port_gets_goaway_and_is_closed(
    cluster: Cluster, frames: Callable[[h2.connection.H2Connection], bytes], reason: str
) -> None:
    servicer = _servicer(cluster)
    server = ExternalScalerServer(servicer, ListenAddress("127.0.0.1", 0))
    await server.start()
    try:
        events = await asyncio.to_thread(_flood, server.port, frames, 5000)
        goaways = [event for event in events if isinstance(event, h2.events.ConnectionTerminated)]
        assert goaways, f"no GOAWAY among {len(events)} events"
        assert goaways[-1].error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert goaways[-1].additional_data is not None and goaways[-1].additional_data.decode().startswith(reason)
        closed = server.front.stats.closed
        assert (closed["resets"], closed["settings"]) == ((1, 0) if frames is _rapid_reset else (0, 1))
        await eventually(lambda: server.front.connections == 0 and not servicer.peers, "the flood let go")
        async with grpc.aio.insecure_channel(server.address) as kedas:  # the port still answers KEDA
            spec = await keda.ScalerClient.on(kedas).get_metric_spec(keda.scaled_object("ml", METADATA), timeout=5)
            assert spec.metricSpecs[0].metricName == "gpu_utilization"
    finally:
        await server.stop(grace=0.5)


async def test_a_client_within_the_budgets_is_never_cut_off(cluster: Cluster) -> None:
    """Many calls on one connection, each opening and ending a stream, and resets at the refill rate: no GOAWAY."""
    clock = ManualClock()
    limits = FrameLimits(reset_burst=5, reset_rate=1.0, settings_burst=2, settings_rate=1.0)
    server = ExternalScalerServer(_servicer(cluster), ListenAddress("127.0.0.1", 0), frames=limits, clock=clock)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as kedas:
            client = keda.ScalerClient.on(kedas)
            for _ in range(50):
                spec = await client.get_metric_spec(keda.scaled_object("ml", METADATA), timeout=patience(5))
                assert spec.metricSpecs[0].metricName == "gpu_utilization"
            for _ in range(20):  # a call KEDA cancels resets its stream: one a second is within the rate
                clock.advance(1.0)
                call = client.stream_is_active(keda.scaled_object("ml", METADATA), timeout=patience(5))
                await asyncio.sleep(0.02)  # under way (a call cancelled before it started sends nothing)
                call.cancel()
            spec = await client.get_metric_spec(keda.scaled_object("ml", METADATA), timeout=patience(5))
            assert spec.metricSpecs[0].metricName == "gpu_utilization"
        assert (server.front.stats.closed["resets"], server.front.stats.closed["settings"]) == (0, 0)
    finally:
        await server.stop(grace=0.5)


async def test_a_flood_over_tls_from_a_certified_client_is_cut_off_too(cluster: Cluster, tmp_path: Path) -> None:
    """The chart's default port (TLS, client certificates required): the front reads the frames after TLS."""
    ca = CertificateAuthority.create("test-ca")
    cert, key = tmp_path / "serving.crt", tmp_path / "serving.key"
    ca.issue_server(["127.0.0.1", "localhost"], common_name="serving").write(cert, key)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    server = ExternalScalerServer(
        _servicer(cluster), ListenAddress("127.0.0.1", 0), tls=ScalerTls(cert, key, client_ca_file=ca_file)
    )
    await server.start()
    try:
        keda_operator = ca.issue_client("keda-operator")
        keda_operator.write(tmp_path / "keda.crt", tmp_path / "keda.key")
        client = ssl.create_default_context(cadata=ca.cert_pem.decode())
        client.load_cert_chain(tmp_path / "keda.crt", tmp_path / "keda.key")
        client.set_alpn_protocols(["h2"])
        events = await asyncio.to_thread(_flood, server.port, _rapid_reset, 5000, client)
        goaways = [event for event in events if isinstance(event, h2.events.ConnectionTerminated)]
        assert goaways and goaways[-1].error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert server.front.stats.closed["resets"] == 1
    finally:
        await server.stop(grace=0.5)


async def test_connections_that_are_not_http2_or_stall_in_tls_are_closed_before_grpc_hears_of_them(
    cluster: Cluster, tmp_path: Path
) -> None:
    ca = CertificateAuthority.create("test-ca")
    cert, key = tmp_path / "serving.crt", tmp_path / "serving.key"
    ca.issue_server(["127.0.0.1", "localhost"], common_name="serving").write(cert, key)
    limits = ScalerConnections(max_connections=8, handshake_seconds=0.5, idle_seconds=60)
    servicers = (_servicer(cluster), _servicer(cluster))
    plain = ExternalScalerServer(servicers[0], ListenAddress("127.0.0.1", 0), connections=limits)
    tls = ExternalScalerServer(
        servicers[1], ListenAddress("127.0.0.1", 0), connections=limits, tls=ScalerTls(cert, key)
    )
    await plain.start()
    await tls.start()
    try:
        http1 = socket.create_connection(("127.0.0.1", plain.port))
        http1.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # not the HTTP/2 preface: closed at once
        http1.setblocking(False)
        stalled = socket.create_connection(("127.0.0.1", tls.port))  # no ClientHello: closed at the bound
        stalled.setblocking(False)
        try:
            await eventually(lambda: _closed_by_peer(http1) and _closed_by_peer(stalled), "both closed",
                             timeout=patience(10))  # fmt: skip
        finally:
            http1.close()
            stalled.close()
        assert plain.front.stats.closed["handshake"] == 1 and tls.front.stats.closed["handshake"] == 1
        assert not servicers[0].peers and not servicers[1].peers  # gRPC never saw them
    finally:
        await plain.stop(grace=0.5)
        await tls.stop(grace=0.5)
