"""Connections as a bounded resource: a cap, a deadline for each request head, an idle timeout, counted.

aiohttp gives part of this and is used for it: `keepalive_timeout` (since 3.x it also runs from the moment a
connection is made, aiohttp's web_protocol.py), `max_line_size`/`max_field_size`/`max_headers` on request heads, the
listen `backlog`. It has no cap on connections, no deadline for a request head that arrives a byte at a time (its
keep-alive timer does not restart on partial data and ends only on a whole request), and nothing in metrics. So a
`ConnectionGuard` stands between asyncio's accept and aiohttp's protocol (`GuardedSite`, an aiohttp `BaseSite` like
`TCPSite`) and knows each connection's state:

- *waiting*: connected (or done with a response) and no byte of the next request yet: closed after `idle_timeout`;
- *reading*: part of a request head arrived: closed when the head is not whole `header_read_timeout` after its first
  byte (a fresh connection gets `header_read_timeout` from the moment it is made, for its first request);
- *busy*: a handler runs for it: never closed by the guard;
- *handshaking* (TLS only): counted as open from accept; asyncio closes it after `ssl_handshake_timeout`, which the
  site sets to `header_read_timeout`. A handshake cannot be refused before it ends (asyncio hands the protocol
  nothing to close until then), so handshakes are bounded by that time, not by the cap.

When a connection is made and the established connections (waiting, reading, busy) already fill the cap, it takes the
place of the one that has waited longest (waiting or reading): stalled clients cannot keep a scrape or an HPA query
out, because whoever sends a request at once is busy, not waiting, and is never the oldest waiter. Only when every
established connection is busy is the new one refused (503 and closed). Everything is counted (`ConnectionStats`) for
the services' self-metrics.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import resource
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_request import BaseRequest

log = logging.getLogger(__name__)

# File descriptors the process needs besides its connections (listeners, the event loop, logs, NVML, kubelet, ...).
OTHER_FILES = 128
_REFUSAL_BODY = b"too many open connections\n"
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Type: text/plain\r\n"
    + f"Content-Length: {len(_REFUSAL_BODY)}\r\n\r\n".encode()
    + _REFUSAL_BODY
)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The limits of one server: `--max-connections`, `--header-read-timeout`, `--idle-timeout`."""

    max_connections: int = 512
    header_read_timeout: float = 10.0
    idle_timeout: float = 60.0

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError("--max-connections: must be at least 1")
        if not 0 < self.header_read_timeout <= 3600:
            raise ValueError("--header-read-timeout: must be more than 0 and at most 3600 seconds")
        if not 0 < self.idle_timeout <= 86_400:
            raise ValueError("--idle-timeout: must be more than 0 and at most 86400 seconds")


@dataclass(frozen=True, slots=True)
class ConnectionStats:
    """Counts since the server started, and the connections open now."""

    open: int
    limit: int
    accepted: int
    refused: int  # at the cap with every connection busy: answered 503 and closed
    evicted: int  # closed at the cap to make room for a new connection
    header_timeouts: int  # closed because a request head was not whole in time
    idle_timeouts: int  # closed after idle_timeout without a request


class _State(enum.Enum):
    HANDSHAKING = "handshaking"
    WAITING = "waiting"
    READING = "reading"
    BUSY = "busy"


