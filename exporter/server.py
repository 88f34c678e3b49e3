"""The exporter's HTTP server (aiohttp): `/metrics`, `/pods`, `/healthz`, `/readyz` and the `/` page.

Handlers only hand out what the poll loop published: one reference read, then bytes. Nothing here calls NVML or the
kubelet. The only work done per request is gzip on the first compressed request of a snapshot (in a worker thread,
shared by concurrent requests) and the HTML page (also in a worker thread). The poll loop runs for the lifetime of the
application (`cleanup_ctx`), so `AppRunner.cleanup()` stops it gracefully.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from exporter.access import Access
from exporter.loop import PollLoop, Published
from exporter.page import render_page
from toolkit.negotiation import accepts_gzip, content_type, wants_openmetrics
from toolkit.pods_contract import (
    ANSWERED_AT_HEADER,
    MAX_STREAMS,
    STREAM_CONTENT_TYPE,
    STREAM_SECONDS,
    answered_at_header,
    stream_event,
)

log = logging.getLogger("exporter.server")

_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
MAX_NAMESPACES_ASKED = 256  # namespaces one /pods request may name
# /pods streams one client address may hold of the MAX_STREAMS: an adapter replica follows a node with one stream (two
# for a moment while it replaces one), so a single client, whatever it is, can never take every slot
MAX_STREAMS_PER_CLIENT = 4
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'",
    "X-Content-Type-Options": "nosniff",
}


# ---- gzip ------------------------------------------------------------------------------------------------------------
class Compressor:
    """Gzip on first request per (snapshot, format), in a worker thread; concurrent requests share one job."""

    def __init__(self) -> None:
        self._jobs: dict[tuple[int, bool], asyncio.Future[bytes]] = {}

    async def gzipped(self, published: Published, openmetrics: bool) -> bytes:
        ready = published.gzipped_if_ready(openmetrics)
        if ready is not None:
            return ready
        key = (id(published), openmetrics)  # `published` stays alive while its job runs
        job = self._jobs.get(key)
        if job is None:
            job = asyncio.get_running_loop().run_in_executor(None, published.gzipped, openmetrics)
            self._jobs[key] = job
            job.add_done_callback(lambda _: self._jobs.pop(key, None))
        return await asyncio.shield(job)


# ---- the application -----------------------------------------------------------------------------------------------
POLL_LOOP = web.AppKey("poll_loop", PollLoop)
COMPRESSOR = web.AppKey("compressor", Compressor)
ACCESS = web.AppKey("access", Access)  # set only when authentication is configured
CLOCK: web.AppKey[Callable[[], float]] = web.AppKey("clock")  # wall clock: when a /pods answer is given


def _unavailable(reason: str) -> web.Response:
    return web.Response(status=503, text=reason + "\n", headers={"Retry-After": "1"})


async def metrics(request: web.Request) -> web.Response:
    published = request.app[POLL_LOOP].published
    if published is None:
        return _unavailable("no snapshot yet: the first poll has not finished")
    openmetrics = wants_openmetrics(request.headers.get("Accept", ""))
    headers = {
        "Content-Type": content_type(openmetrics),
        "Vary": "Accept, Accept-Encoding",
        "Cache-Control": "no-store",
    }
    if accepts_gzip(request.headers.get("Accept-Encoding", "")):
        headers["Content-Encoding"] = "gzip"
        body = await request.app[COMPRESSOR].gzipped(published, openmetrics)
    else:
        body = published.body(openmetrics)
    return web.Response(body=body, headers=headers)


class Publications:
    """Wakes the `/pods` streams when the poll loop publishes a snapshot (its listener runs in the polling thread)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event = asyncio.Event()
        self.streams = 0  # open /pods streams
        self.closing = False  # the server stops: streams end now instead of holding the shutdown up
        self.by_client: dict[str, int] = {}  # open /pods streams by the client's address

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def published(self) -> None:
        """The poll loop's listener: hands over to the event loop, from any thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    def close(self) -> None:
        """End every stream at once: a SIGTERM must not wait for streams that never end on their own (the exporter
        lets go of NVML only once the server has stopped, and a driver upgrade waits for that)."""
        self.closing = True
        self._wake()

    async def next(self, timeout: float) -> None:
        """Return at the next publication, or after `timeout` seconds."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            pass


PUBLICATIONS = web.AppKey("publications", Publications)


def _bad_request(text: str) -> web.Response:
    return web.Response(status=400, text=text + "\n")


async def pods(request: web.Request) -> web.StreamResponse:
    """`/pods[?namespace=a[&namespace=b...]]`: the document, whole or filtered; with `watch=1` (and optionally
    `every=SECONDS`), a stream of them, one line per snapshot (toolkit.pods_contract, "the stream")."""
    namespaces = request.query.getall("namespace", [])
    if len(namespaces) > MAX_NAMESPACES_ASKED:
        return _bad_request(f"namespace: at most {MAX_NAMESPACES_ASKED} namespaces, got {len(namespaces)}")
    for namespace in namespaces:
        if _NAMESPACE.fullmatch(namespace) is None:
            return _bad_request(f"namespace: {namespace!r} is not a Kubernetes namespace name")
    watch = request.query.get("watch", "")
    if watch not in ("", "0", "false", "1", "true"):
        return _bad_request(f"watch: must be 1, true, 0 or false, got {watch!r}")
    if watch in ("1", "true"):
        every = _seconds(request.query.get("every", "0"))
        if every is None:
            return _bad_request(f"every: must be a number of seconds from 0 to 3600, got {request.query['every']!r}")
        return await _pods_stream(request, namespaces or None, every)
    published = request.app[POLL_LOOP].published
    if published is None or published.pods is None:
        return _unavailable("no snapshot yet: the first poll has not finished")
    body = published.pods.for_namespaces(namespaces or None)
    headers = {"Cache-Control": "no-store", ANSWERED_AT_HEADER: answered_at_header(request.app[CLOCK]())}
    return web.Response(body=body, content_type="application/json", headers=headers)


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0 <= value <= 3600 else None


