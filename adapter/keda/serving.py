"""Serving the external scaler: a grpc.aio server on the adapter's event loop, on loopback, behind the port's front.

The front (keda/front.py) holds `--keda-listen`: it ends TLS (the adapter's serving certificate,
`--tls-cert-file`/`--tls-private-key-file` or the self-signed one of `--cert-dir`, re-read before the next handshake
after either file changes, as cert-manager renews in place; with a client CA, a client must present a certificate it
signed, KEDA's `tlsClientCert` and `tlsClientKey`, and one that does not is refused in the handshake), bounds the
connections and what each may cost in HTTP/2 frames (keda/frames.py), and relays each to gRPC, which answers the calls.

Bounds: messages of at most `max_message_bytes` each way (a ScaledObjectRef is a few hundred bytes); a call holds
a slot only once its request message arrived, within seconds (keda/admission.py), then at most `max_streams`
StreamIsActive streams (the servicer refuses more) and `MAX_UNARY` unary calls in flight; keepalive pings find a
KEDA that went away without closing its streams.

Connections (`ScalerConnections`): the port holds at most `max_connections`, a share of the process's
`--max-connections`, the front closing one more as it accepts it; a connection that has not finished its TLS handshake
and sent HTTP/2's preface within `handshake_seconds` is closed by the front; one without a call for `idle_seconds`
gets gRPC's GOAWAY (`grpc.max_connection_idle_ms`; KEDA's grpc-go client connects again at its next call). gRPC's own
bounds (`grpc.max_allowed_incoming_connections`, `grpc.server_handshake_timeout_ms`) stand behind the front's.
The names and defaults: include/grpc/impl/channel_arg_names.h.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from adapter.keda.admission import MAX_UNARY, MAX_WAITING, CallAdmission, service_handler
from adapter.keda.frames import FrameLimits
from adapter.keda.front import DESCRIPTORS_PER_CONNECTION, FrontLimits, FrontTls, ScalerFront
from adapter.keda.proto import externalscaler_pb2 as pb
from adapter.keda.servicer import ExternalScaler
from toolkit.serving import ListenError
from toolkit.settings import ListenAddress
from toolkit.tls import reason

LISTEN_FLAG = "--keda-listen"
MAX_MESSAGE_BYTES = 64 * 1024
KEEPALIVE_SECONDS = 60


@dataclass(frozen=True, slots=True)
class ScalerConnections:
    """What the port's connections may hold (`--keda-max-connections`, `--header-read-timeout`, `--idle-timeout`)."""

    max_connections: int = 64
    handshake_seconds: float = 10.0
    idle_seconds: float = 60.0


@dataclass(frozen=True, slots=True)
class ScalerTls:
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None


class ExternalScalerServer:
    def __init__(
        self,
        servicer: ExternalScaler,
        listen: ListenAddress,
        *,
        tls: ScalerTls | None = None,
        max_streams: int = 1000,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        connections: ScalerConnections | None = None,
        admission: CallAdmission | None = None,
        frames: FrameLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._servicer = servicer
        self._connections = connections or ScalerConnections()
        self.admission = admission or CallAdmission()
        self._listen = listen
        self._tls = (
            FrontTls(tls.cert_file, tls.key_file, tls.client_ca_file) if tls is not None else None
        )  # TLSConfigError now, not at start
        self._max_streams = max_streams
        self._max_message_bytes = max_message_bytes
        self._server: grpc.aio.Server | None = None
        self._grpc_port = 0
        self.front = ScalerFront(
            lambda: self._grpc_port,
            servicer.peers,
            tls=self._tls,
            limits=FrontLimits(
                self._connections.max_connections, self._connections.handshake_seconds, frames or FrameLimits()
            ),
            clock=clock,
        )
        self.port = 0

    @property
    def tls(self) -> bool:
        return self._tls is not None

    @property
    def descriptors(self) -> int:
        """The most file descriptors the port's connections hold (keda/front.py: three each)."""
        return self._connections.max_connections * DESCRIPTORS_PER_CONNECTION

    @property
    def address(self) -> str:
        host = f"[{self._listen.host}]" if ":" in self._listen.host else self._listen.host
        return f"{host}:{self.port}"

    async def start(self) -> None:
        """Serve on the listen address (port 0: an ephemeral one, then in `port`). ListenError naming --keda-listen."""
        connections = self._connections
        server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", self._max_message_bytes),
                ("grpc.max_send_message_length", self._max_message_bytes),
                # one connection (KEDA's, which carries every stream) may hold every slot, and the calls waiting
                # for their message besides
                ("grpc.max_concurrent_streams", self._max_streams + MAX_UNARY + MAX_WAITING),
                ("grpc.keepalive_time_ms", KEEPALIVE_SECONDS * 1000),
                ("grpc.keepalive_timeout_ms", 20_000),
                # the front's connections, one for each of its clients: a second bound behind the front's own, with
                # room for those the front has closed and gRPC has not yet seen close
                ("grpc.max_allowed_incoming_connections", 2 * connections.max_connections),
                ("grpc.server_handshake_timeout_ms", max(1, round(connections.handshake_seconds * 1000))),
                ("grpc.max_connection_idle_ms", max(1, round(connections.idle_seconds * 1000))),
            ],
            # no maximum_concurrent_rpcs: grpc counts a call from its headers, so silent streams took the slots;
            # the admission counts calls from their message instead
        )
        server.add_generic_rpc_handlers((self._handler(),))
        try:
            grpc_port = server.add_insecure_port("127.0.0.1:0")  # loopback only, behind the front
        except RuntimeError as exc:
            raise ListenError(f"{LISTEN_FLAG} {self._listen}: cannot serve gRPC on loopback: {reason(exc)}") from None
        try:
            port = await self.front.start(self._listen.host, self._listen.port)
        except OSError as exc:
            raise ListenError(f"{LISTEN_FLAG} {self._listen}: cannot listen: {reason(exc)}") from None
        await self._servicer.start()
        await server.start()
        self._server, self._grpc_port, self.port = server, grpc_port, port

    def _handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        servicer = self._servicer
        return service_handler(
            "externalscaler.ExternalScaler",
            self.admission,
            unary={
                "IsActive": (servicer.IsActive, pb.ScaledObjectRef),
                "GetMetricSpec": (servicer.GetMetricSpec, pb.ScaledObjectRef),
                "GetMetrics": (servicer.GetMetrics, pb.GetMetricsRequest),
            },
            streams={
                "StreamIsActive": (servicer.StreamIsActive, pb.ScaledObjectRef),
                "StreamMetricSpec": (servicer.StreamMetricSpec, pb.ScaledObjectRef),
            },
        )

    async def stop(self, grace: float = 5.0) -> None:
        """End the streams (KEDA reopens them, on another replica), give calls in flight `grace` seconds, stop."""
        if self._server is not None:
            await self._servicer.close()
            await self._server.stop(grace)
            await self.front.stop()
            self._server = None
