"""One client connection as the `ConnectionGuard` (toolkit/connections.py) sees it, from `accept()` until its socket is
released: the protocol between the socket's transport and aiohttp's, forwarding everything and telling the guard what
the client does.

For TLS the guard runs the handshake itself (`loop.start_tls` on the accepted socket): asyncio's own TLS server hands
a protocol nothing before the handshake ends, so a connection that never finishes it could be neither counted against
the cap nor closed to make room. Here the socket is held, and can be aborted, from its first moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolkit.connections import ConnectionGuard

# How long a connection the server closed may keep its socket while the peer does not take the close (a TLS shutdown
# waiting for the peer's, an answer it does not read).
CLOSE_GRACE_SECONDS = 2.0


class State(enum.Enum):
    HANDSHAKING = "handshaking"  # TLS: accepted, the handshake under way (plain TCP: only inside `connection_made`)
    WAITING = "waiting"  # no byte of the next request yet
    READING = "reading"  # part of a request arrived, no handler runs for it yet
    BUSY = "busy"  # a handler runs for it


def _plain_answer(status: str, text: str) -> bytes:
    body = text.encode()
    head = (
        f"HTTP/1.1 {status}\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\n"
    )
    return head.encode() + (b"Retry-After: 1\r\n" if status.startswith("503") else b"") + b"\r\n" + body


_REFUSAL = _plain_answer("503 Service Unavailable", "too many open connections\n")
_HEAD_TOO_LARGE = _plain_answer("431 Request Header Fields Too Large", "the request head is too large\n")


class GuardedConnection(asyncio.Protocol):
    """The protocol of an accepted socket (and, for TLS, the application protocol over it)."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard = guard
        self.inner = inner
        self.raw: asyncio.Transport | None = None  # the socket's transport: what `abort` closes
        self.transport: asyncio.Transport | None = None  # what aiohttp speaks HTTP on (raw, or TLS over it)
        self.state = State.HANDSHAKING
        self.since = 0.0  # when the current state's deadline started
        self.first_request = True
        self.unclaimed = 0  # bytes arrived since a handler last started
        self.paused = False  # the transport paused our writes: the client does not read what it is sent
        self.blocked_since: float | None = None  # since when the writes have been blocked (seen by the guard's sweep)
        self.closing_since: float | None = None  # when the server closed it
        self._paused_reading = False
        self._refused = False
        self._early: list[bytes] = []  # TLS: bytes decrypted before the handshake's `await` returned

    # ---- the socket ----------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """The accepted socket (for TLS, `start_tls` later routes everything through its own protocol to us)."""
        assert isinstance(transport, asyncio.Transport)
        self.raw, self.since = transport, self.guard.now()
        if not self.guard.accept(self):
            self._refused = True
            if self.guard.ssl_context is None:
                transport.write(_REFUSAL)
                transport.close()
            else:
                transport.abort()  # no HTTP before the handshake: a reset
            return
        context = self.guard.ssl_context
        if context is None:
            self._establish(transport)
            return
        transport.pause_reading()  # nothing is read before start_tls sets its own protocol on the socket
        task = asyncio.ensure_future(self._handshake(transport, context))
        task.add_done_callback(_retrieve)
        self.guard.handshakes.add(task)
        task.add_done_callback(self.guard.handshakes.discard)

    async def _handshake(self, raw: asyncio.Transport, context: ssl.SSLContext) -> None:
        try:
            tls = await asyncio.get_running_loop().start_tls(
                raw,
                self,
                context,
                server_side=True,
                # the guard's sweep ends a handshake after header_read_timeout and counts it; this is the backstop
                ssl_handshake_timeout=self.guard.limits.header_read_timeout + 1.0,
                ssl_shutdown_timeout=CLOSE_GRACE_SECONDS,
            )
        except Exception:  # a failed handshake is the client's business (asyncio logs it at debug level)
            tls = None
        except asyncio.CancelledError:
            raw.abort()
            self.guard.forget(self)
            raise
        if not isinstance(tls, asyncio.Transport) or raw.is_closing():  # failed, or aborted as it ended
            raw.abort()
            self.guard.forget(self)
            return
        self._establish(tls)
        early, self._early = self._early, []
        for data in early:
            self.data_received(data)

    def _establish(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.state, self.since = State.WAITING, self.guard.now()
        self.guard.established(self, transport)
        self.inner.connection_made(transport)

    # ---- what the client sends -----------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._refused or self.closing_since is not None:
            return
        if self.transport is None:  # TLS: decrypted while the handshake's `await` returns; replayed once it has
            if sum(map(len, self._early)) <= self.guard.limits.max_head_bytes:
                self._early.append(data)  # past the bound, the replay is refused and the rest need not be kept
            return
        self.unclaimed += len(data)
        if self.state is State.WAITING:
            self.state = State.READING
            if not self.first_request:  # a fresh connection's deadline runs from when it was made
                self.since = self.guard.now()
        if self.unclaimed > self.guard.limits.max_head_bytes:
            if self.state is not State.BUSY:
                self.guard.head_too_large(self)
                return
            if not self._paused_reading:  # pipelined or unasked bytes while a handler runs: wait for it to end
                self._paused_reading = True
                self.transport.pause_reading()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.transport is not None and not self._refused else None

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.forget(self)
        if self.transport is not None and not self._refused:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.paused = True
        if self.transport is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None:
            self.inner.resume_writing()

    # ---- what the guard and the handlers report ------------------------------------------------------------------
    def handler_started(self) -> None:
        self.state, self.first_request, self.unclaimed = State.BUSY, False, 0

    def handler_finished(self, now: float) -> None:
        self.state, self.since = (State.READING if self.unclaimed else State.WAITING), now
        if self._paused_reading and self.transport is not None and not self.transport.is_closing():
            self._paused_reading = False
            self.transport.resume_reading()

    def writes_blocked(self) -> bool:
        """Whether what the server sends waits for the client to read: our writes paused, or (TLS, where the TLS
        layer is the socket transport's protocol and takes the pause) the socket's buffer past its high-water mark."""
        if self.paused:
            return True
        raw = self.raw
        return raw is not None and raw.get_write_buffer_size() > raw.get_write_buffer_limits()[1]

    def waits_for_client(self) -> bool:
        """Whether the connection waits on its client: a handshake, a request, or the reading of an answer."""
        return self.state is not State.BUSY or self.blocked_since is not None

    def is_closing(self) -> bool:
        transport = self.transport or self.raw
        return transport is not None and transport.is_closing()

    def refuse_head(self) -> None:
        """More than the bound arrived before a handler took it: `431` and closed."""
        if self.transport is not None:
            self.transport.write(_HEAD_TOO_LARGE)
        self.close(self.guard.now())

    def close(self, now: float) -> None:
        """Close gracefully; the guard aborts it if the peer does not take the close in time."""
        self.closing_since = now
        transport = self.transport or self.raw
        if transport is not None and not transport.is_closing():
            transport.close()

    def abort(self) -> None:
        """Close the socket now, whatever is unsent."""
        if self.closing_since is None:
            self.closing_since = self.guard.now()
        if self.raw is not None:
            self.raw.abort()


def _retrieve(task: asyncio.Task[None]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        task.exception()
