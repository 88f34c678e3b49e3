"""Connections as a bounded resource: a cap on the sockets held, a deadline and a size bound for each request head, an
idle timeout, a bound on how long an answer may wait for its reader, counted.

aiohttp gives part of this and is used for it: `keepalive_timeout` (since 3.x it also runs from the moment a
connection is made, aiohttp's web_protocol.py), `max_line_size`/`max_field_size`/`max_headers` on request heads, the
listen `backlog`. It has no cap on connections, no deadline for a request head that arrives a byte at a time (its
keep-alive timer does not restart on partial data and ends only on a whole request), no bound on the whole head (128
fields of 8 KiB, never finished, cost it 2 MiB a connection), no bound on how long a response waits for a client that
does not read it, and nothing in metrics. So a `ConnectionGuard` stands between asyncio's accept and aiohttp's
protocol (`GuardedSite`, an aiohttp `BaseSite` like `TCPSite`) and knows each connection's state
(toolkit/connection.py):

- *handshaking* (TLS only): accepted, the handshake under way: ended after `header_read_timeout`;
- *waiting*: connected (or done with a response) and no byte of the next request yet: closed after `idle_timeout`;
- *reading*: part of a request head arrived: closed when the head is not whole `header_read_timeout` after its first
  byte (a fresh connection gets `header_read_timeout` from the moment it is made, for its first request), or as soon
  as more than `max_head_bytes` arrived that no handler has taken (`431`);
- *busy*: a handler runs for it: never closed by the guard.

Whatever the state, a connection whose answers wait for a reader that does not read them (the transport's writes
paused) for `header_read_timeout` is aborted: the client is gone or hostile.

The cap counts every socket the process holds for a client, from `accept()` until its file descriptor is released:
TLS handshakes, and connections being closed, too. A connection closed by the server (by the guard, or by aiohttp
after an answer) whose peer does not take the close (a TLS shutdown that waits for the peer, a response it does not
read) is aborted `CLOSE_GRACE_SECONDS` later, and a connection dropped to make room is aborted at once: no descriptor
outlives its connection by more than that.

When a connection is accepted at the cap, it takes the place of the one that has waited longest (handshaking, waiting,
reading, closing, or busy with an answer its reader does not take): stalled clients cannot keep a scrape or an HPA
query out, because whoever sends a request at once is busy, not waiting, and is never the oldest waiter. Only when
every connection is busy is the new one refused (a plain `503` and closed; a TLS connection is reset, as it has no
HTTP yet). Everything is counted (`ConnectionStats`) for the services' self-metrics.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.web_request import BaseRequest

from toolkit.connection import CLOSE_GRACE_SECONDS, GuardedConnection, State
from toolkit.memory_return import MemoryReturn

if TYPE_CHECKING:
    from toolkit.settings import ConnectionSettings

log = logging.getLogger(__name__)

# File descriptors the process needs besides its connections (listeners, the event loop, logs, NVML, kubelet, ...).
OTHER_FILES = 128
# The listen backlog, which is also how many connections asyncio accepts in one pass of its loop: at the cap, each of
# them replaces a connection whose socket is closed at the end of that pass, so for that moment the process holds up to
# this many sockets more than the cap.
ACCEPT_BATCH = 128
# The most a request head may take, all fields together: twice the largest field aiohttp accepts from the adapter's
# clients (16 KiB), sixteen times a scrape's head with a bearer token. At the default cap of 512 connections, heads
# of 29 KiB held at once cost the exporter 33 MiB and the adapter, over TLS, 104 MiB (bench/heads_memory.py; asyncio
# gives each TLS connection a 256 KiB read buffer): what the guard's memory return hands back once they close.
MAX_HEAD_BYTES = 32 * 1024


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The limits of one server: `--max-connections`, `--header-read-timeout`, `--idle-timeout`, and the size bound of
    a request head."""

    max_connections: int = 512
    header_read_timeout: float = 10.0
    idle_timeout: float = 60.0
    max_head_bytes: int = MAX_HEAD_BYTES

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError("--max-connections: must be at least 1")
        if not 0 < self.header_read_timeout <= 3600:
            raise ValueError("--header-read-timeout: must be more than 0 and at most 3600 seconds")
        if not 0 < self.idle_timeout <= 86_400:
            raise ValueError("--idle-timeout: must be more than 0 and at most 86400 seconds")
        if self.max_head_bytes < 1024:
            raise ValueError("max_head_bytes: must be at least 1024")

    @classmethod
    def of(cls, settings: ConnectionSettings) -> ConnectionLimits:
        """The limits a service's `--max-connections`, `--header-read-timeout` and `--idle-timeout` set."""
        return cls(settings.max_connections, settings.header_read_timeout, settings.idle_timeout)


