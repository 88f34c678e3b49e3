"""The adapter's aiohttp application, from parts already made: routes, middlewares, and the background work that
starts and stops with it (cleanup contexts).

`build_app` takes the parts one by one (tests pass a pod cache on a test Kubernetes API, simulated exporters, no
auth); `serving_app` puts every part adapter/parts.py built behind it, as the server runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware

from adapter.api.middleware import instrument, status_errors
from adapter.api.paths import resource_attributes
from adapter.api.routes import add_routes
from adapter.api.selfmetrics import AdapterMetrics
from adapter.api.state import ApiState
from adapter.auth.requests import auth_middleware
from adapter.demand.signals import DemandSignals
from adapter.heap import HeapSettler
from adapter.metrics_config import MetricsConfig
from adapter.parts import AdapterParts
from adapter.promadapter.serving import RuleMetrics
from adapter.sources.metricsource import MetricSource, PodDirectory
from adapter.sources.routing import SourcesByMetric


class PodCacheLifecycle(Protocol):
    async def start(self) -> None: ...

    async def stop(self, timeout: float = 5.0) -> None: ...


class Background(Protocol):
    """Work that runs while the application serves (a periodic re-read)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def build_app(
    *,
    config: MetricsConfig,
    pods: PodDirectory,
    source: MetricSource,
    metrics: AdapterMetrics,
    auth: Middleware | None = None,
    pod_cache_lifecycle: PodCacheLifecycle | None = None,
    background: Sequence[Background] = (),
    clock: Callable[[], float] = time.time,
    freeze_gc: bool = False,
    rules: RuleMetrics | None = None,
    demand: DemandSignals | None = None,
) -> web.Application:
    """The application: every route, `Status` errors, request timing, optional auth; starting and stopping the
    source (and the pod cache, when given its lifecycle, and each of `background`) with the application. `freeze_gc`
    keeps the pod cache and the source's streams out of the garbage collector's full passes (adapter.heap), for a
    process that serves one adapter; it is then ready only once they are out."""
    middlewares: list[Middleware] = [instrument(metrics), status_errors]
    if auth is not None:
        middlewares.append(auth)
    app = web.Application(middlewares=middlewares, handler_args={"max_field_size": 16384})
    state = ApiState(config=config, pods=pods, source=source, metrics=metrics, clock=clock, rules=rules, demand=demand)
    readiness = [("pod-cache", lambda: pods.synced), ("metrics-source", source.ready)]
    if isinstance(source, SourcesByMetric):  # both sources side by side: each one's own check too
        readiness.extend(source.checks)
    if rules is not None:  # prometheus-adapter's rules: discovered once before questions come
        readiness.append(("prometheus-adapter-rules", rules.ready))
    heap = HeapSettler(lambda: pods.synced, source.ready) if freeze_gc else None
    if heap is not None:  # the collection that walks what the source has just opened runs before queries come
        readiness.append(("heap-settled", heap.settled))
    add_routes(app, state, readiness=readiness)

    async def lifecycle(_: web.Application) -> AsyncIterator[None]:
        if pod_cache_lifecycle is not None:
            await pod_cache_lifecycle.start()
        await source.start()
        if rules is not None:
            await rules.start()
        if demand is not None:
            await demand.start()
        housekeeping = asyncio.create_task(heap.run(), name="gpu-pulse-heap") if heap is not None else None
        watching = asyncio.create_task(metrics.stalls.watch(), name="gpu-pulse-stalls")
        try:
            yield
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
            if housekeeping is not None:
                housekeeping.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await housekeeping
            if rules is not None:
                await rules.close()
            if demand is not None:
                await demand.close()
            await source.close()
            if pod_cache_lifecycle is not None:
                await pod_cache_lifecycle.stop()

    app.cleanup_ctx.append(lifecycle)
    for work in background:
        app.cleanup_ctx.append(_running(work))
    return app


def serving_app(parts: AdapterParts) -> web.Application:
    """The application over every part, with authentication and authorization, as `gpu-pulse-adapter` serves it."""
    auth = auth_middleware(parts.authenticator, parts.reviewer, resource_attributes, parts.always_allow_paths)
    background: list[Background] = [parts.trust]
    if parts.certificate is not None:
        background.append(parts.certificate)
    app = build_app(
        config=parts.config,
        pods=parts.pods,
        source=parts.source,
        metrics=parts.metrics,
        auth=auth,
        pod_cache_lifecycle=parts.pods,
        background=background,
        freeze_gc=True,
        rules=parts.rules,
        demand=parts.demand,
    )
    app.on_cleanup.append(lambda _: parts.reviewer.close())
    return app


def _running(work: Background) -> Callable[[web.Application], AsyncIterator[None]]:
    async def context(_: web.Application) -> AsyncIterator[None]:
        await work.start()
        try:
            yield
        finally:
            await work.stop()

    return context
