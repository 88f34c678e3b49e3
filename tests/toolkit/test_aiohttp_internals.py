"""The parts of aiohttp that toolkit/connections.py and toolkit/connection.py rely on without aiohttp promising them.

`GuardedSite` is a `web.BaseSite` that creates its own asyncio server: it sets `BaseSite._server` (which
`BaseSite.stop` closes and `BaseRunner.addresses` reads) from `_runner`, `_ssl_context` and `_backlog`, and wraps
`web.Server.request_handler`, which each `RequestHandler` copies into `_request_handler` when a connection is made.
aiohttp's keep-alive timer (`RequestHandler._keepalive_timeout`, `_keepalive_handle`, started in `connection_made`)
is the backstop behind the guard's idle timeout (`runner_options`). pyproject.toml pins aiohttp to one minor
release; when an upgrade moves any of these, a test here fails naming what moved, before a server misbehaves. The
code they read: https://github.com/aio-libs/aiohttp/blob/master/aiohttp/web_runner.py and web_protocol.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web, web_protocol

from toolkit.connections import ConnectionGuard, ConnectionLimits, GuardedSite, runner_options

LIMITS = ConnectionLimits(max_connections=4, header_read_timeout=2.0, idle_timeout=5.0)


def _has(owner: Any, attribute: str) -> bool:
    return attribute in getattr(type(owner), "__slots__", ()) or attribute in vars(owner)


async def _answer(request: web.Request) -> web.Response:
    return web.Response(text="ok")


@pytest.fixture
async def runner() -> Any:
    app = web.Application()
    app.router.add_get("/", _answer)
    running = web.AppRunner(app, handle_signals=False, **runner_options(LIMITS))
    await running.setup()
    yield running
    await running.cleanup()


@pytest.mark.parametrize("attribute", ["_runner", "_ssl_context", "_backlog", "_server"])
async def test_base_site_keeps_what_guarded_site_reads_and_sets(runner: web.AppRunner, attribute: str) -> None:
    site = web.TCPSite(runner, "127.0.0.1", 0)
    assert hasattr(site, attribute), f"aiohttp's BaseSite no longer has {attribute} (toolkit/connections.py)"


async def test_runner_server_takes_a_wrapped_request_handler_before_its_connections(runner: web.AppRunner) -> None:
    server = runner.server
    assert isinstance(server, web.Server), "aiohttp's BaseRunner.server is no longer a web.Server"
    assert hasattr(server, "request_handler"), "aiohttp's web.Server no longer has request_handler"
    assert "_request_handler" in web_protocol.RequestHandler.__slots__, "RequestHandler._request_handler moved"
    protocol = server()
    assert isinstance(protocol, web_protocol.RequestHandler), "web.Server() no longer makes a RequestHandler"
    assert protocol._request_handler is server.request_handler, "a connection no longer takes the server's handler"


async def test_keep_alive_timer_is_the_backstop_it_was(runner: web.AppRunner) -> None:
    protocol = runner.server() if runner.server is not None else None
    for attribute in ("_keepalive_timeout", "_keepalive_handle"):
        assert _has(protocol, attribute), f"aiohttp's RequestHandler no longer has {attribute}"
    assert protocol is not None
    timeout = protocol._keepalive_timeout
    assert timeout == LIMITS.idle_timeout + 1.0, "AppRunner(keepalive_timeout=) no longer reaches the protocol"


async def test_a_guarded_site_serves_lists_its_address_and_closes_it_on_stop(runner: web.AppRunner) -> None:
    """Behaviour through the private attributes: the address read from `_server`, the guard's handler on each
    request, the listening socket closed by `BaseSite.stop`."""
    guard = ConnectionGuard(LIMITS)
    site = GuardedSite(runner, "127.0.0.1", 0, guard)
    await site.start()
    try:
        (address,) = runner.addresses  # BaseRunner.addresses reads site._server
        host, port = address[:2]
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"ok"), answer[:80]
        assert guard.stats().accepted == 1, "the connection did not go through the guard's protocol"
    finally:
        await site.stop()
    with pytest.raises(OSError):  # BaseSite.stop closed the server GuardedSite made
        await asyncio.open_connection(host, port)