class _Connection(asyncio.Protocol):
    """Between the transport and aiohttp's protocol: forwards everything, tells the guard what the client does."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.state = _State.HANDSHAKING
        self.since = guard.now()
        self.admitted = False
        self.first_request = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.state, self.since = _State.WAITING, self.guard.now()
        if not self.guard.admit(self):
            transport.write(_REFUSAL)
            transport.close()
            return
        self.admitted = True
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.admitted:
            return
        if self.state is _State.WAITING:
            self.state = _State.READING
            if not self.first_request:  # a fresh connection's deadline runs from when it was made
                self.since = self.guard.now()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.admitted else None

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.forget(self)
        if self.admitted:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class ConnectionGuard:
    """Counts and bounds the connections of one server; see the module's description."""

    def __init__(self, limits: ConnectionLimits, *, clock: Callable[[], float] | None = None) -> None:
        self.limits = limits
        self._clock = clock
        self._connections: dict[_Connection, None] = {}  # in order of arrival
        self._by_transport: dict[asyncio.BaseTransport, _Connection] = {}
        self._accepted = self._refused = self._evicted = self._header_timeouts = self._idle_timeouts = 0
        self._sweeper: asyncio.Task[None] | None = None

    def now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def stats(self) -> ConnectionStats:
        return ConnectionStats(
            open=len(self._connections),
            limit=self.limits.max_connections,
            accepted=self._accepted,
            refused=self._refused,
            evicted=self._evicted,
            header_timeouts=self._header_timeouts,
            idle_timeouts=self._idle_timeouts,
        )

    # ---- wiring ----------------------------------------------------------------------------------------------------
    def protocol_factory(self, make: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        def factory() -> asyncio.Protocol:
            connection = _Connection(self, make())
            self._connections[connection] = None
            return connection

        return factory

    def request_handler(
        self, handler: Callable[[BaseRequest], Awaitable[web.StreamResponse]]
    ) -> Callable[[BaseRequest], Awaitable[web.StreamResponse]]:
        """`handler`, marking its connection busy while it runs."""

        async def handle(request: BaseRequest) -> web.StreamResponse:
            transport = request.transport
            connection = self._by_transport.get(transport) if transport is not None else None
            if connection is None:
                return await handler(request)
            connection.state, connection.first_request = _State.BUSY, False
            try:
                return await handler(request)
            finally:
                connection.state, connection.since = _State.WAITING, self.now()

        return handle

    def start(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="gpu-pulse-connection-sweeper")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None

    # ---- what connections report -----------------------------------------------------------------------------------
    def admit(self, connection: _Connection) -> bool:
        """Whether a connection that has just been made may stay; at the cap, make room or refuse."""
        assert connection.transport is not None
        if len(self._by_transport) >= self.limits.max_connections:  # the established ones: this one is not yet
            oldest = self._oldest_waiter(other_than=connection)
            if oldest is None:
                self._refused += 1
                return False
            self._evicted += 1
            self._drop(oldest)
        self._accepted += 1
        self._by_transport[connection.transport] = connection
        return True

    def forget(self, connection: _Connection) -> None:
        self._connections.pop(connection, None)
        if connection.transport is not None:
            self._by_transport.pop(connection.transport, None)

    # ---- housekeeping ----------------------------------------------------------------------------------------------
    def _oldest_waiter(self, other_than: _Connection) -> _Connection | None:
        oldest: _Connection | None = None
        for connection in self._connections:
            if connection is other_than or connection.state not in (_State.WAITING, _State.READING):
                continue
            if connection.transport is None or not connection.admitted:
                continue
            if oldest is None or connection.since < oldest.since:
                oldest = connection
        return oldest

    def _drop(self, connection: _Connection) -> None:
        self.forget(connection)
        connection.close()

    def sweep(self) -> None:
        """Close the connections past their deadline; forget TLS handshakes that asyncio has given up on."""
        now = self.now()
        header, idle = self.limits.header_read_timeout, self.limits.idle_timeout
        for connection in list(self._connections):
            age, first = now - connection.since, connection.first_request
            if connection.state is _State.HANDSHAKING:
                if age > header + 1.0:  # asyncio closed it (ssl_handshake_timeout) without telling the protocol
                    self.forget(connection)
            elif connection.state is _State.READING or (first and connection.state is _State.WAITING):
                if age > header:
                    self._header_timeouts += 1
                    self._drop(connection)
            elif connection.state is _State.WAITING and age > idle:
                self._idle_timeouts += 1
                self._drop(connection)

    async def _sweep_forever(self) -> None:
        period = max(0.05, min(1.0, self.limits.header_read_timeout / 4, self.limits.idle_timeout / 4))
        while True:
            await asyncio.sleep(period)
            self.sweep()


class GuardedSite(web.BaseSite):
    """aiohttp's `TCPSite`, with its connections going through a `ConnectionGuard`."""

    __slots__ = ("_guard", "_host", "_port", "_reuse_address")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        guard: ConnectionGuard,
        *,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 128,
        reuse_address: bool = True,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host, self._port, self._guard, self._reuse_address = host, port, guard, reuse_address

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{scheme}://{host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        server.request_handler = self._guard.request_handler(server.request_handler)
        self._guard.start()
        loop = asyncio.get_running_loop()
        options: dict[str, Any] = {}
        if self._ssl_context is not None:
            options["ssl_handshake_timeout"] = self._guard.limits.header_read_timeout
        self._server = await loop.create_server(
            self._guard.protocol_factory(server),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            **options,
        )

    async def stop(self) -> None:
        await super().stop()
        await self._guard.stop()


def runner_options(limits: ConnectionLimits) -> dict[str, Any]:
    """aiohttp's own options for the same limits (`web.AppRunner(**runner_options(limits))`): its keep-alive timer as a
    backstop, a second after the guard's, so that the guard closes (and counts) idle connections first."""
    return {"keepalive_timeout": limits.idle_timeout + 1.0}


def ensure_file_limit(limits: ConnectionLimits) -> None:
    """Raise the soft limit on open files (RLIMIT_NOFILE) so that `max_connections` fit with room to spare, as far as
    the hard limit allows; ValueError naming the flag when they cannot fit."""
    needed = limits.max_connections + OTHER_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise ValueError(
            f"--max-connections {limits.max_connections}: needs {needed} open files and the limit is {hard}; "
            "lower it or raise the limit (ulimit -n)"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    log.info("raised the open-file limit from %d to %d for --max-connections %d", soft, needed, limits.max_connections)
