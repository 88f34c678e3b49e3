"""Serving the external scaler: a grpc.aio server on the adapter's event loop, plaintext or TLS, bounded.

TLS serves the adapter's serving certificate (`--tls-cert-file`/`--tls-private-key-file`, or the self-signed one of
`--cert-dir`), re-read on the next handshake after either file changes (cert-manager renews in place), as the HTTP
side does (toolkit.tls). With a client CA, a client must present a certificate it signed (KEDA's `tlsClientCert` and
`tlsClientKey`), and one that does not is refused in the handshake.

Bounds: messages of at most `max_message_bytes` each way (a ScaledObjectRef is a few hundred bytes); a call holds
a slot only once its request message arrived, within seconds (keda/admission.py), then at most `max_streams`
StreamIsActive streams (the servicer refuses more) and `MAX_UNARY` unary calls in flight; keepalive pings find a
KEDA that went away without closing its streams.

Connections (`ScalerConnections`): the port holds at most `max_connections`, a share of the process's
`--max-connections` (grpc core's `grpc.max_allowed_incoming_connections` closes one more as it accepts it,
src/core/ext/transport/chttp2/server/chttp2_server.cc); a connection that has not finished its TLS handshake and
sent HTTP/2's preface and SETTINGS within `handshake_seconds` is closed ("Did not receive HTTP/2 settings before
handshake timeout", `grpc.server_handshake_timeout_ms`, 120 s unless set), and one without a call for
`idle_seconds` gets a GOAWAY (`grpc.max_connection_idle_ms`; KEDA's grpc-go client connects again at its next call).
The names and defaults: include/grpc/impl/channel_arg_names.h.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from adapter.keda.admission import MAX_UNARY, MAX_WAITING, CallAdmission, service_handler
from adapter.keda.proto import externalscaler_pb2 as pb
from adapter.keda.servicer import ExternalScaler
from toolkit.inputfiles import InputFileError, read_input_file
from toolkit.serving import ListenError
from toolkit.settings import ListenAddress
from toolkit.tls import TLSConfigError, reason, server_context

log = logging.getLogger(__name__)

LISTEN_FLAG = "--keda-listen"
CLIENT_CA_FLAG = "--keda-client-ca-file"
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


class _Certificates:
    """The serving pair (and client CA) as gRPC wants them, re-read when a file changes."""

    def __init__(self, tls: ScalerTls) -> None:
        self._tls = tls
        self._seen = self._stamp()
        self.initial = self._load()
        self.reloads = 0

    def _stamp(self) -> tuple[tuple[int, int, int], ...] | None:
        try:
            files = (self._tls.cert_file.stat(), self._tls.key_file.stat())
        except OSError:
            return None
        return tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in files)

    def _load(self) -> grpc.ServerCertificateConfiguration:
        """The files' pair, checked as the HTTP side checks it; TLSConfigError (one line) when it cannot serve."""
        server_context(self._tls.cert_file, self._tls.key_file)  # a pair OpenSSL refuses fails here, named
        try:
            cert = read_input_file(self._tls.cert_file, "--tls-cert-file")
            key = read_input_file(self._tls.key_file, "--tls-private-key-file")
            ca = read_input_file(self._tls.client_ca_file, CLIENT_CA_FLAG) if self._tls.client_ca_file else None
        except InputFileError as exc:
            raise TLSConfigError(str(exc)) from None
        if ca is not None:
            try:
                server_context(self._tls.cert_file, self._tls.key_file, client_ca_data=[ca])
            except TLSConfigError as exc:
                raise TLSConfigError(f"{CLIENT_CA_FLAG} {self._tls.client_ca_file}: {exc}") from None
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """For gRPC, at each handshake: a new configuration when the files changed and load, else None (keep)."""
        stamp = self._stamp()
        if stamp is None or stamp == self._seen:
            return None
        try:
            loaded = self._load()
        except (TLSConfigError, OSError) as exc:
            log.warning("the renewed serving certificate cannot be used yet for KEDA, keeping the current one: %s",
                        reason(exc))  # fmt: skip
            return None
        self._seen = stamp
        self.reloads += 1
        log.info("serving the renewed certificate %s to KEDA", self._tls.cert_file)
        return loaded


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
    ) -> None:
        self._servicer = servicer
        self._connections = connections or ScalerConnections()
        self.admission = admission or CallAdmission()
        self._listen = listen
        self._certificates = _Certificates(tls) if tls is not None else None  # TLSConfigError now, not at start
        self._require_client_certificates = tls is not None and tls.client_ca_file is not None
        self._max_streams = max_streams
        self._max_message_bytes = max_message_bytes
        self._server: grpc.aio.Server | None = None
        self.port = 0

    @property
    def tls(self) -> bool:
        return self._certificates is not None

    @property
    def address(self) -> str:
        host = f"[{self._listen.host}]" if ":" in self._listen.host else self._listen.host
        return f"{host}:{self.port}"

    async def start(self) -> None:
        """Serve on the listen address (port 0: an ephemeral one, then in `port`). ListenError naming --keda-listen."""
        connections = self._connections
        server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),  # a port in use is an error, not a second server sharing it
                ("grpc.max_receive_message_length", self._max_message_bytes),
                ("grpc.max_send_message_length", self._max_message_bytes),
                # one connection (KEDA's, which carries every stream) may hold every slot, and the calls waiting
                # for their message besides
                ("grpc.max_concurrent_streams", self._max_streams + MAX_UNARY + MAX_WAITING),
                ("grpc.keepalive_time_ms", KEEPALIVE_SECONDS * 1000),
                ("grpc.keepalive_timeout_ms", 20_000),
                ("grpc.max_allowed_incoming_connections", connections.max_connections),
                ("grpc.server_handshake_timeout_ms", max(1, round(connections.handshake_seconds * 1000))),
                ("grpc.max_connection_idle_ms", max(1, round(connections.idle_seconds * 1000))),
            ],
            # no maximum_concurrent_rpcs: grpc counts a call from its headers, so silent streams took the slots;
            # the admission counts calls from their message instead
        )
        server.add_generic_rpc_handlers((self._handler(),))
        host = f"[{self._listen.host}]" if ":" in self._listen.host else self._listen.host
        address = f"{host}:{self._listen.port}"
        try:
            if self._certificates is None:
                port = server.add_insecure_port(address)
            else:
                credentials = grpc.dynamic_ssl_server_credentials(
                    self._certificates.initial,
                    self._certificates.fetch,  # type: ignore[arg-type]  # None keeps the current pair (grpc docs)
                    require_client_authentication=self._require_client_certificates,
                )
                port = server.add_secure_port(address, credentials)
        except RuntimeError as exc:
            raise ListenError(f"{LISTEN_FLAG} {self._listen}: cannot listen: {reason(exc)}") from None
        if not port:
            raise ListenError(f"{LISTEN_FLAG} {self._listen}: cannot listen (in use, or not an address of this host)")
        await self._servicer.start()
        await server.start()
        self._server, self.port = server, port

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
            self._server = None