@dataclass(frozen=True, slots=True)
class ConnectionStats:
    """Counts since the server started, and the connections open now."""

    open: int  # sockets held for clients: handshaking, established, and closing
    limit: int
    accepted: int
    refused: int  # at the cap with every connection busy: answered 503 (reset, for TLS) and closed
    evicted: int  # closed at the cap to make room for a new connection
    header_timeouts: int  # closed because a request head (or a TLS handshake) was not whole in time
    idle_timeouts: int  # closed after idle_timeout without a request
    heads_too_large: int = 0  # closed because more than max_head_bytes arrived before a handler took them
    write_timeouts: int = 0  # closed because an answer waited header_read_timeout for its reader to read
    aborted_closes: int = 0  # closed by the server, not taken by the peer within CLOSE_GRACE_SECONDS: aborted

    def closed_by_reason(self) -> tuple[tuple[str, int], ...]:
        """The `reason` label values of the services' `..._connections_closed_total` and their counts."""
        return (
            ("refused", self.refused),
            ("evicted", self.evicted),
            ("header_timeout", self.header_timeouts),
            ("idle_timeout", self.idle_timeouts),
            ("head_too_large", self.heads_too_large),
            ("write_timeout", self.write_timeouts),
        )


CLOSED_REASONS_HELP = (
    "refused (at the cap, all busy), evicted (at the cap, to make room), header_timeout (no whole request head or "
    "TLS handshake in time), idle_timeout, head_too_large (a request head past its bound), write_timeout (an answer "
    "its client did not read)"
)