async def _pods_stream(request: web.Request, namespaces: list[str] | None, every: float) -> web.StreamResponse:
    """One line per published snapshot, at most one per `every` seconds, until about STREAM_SECONDS have passed (or
    the reader hangs up). Each line is the bytes the snapshot's document was serialized to once, for every reader."""
    publications = request.app[PUBLICATIONS]
    client = request.remote or ""
    if publications.by_client.get(client, 0) >= MAX_STREAMS_PER_CLIENT:
        return web.Response(
            status=429,
            text=f"at most {MAX_STREAMS_PER_CLIENT} /pods streams per client\n",
            headers={"Retry-After": "10"},
        )
    if publications.streams >= MAX_STREAMS:
        return web.Response(
            status=429, text=f"at most {MAX_STREAMS} /pods streams at once\n", headers={"Retry-After": "10"}
        )
    poll_loop, clock = request.app[POLL_LOOP], request.app[CLOCK]
    response = web.StreamResponse(headers={"Content-Type": STREAM_CONTENT_TYPE, "Cache-Control": "no-store"})
    publications.streams += 1
    publications.by_client[client] = publications.by_client.get(client, 0) + 1
    try:
        await response.prepare(request)
        ends = time.monotonic() + STREAM_SECONDS * random.uniform(0.9, 1.1)  # spread the readers' reconnects
        sent_cycle, sent_at = -1, -math.inf
        # a snapshot within half an interval of `every` goes: the poll grid, not the reader's clock, sets the pace
        slack = poll_loop.interval / 2
        while (left := ends - time.monotonic()) > 0 and not publications.closing:
            published = poll_loop.published
            now = time.monotonic()
            if (
                published is not None
                and published.pods is not None
                and published.cycle != sent_cycle
                and now - sent_at >= every - slack
            ):
                await response.write(stream_event(clock(), published.pods.for_namespaces(namespaces)))
                sent_cycle, sent_at = published.cycle, now
            await publications.next(min(left, max(poll_loop.interval, every) * 2 + 1))
        await response.write_eof()
    except ConnectionResetError:
        pass  # the reader went away
    finally:
        publications.streams -= 1
        left = publications.by_client.pop(client) - 1
        if left:
            publications.by_client[client] = left
    return response


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    readiness = request.app[POLL_LOOP].readiness()
    if readiness.ready:
        return web.Response(text=f"ok: {readiness.reason}\n")
    return _unavailable(f"not ready: {readiness.reason}")


async def index(request: web.Request) -> web.Response:
    poll_loop = request.app[POLL_LOOP]
    published = poll_loop.published
    readiness = poll_loop.readiness().reason
    snapshot = None if published is None else published.snapshot
    page = await asyncio.get_running_loop().run_in_executor(
        None, lambda: render_page(snapshot, poll_loop.collector.history, readiness=readiness)
    )
    return web.Response(text=page, content_type="text/html", headers=_PAGE_HEADERS)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    access = request.app.get(ACCESS)
    if access is not None and request.path in access.protected:
        decision = await access.decide(request.headers.get("Authorization"))
        if decision.status == 401:
            return web.Response(status=401, text="unauthorized\n", headers={"WWW-Authenticate": access.challenge})
        if decision.status != 200:
            return web.Response(status=403, text=f"forbidden: {decision.user} may not read {request.path}\n")
    return await handler(request)


async def _run_poll_loop(app: web.Application) -> AsyncIterator[None]:
    poll_loop = app[POLL_LOOP]
    poll_loop.start()
    yield
    await asyncio.get_running_loop().run_in_executor(None, poll_loop.stop)


def build_app(
    poll_loop: PollLoop,
    *,
    access: Access | None = None,
    run_poll_loop: bool = True,
    clock: Callable[[], float] = time.time,
) -> web.Application:
    """The application. With `run_poll_loop`, the loop's thread starts and stops with the application."""
    app = web.Application(middlewares=[authenticate])
    app[POLL_LOOP] = poll_loop
    app[CLOCK] = clock
    app[COMPRESSOR] = Compressor()
    publications = app[PUBLICATIONS] = Publications()
    poll_loop.on_publish(publications.published)

    async def attach(app: web.Application) -> None:
        publications.attach(asyncio.get_running_loop())

    async def end_streams(app: web.Application) -> None:
        publications.close()

    app.on_startup.append(attach)
    app.on_shutdown.append(end_streams)
    if access is not None:
        app[ACCESS] = access
    if run_poll_loop:
        app.cleanup_ctx.append(_run_poll_loop)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/pods", pods)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/", index)
    return app
