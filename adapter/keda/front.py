"""The KEDA port as its clients meet it: an asyncio server that ends TLS, bounds each connection, and relays its
HTTP/2 to the gRPC server on loopback, frame by frame.

grpc core serves the calls but cannot be told to close a connection that floods it with stream resets or SETTINGS
frames (keda/frames.py); under TLS nobody but the TLS end sees the frames. So the front holds the port:

- it takes at most `max_connections` connections and closes one more as it accepts it;
- a connection must finish its TLS handshake (the adapter's serving certificate, re-read before each handshake when
  its files changed; with a client CA, a client certificate it signed is required) and send the HTTP/2 preface and
  its first frame's header within `handshake_seconds`, else it is closed before gRPC hears of it;
- then it gets a loopback connection to gRPC of its own, entered in the `PeerDirectory` (keda/callers.py) so that
  calls on it are known by the client's address and certificate;
- the client's frames are metered as they pass (keda/frames.py); past a budget the front sends GOAWAY
  `ENHANCE_YOUR_CALM` and closes both sides. gRPC's frames are passed whole, so the GOAWAY lands between two frames.

Each client connection costs three descriptors (its socket and both ends of its loopback connection): the adapter
reserves them from `--max-connections` (adapter/parts.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from adapter.keda.callers import Peer, PeerDirectory, peer_host
from adapter.keda.frames import (
    ENHANCE_YOUR_CALM,
    FRAME_HEADER_BYTES,
    PREFACE,
    Breach,
    FrameLimits,
    FrameMeter,
    complete_frames,
    goaway,
)
from toolkit.inputfiles import InputFileError, read_input_file
from toolkit.tls import TLSConfigError, files_stamp, server_context

log = logging.getLogger(__name__)

READ_BYTES = 64 * 1024
CLIENT_CA_FLAG = "--keda-client-ca-file"
CLOSE_GRACE_SECONDS = 1.0  # a closed connection's last bytes (a GOAWAY) may take this long to leave, then it is cut
DESCRIPTORS_PER_CONNECTION = 3


@dataclass(frozen=True, slots=True)
class FrontLimits:
    max_connections: int = 64
    handshake_seconds: float = 10.0
    frames: FrameLimits = field(default_factory=FrameLimits)


CLOSED_REASONS = ("over_limit", "handshake", "resets", "settings")


@dataclass(slots=True)
class FrontStats:
    """Connections the front closed, by why (CLOSED_REASONS): past the cap, no TLS handshake and HTTP/2 preface in
    time (or not HTTP/2), or a budget of frames spent."""

    closed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLOSED_REASONS, 0))


class FrontTls:
    """The port's TLS: the serving pair, ALPN `h2` as gRPC clients require, and with a client CA a client certificate
    it signed, required. Before each handshake the files are looked at; when one changed (cert-manager renews in
    place) they are loaded again, and a set that cannot serve is logged and the current one kept."""

    def __init__(self, cert_file: Path, key_file: Path, client_ca_file: Path | None = None) -> None:
        """TLSConfigError (one line, naming the flag) for files it cannot serve."""
        self._files = (cert_file, key_file) + ((client_ca_file,) if client_ca_file is not None else ())
        self._seen = files_stamp(*self._files)
        self.context = self._load()
        self.reloads = 0

    def _load(self) -> ssl.SSLContext:
        cert_file, key_file, *ca_file = self._files
        ca = None
        if ca_file:
            try:
                ca = read_input_file(ca_file[0], CLIENT_CA_FLAG)
            except InputFileError as exc:
                raise TLSConfigError(str(exc)) from None
        try:
            context = server_context(cert_file, key_file, client_ca_data=[ca] if ca is not None else [])
        except TLSConfigError as exc:
            if ca is None or "client CA" not in str(exc):
                raise
            raise TLSConfigError(f"{CLIENT_CA_FLAG} {ca_file[0]}: {exc}") from None
        if ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
        context.set_alpn_protocols(["h2"])
        return context

    def current(self) -> ssl.SSLContext:
        """The context for the next handshake: loaded again when a file changed and the new set can serve."""
        stamp = files_stamp(*self._files)
        if stamp is not None and stamp != self._seen:
            try:
                self.context = self._load()
            except TLSConfigError as exc:
                log.warning("the renewed serving certificate cannot be used yet for KEDA, keeping the current one: %s",
                            exc)  # fmt: skip
            else:
                self.reloads += 1
                log.info("serving the renewed certificate %s to KEDA", self._files[0])
            self._seen = stamp
        return self.context


class ScalerFront:
    def __init__(
        self,
        upstream_port: Callable[[], int],
        peers: PeerDirectory,
        *,
        tls: FrontTls | None = None,
        limits: FrontLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._upstream_port = upstream_port  # gRPC's loopback port, known once it started
        self._peers = peers
        self._tls = tls
        self._limits = limits or FrontLimits()
        self._clock = clock
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.stats = FrontStats()

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def start(self, host: str, port: int) -> int:
        """Listen; the port listened on. OSError when it cannot."""
        self._server = await asyncio.start_server(self._accept, host, port, limit=READ_BYTES)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        if self._server is not None:
            self._server.close()
            self._server = None
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self._limits.max_connections:
            self.stats.closed["over_limit"] += 1
            writer.transport.abort()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:  # stop(): ended here, as asyncio's stream server reads a cancelled callback
            pass  # as an error to log
        finally:
            self._connections.discard(task)
            _close(writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = peer_host(writer.get_extra_info("peername"))
        meter = FrameMeter(self._limits.frames, self._clock)
        try:
            async with asyncio.timeout(self._limits.handshake_seconds):
                if self._tls is not None:
                    await writer.start_tls(self._tls.current())
                opening = await reader.readexactly(len(PREFACE) + FRAME_HEADER_BYTES)
        except (TimeoutError, asyncio.IncompleteReadError, ssl.SSLError, OSError):
            self.stats.closed["handshake"] += 1
            return
        if meter.feed(opening) is not None:
            self.stats.closed["handshake"] += 1
            return
        certificate = _certificate(writer)
        try:
            upstream_reader, upstream = await asyncio.open_connection(
                "127.0.0.1", self._upstream_port(), limit=READ_BYTES
            )
        except OSError as exc:
            log.warning("cannot reach the KEDA port's gRPC server on loopback: %s", exc)
            return
        port = int(upstream.get_extra_info("sockname")[1])
        self._peers.add(port, Peer(address, certificate))
        try:
            upstream.write(opening)
            breach = await self._relay(reader, writer, upstream_reader, upstream, meter)
            if breach is not None:
                self.stats.closed[breach.budget] += 1
                writer.write(goaway(meter.last_stream_id, ENHANCE_YOUR_CALM, breach.message.encode()))
                log.warning("closed a connection to the KEDA port from %s: %s", address, breach.message)
        finally:
            self._peers.remove(port)
            upstream.transport.abort()

    @staticmethod
    async def _relay(
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream: asyncio.StreamWriter,
        meter: FrameMeter,
    ) -> Breach | None:
        """Pass bytes both ways until either side ends; why the client's connection must be closed, if it must."""
        to_server = asyncio.create_task(_client_to_server(reader, upstream, meter))
        to_client = asyncio.create_task(_server_to_client(upstream_reader, writer))
        try:
            await asyncio.wait((to_server, to_client), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (to_server, to_client):
                task.cancel()
            await asyncio.gather(to_server, to_client, return_exceptions=True)
        if to_server.done() and not to_server.cancelled() and to_server.exception() is None:
            return to_server.result()
        return None


async def _client_to_server(
    reader: asyncio.StreamReader, upstream: asyncio.StreamWriter, meter: FrameMeter
) -> Breach | None:
    """The client's bytes to gRPC, metered; returns at the client's end (None) or a budget spent (the Breach)."""
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(READ_BYTES):
            breach = meter.feed(data)
            if breach is not None:
                return breach
            upstream.write(data)
            await upstream.drain()
    return None


async def _server_to_client(upstream_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """gRPC's frames to the client, whole frames only (a frame's tail waits for its next read)."""
    pending = bytearray()
    with contextlib.suppress(ConnectionError, OSError):
        while data := await upstream_reader.read(READ_BYTES):
            pending += data
            whole = complete_frames(pending)
            if whole:
                writer.write(bytes(pending[:whole]))
                del pending[:whole]
                await writer.drain()


def _certificate(writer: asyncio.StreamWriter) -> bytes | None:
    tls = writer.get_extra_info("ssl_object")
    if tls is None:
        return None
    certificate = tls.getpeercert(binary_form=True)
    return bytes(certificate) if certificate else None


def _close(writer: asyncio.StreamWriter) -> None:
    """Close after what was written leaves, or cut it after CLOSE_GRACE_SECONDS if the client does not read."""
    transport = writer.transport
    transport.close()
    asyncio.get_running_loop().call_later(CLOSE_GRACE_SECONDS, transport.abort)