class ConnectionGuard:
    """Counts and bounds the connections of one server; see the module's description."""

    def __init__(self, limits: ConnectionLimits, *, clock: Callable[[], float] | None = None) -> None:
        self.limits = limits
        self._clock = clock
        self._connections: dict[GuardedConnection, None] = {}  # every socket held, in order of arrival
        self._by_transport: dict[asyncio.BaseTransport, GuardedConnection] = {}  # established: aiohttp's transport
        self._accepted = self._refused = self._evicted = self._header_timeouts = self._idle_timeouts = 0
        self._heads_too_large = self._write_timeouts = self._aborted_closes = 0
        self._sweeper: asyncio.Task[None] | None = None
        self.handshakes: set[asyncio.Task[None]] = set()  # TLS handshakes under way (a task holds no reference)
        self.ssl_context: ssl.SSLContext | None = None  # set by the site: handshakes then run under the guard
        self.memory = MemoryReturn()  # what closed connections held, handed back to the system (memory_return.py)

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
            heads_too_large=self._heads_too_large,
            write_timeouts=self._write_timeouts,
            aborted_closes=self._aborted_closes,
        )

    # ---- wiring ----------------------------------------------------------------------------------------------------
    def protocol_factory(self, make: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        def factory() -> asyncio.Protocol:
            return GuardedConnection(self, make())

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
            connection.handler_started()
            try:
                return await handler(request)
            finally:
                connection.handler_finished(self.now())

        return handle

    def start(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="gpu-pulse-connection-sweeper")

    async def stop(self) -> None:
        tasks = [*self.handshakes, *([self._sweeper] if self._sweeper is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._sweeper = None

    # ---- what connections report -----------------------------------------------------------------------------------
    def accept(self, connection: GuardedConnection) -> bool:
        """Whether a socket just accepted may stay; at the cap, make room (the oldest waiter goes) or refuse."""
        if len(self._connections) >= self.limits.max_connections:
            oldest = self._oldest_waiter()
            if oldest is None:
                self._refused += 1
                return False
            self._evicted += 1
            self._abort(oldest)
        self._connections[connection] = None
        self._accepted += 1
        return True

    def established(self, connection: GuardedConnection, transport: asyncio.BaseTransport) -> None:
        """The connection speaks HTTP on `transport` (aiohttp's): TCP accepted, or the TLS handshake done."""
        if connection in self._connections:
            self._by_transport[transport] = connection

    def forget(self, connection: GuardedConnection) -> None:
        """The connection's socket is released."""
        if connection in self._connections:
            del self._connections[connection]
            self.memory.closed()
        if connection.transport is not None:
            self._by_transport.pop(connection.transport, None)

    def head_too_large(self, connection: GuardedConnection) -> None:
        self._heads_too_large += 1
        connection.refuse_head()

    # ---- housekeeping ----------------------------------------------------------------------------------------------
    def _oldest_waiter(self) -> GuardedConnection | None:
        """The connection to drop for a new one: one being closed, else the one that has waited longest."""
        oldest: GuardedConnection | None = None
        for connection in self._connections:
            if connection.closing_since is not None:
                return connection
            if not connection.waits_for_client():
                continue
            if oldest is None or connection.since < oldest.since:
                oldest = connection
        return oldest

    def _abort(self, connection: GuardedConnection) -> None:
        self.forget(connection)  # its socket is closed at once, in this loop iteration or the next
        connection.abort()

    def sweep(self) -> None:
        """Close the connections past their deadline; abort those closed and not let go within the grace."""
        now = self.now()
        header, idle = self.limits.header_read_timeout, self.limits.idle_timeout
        for connection in list(self._connections):
            if connection.closing_since is None and connection.is_closing():
                connection.closing_since = now  # closed by aiohttp (an answer with `Connection: close`, a 400)
            if connection.closing_since is not None:
                if now - connection.closing_since > CLOSE_GRACE_SECONDS:
                    self._aborted_closes += 1
                    self._abort(connection)
                continue
            if not connection.writes_blocked():
                connection.blocked_since = None
            elif connection.blocked_since is None:
                connection.blocked_since = now
            age, state = now - connection.since, connection.state
            if connection.blocked_since is not None and now - connection.blocked_since > header:
                self._write_timeouts += 1  # an answer its client does not read, whatever the client does besides
                self._abort(connection)
            elif state is State.HANDSHAKING:
                if age > header:
                    self._header_timeouts += 1
                    self._abort(connection)
            elif state is State.READING or (connection.first_request and state is State.WAITING):
                if age > header:
                    self._header_timeouts += 1
                    connection.close(now)
            elif state is State.WAITING and age > idle:
                self._idle_timeouts += 1
                connection.close(now)
        self.memory.maybe_return(now)

    async def _sweep_forever(self) -> None:
        period = max(0.05, min(1.0, self.limits.header_read_timeout / 4, self.limits.idle_timeout / 4))
        while True:
            await asyncio.sleep(period)
            self.sweep()


class GuardedSite(web.BaseSite):
    """aiohttp's `TCPSite`, with its connections going through a `ConnectionGuard` (TLS handshakes included: the guard
    runs them, so that it holds every socket from its accept)."""

    __slots__ = ("_guard", "_host", "_port", "_reuse_address")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        guard: ConnectionGuard,
        *,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = ACCEPT_BATCH,
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
        self._guard.ssl_context = self._ssl_context
        self._guard.start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._guard.protocol_factory(server),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
        )

    async def stop(self) -> None:
        await super().stop()
        await self._guard.stop()


def runner_options(limits: ConnectionLimits) -> dict[str, Any]:
    """aiohttp's own options for the same limits (`web.AppRunner(**runner_options(limits))`): its keep-alive timer as a
    backstop, a second after the guard's, so that the guard closes (and counts) idle connections first."""
    return {"keepalive_timeout": limits.idle_timeout + 1.0}


def files_needed(limits: ConnectionLimits) -> int:
    """The open files a server under `limits` may hold at once: the cap, the connections one pass of accepts replaces
    (ACCEPT_BATCH), and the files the process needs besides (OTHER_FILES)."""
    return limits.max_connections + ACCEPT_BATCH + OTHER_FILES


def ensure_file_limit(limits: ConnectionLimits) -> None:
    """Raise the soft limit on open files (RLIMIT_NOFILE) so that `max_connections` fit with room to spare, as far as
    the hard limit allows; ValueError naming the flag when they cannot fit."""
    needed = files_needed(limits)
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
