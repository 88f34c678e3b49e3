"""Serving an aiohttp application on a listen address, for both services: start, report the address, stop gracefully.

Connections are bounded (toolkit.connections: a deadline for the request head, an idle timeout, a cap with room kept
for a client that sends its request at once), and aiohttp's errors are logged without floods (toolkit.logthrottle).
A port that cannot be bound is a `ListenError` naming `--listen`, which both CLIs turn into one line and exit code 2.
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
from dataclasses import dataclass

from aiohttp import web

from toolkit.connections import ConnectionGuard, ConnectionLimits, GuardedSite, runner_options
from toolkit.logthrottle import install_log_throttle
from toolkit.settings import ListenAddress


class ListenError(OSError):
    """The listen address cannot be served (in use, not an address of this host, no permission); one line."""


def check_listen(listen: ListenAddress, *, hint: str = "") -> None:
    """Fail early, before a service starts anything that logs or takes time, when `listen` cannot be bound (in use, not
    an address of this host, no permission): a ListenError with the line `start_server` would give. Binding is tried
    the way the server binds (SO_REUSEADDR, every address the host resolves to) and released at once; the server
    binds again when it starts, and reports the rare port taken in between the same way. `hint` is appended to the
    reason when the port is in use."""
    if listen.port == 0:
        return
    try:
        addresses = socket.getaddrinfo(
            listen.host, listen.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE | socket.AI_NUMERICSERV
        )
    except OSError as error:
        raise ListenError(f"--listen {listen}: cannot listen: {getattr(error, 'strerror', None) or error}") from None
    for family, kind, protocol, _, address in addresses:
        try:
            with socket.socket(family, kind, protocol) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
        except OSError as error:
            reason = os.strerror(error.errno) if error.errno else str(error)
            if error.errno == errno.EADDRINUSE and hint:
                reason += f" ({hint})"
            raise ListenError(f"--listen {listen}: cannot listen: {reason}") from None


@dataclass(frozen=True, slots=True)
class RunningServer:
    runner: web.AppRunner
    host: str
    port: int
    tls: bool
    connections: ConnectionGuard

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    async def stop(self) -> None:
        """Stop accepting, finish in-flight requests (up to the shutdown timeout), end the app's background work."""
        await self.runner.cleanup()


async def start_server(
    app: web.Application,
    listen: ListenAddress,
    *,
    ssl_context: ssl.SSLContext | None = None,
    shutdown_timeout: float = 5.0,
    access_log: bool = True,
    connections: ConnectionGuard | None = None,
) -> RunningServer:
    """Start serving `app` on `listen` (port 0: an ephemeral port, reported in the result), its connections watched by
    `connections` (default: a guard with the default limits). Raises ListenError."""
    install_log_throttle()
    guard = connections if connections is not None else ConnectionGuard(ConnectionLimits())
    options = runner_options(guard.limits)
    if access_log:  # aiohttp.access writes at debug level only (toolkit.logs)
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=shutdown_timeout, **options)
    else:
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=shutdown_timeout, access_log=None, **options)
    await runner.setup()
    site = GuardedSite(runner, listen.host, listen.port, guard, ssl_context=ssl_context)
    try:
        await site.start()
    except OSError as error:
        await runner.cleanup()
        raise ListenError(f"--listen {listen}: cannot listen: {error.strerror or error}") from None
    except BaseException:
        await runner.cleanup()
        raise
    address = runner.addresses[0]
    host = listen.host if listen.host not in ("0.0.0.0", "::") else ("127.0.0.1" if listen.host == "0.0.0.0" else "::1")
    return RunningServer(runner, host, int(address[1]), ssl_context is not None, guard)
