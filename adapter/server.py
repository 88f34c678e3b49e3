"""Assembling the adapter: the aiohttp application (routes, middlewares, lifecycle) and serving it over TLS.

`build_app` wires given parts (tests pass a pod cache on a test Kubernetes API, simulated exporters, no auth);
`Adapter.from_settings` builds every part from the settings, as the CLI does, and `serve` runs it until stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware
from kubernetes.client import ApiClient

from adapter.api.middleware import instrument, status_errors
from adapter.api.paths import resource_attributes
from adapter.api.routes import add_routes
from adapter.api.selfmetrics import AdapterMetrics
from adapter.api.state import ApiState
from adapter.auth.config import AuthenticationConfig, AuthenticationFlags, load_authentication_config
from adapter.auth.reload import TrustReloader
from adapter.auth.requests import DelegatingAuthenticator, auth_middleware
from adapter.auth.sar import SubjectAccessReviewer
from adapter.auth.tokenreview import TokenReviewer
from adapter.heap import HeapSettler
from adapter.metrics_config import MetricsConfig, MetricsConfigError, default_metrics_config, load_metrics_config
from adapter.podcache.cache import PodCache
from adapter.selectors import parse_selector
from adapter.settings import AdapterSettings
from adapter.sources.direct import DirectSource
from adapter.sources.exporters import (
    ExporterLocator,
    PodExporters,
    StaticExporters,
    TemplateExporters,
    parse_endpoint_map,
)
from adapter.sources.metricsource import MetricSource, PodDirectory
from adapter.sources.nodefeeds import NodeFeeds
from adapter.sources.prometheus import PrometheusSource
from toolkit.clientcerts import request_unverified_client_certificates
from toolkit.connections import ConnectionGuard, ConnectionLimits, ensure_file_limit
from toolkit.credentials import BearerToken, client_ssl_context
from toolkit.kubeclient import api_client
from toolkit.selfsigned import build_server_ssl_context
from toolkit.serving import start_server
from toolkit.settings import ListenAddress
from toolkit.tls import CertificateReloader

if TYPE_CHECKING:
    from adapter.keda.serving import ExternalScalerServer

log = logging.getLogger(__name__)


class PodCacheLifecycle(Protocol):
    async def start(self) -> None: ...

    async def stop(self, timeout: float = 5.0) -> None: ...


def build_app(
    *,
    config: MetricsConfig,
    pods: PodDirectory,
    source: MetricSource,
    metrics: AdapterMetrics,
    auth: Middleware | None = None,
    pod_cache_lifecycle: PodCacheLifecycle | None = None,
    clock: Callable[[], float] = time.time,
    freeze_gc: bool = False,
) -> web.Application:
    """The application: every route, `Status` errors, request timing, optional auth; starting and stopping the
    source (and the pod cache, when given its lifecycle) with the application. `freeze_gc` keeps the pod cache and the
    source's streams out of the garbage collector's full passes (adapter.heap), for a process that serves one
    adapter; it is then ready only once they are out."""
    middlewares: list[Middleware] = [instrument(metrics), status_errors]
    if auth is not None:
        middlewares.append(auth)
    app = web.Application(middlewares=middlewares, handler_args={"max_field_size": 16384})
    state = ApiState(config=config, pods=pods, source=source, metrics=metrics, clock=clock)
    metrics.caches.pod_cache_size = lambda: pods.size
    metrics.caches.pod_cache_synced = lambda: pods.synced
    readiness = [("pod-cache", lambda: pods.synced), ("metrics-source", source.ready)]
    heap = HeapSettler(lambda: pods.synced, source.ready) if freeze_gc else None
    if heap is not None:  # the collection that walks what the source has just opened runs before queries come
        readiness.append(("heap-settled", heap.settled))
    add_routes(app, state, readiness=readiness)

    async def lifecycle(_: web.Application) -> AsyncIterator[None]:
        if pod_cache_lifecycle is not None:
            await pod_cache_lifecycle.start()
        await source.start()
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
            await source.close()
            if pod_cache_lifecycle is not None:
                await pod_cache_lifecycle.stop()

    app.cleanup_ctx.append(lifecycle)
    return app


def build_source(settings: AdapterSettings, pods: PodDirectory, metrics: AdapterMetrics) -> MetricSource:
    """The number source the settings ask for (raises ValueError with one line on unusable credentials)."""
    if settings.source == "prometheus":
        assert settings.prometheus_url is not None  # checked by the settings
        token_file = settings.prometheus_token_file
        token = BearerToken(token_file, "--prometheus-token-file") if token_file else None
        return PrometheusSource(
            settings.prometheus_url,
            headers=token.headers if token else None,
            ssl_context=client_ssl_context(settings.prometheus_ca_file, "--prometheus-ca-file"),
            timeout=settings.prometheus_timeout,
            max_age=settings.max_age,
            observe=metrics.observe_source_call,
            max_response_bytes=settings.prometheus_max_response_bytes,
        )
    locator: ExporterLocator
    if settings.exporter_endpoints is not None:
        locator = StaticExporters(parse_endpoint_map(settings.exporter_endpoints))
    elif settings.exporter_url_template is not None:
        locator = TemplateExporters(settings.exporter_url_template)
    else:
        locator = PodExporters(
            pods,
            parse_selector(settings.exporter_selector),
            settings.exporter_port,
            settings.exporter_scheme,
            settings.exporter_namespace,
        )
    token = BearerToken(settings.exporter_token_file, "--exporter-token-file") if settings.exporter_token_file else None
    cache = NodeFeeds(
        timeout=settings.exporter_timeout,
        headers=token.headers if token else None,
        ssl_context=client_ssl_context(settings.exporter_ca_file, "--exporter-ca-file"),
        keep_warm_seconds=settings.keep_warm,
        refresh=settings.exporter_refresh,
        observe=metrics.observe_source_call,
        max_document_bytes=settings.exporter_max_document_bytes,
    )
    metrics.caches.node_documents = lambda: cache.size
    metrics.caches.documents_received = lambda: cache.documents
    metrics.caches.exporter_requests = lambda: cache.connections
    return DirectSource(locator, cache, max_age=settings.max_age)


def metrics_config_for(settings: AdapterSettings) -> MetricsConfig:
    """The metric definitions (--config or the shipped defaults), checked against the chosen source."""
    config = load_metrics_config(settings.config) if settings.config is not None else default_metrics_config()
    if settings.source == "prometheus":
        missing = config.without_prometheus_queries()
        if missing:
            where = settings.config or "the defaults"
            raise MetricsConfigError(f"{where}: --source prometheus needs a prometheus query for {', '.join(missing)}")
    return config


class _Background(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def _running(reloader: _Background) -> Callable[[web.Application], AsyncIterator[None]]:
    async def context(_: web.Application) -> AsyncIterator[None]:
        await reloader.start()
        try:
            yield
        finally:
            await reloader.stop()

    return context


@dataclass
class Adapter:
    """Every part of a running adapter, built from settings."""

    app: web.Application
    ssl_context: ssl.SSLContext
    listen: ListenAddress
    api: ApiClient
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    keda: ExternalScalerServer | None = None  # KEDA's external scaler (--keda-listen)
    connections: ConnectionGuard = field(init=False)

    def __post_init__(self) -> None:
        self.connections = ConnectionGuard(self.limits)

    @classmethod
    async def from_settings(cls, settings: AdapterSettings) -> Adapter:
        """Build everything; raises ValueError subclasses with one line when the configuration cannot work."""
        config = metrics_config_for(settings)
        client = api_client(kubeconfig=settings.kubeconfig)
        flags = AuthenticationFlags(
            client_ca_file=settings.client_ca_file,
            requestheader_client_ca_file=settings.requestheader_client_ca_file,
            requestheader_allowed_names=settings.requestheader_allowed_names,
            requestheader_username_headers=settings.requestheader_username_headers,
            requestheader_group_headers=settings.requestheader_group_headers,
            requestheader_extra_headers_prefix=settings.requestheader_extra_headers_prefix,
        )
        auth_config = await load_authentication_config(client, flags)
        ssl_context = build_server_ssl_context(
            settings.tls_cert_file,
            settings.tls_private_key_file,
            settings.cert_dir,
            (),
            client_ca_data=auth_config.ca_bundles(),
        )
        certificate = (
            None
            if settings.tls_cert_file is None or settings.tls_private_key_file is None
            else CertificateReloader(ssl_context, settings.tls_cert_file, settings.tls_private_key_file)
        )
        # the ConfigMap is followed unless both CAs come from flags (auth/reload.py); either way some CA may change
        follow = settings.client_ca_file is None or settings.requestheader_client_ca_file is None
        if auth_config.ca_bundles() or follow:  # a certificate from an unknown CA is a 401, as kube-apiserver answers
            request_unverified_client_certificates(ssl_context)
        authenticator = DelegatingAuthenticator.from_config(auth_config, TokenReviewer(client))
        metrics = AdapterMetrics(settings.source)
        reviewer = SubjectAccessReviewer(client)
        auth = auth_middleware(
            authenticator,
            reviewer,
            resource_attributes,
            settings.authorization_always_allow_paths,
            on_authentication_error=metrics.authentication_errors.inc,
        )
        pod_cache = PodCache(client)
        source = build_source(settings, pod_cache, metrics)
        app = build_app(
            config=config,
            pods=pod_cache,
            source=source,
            metrics=metrics,
            auth=auth,
            pod_cache_lifecycle=pod_cache,
            freeze_gc=True,
        )

        def trust(changed: AuthenticationConfig) -> None:
            authenticator.reconfigure(changed)
            for bundle in changed.ca_bundles():  # where the handshake still verifies (clientcerts.py fallback)
                ssl_context.load_verify_locations(cadata=bundle)

        # the ConfigMap, the CA files given by flag, or both, re-read while the adapter runs (auth/reload.py)
        reloader = TrustReloader(client, flags, trust, current=auth_config, on_error=metrics.trust_reload_errors.inc)
        app.cleanup_ctx.append(_running(reloader))
        app.on_cleanup.append(lambda _: reviewer.close())
        if certificate is not None:  # a renewed certificate (cert-manager, a rotated Secret) serves without a restart
            app.cleanup_ctx.append(_running(certificate))
        keda = None
        if settings.keda_listen is not None:  # gRPC (tens of ms and MiB to import) only when KEDA's scaler is served
            from adapter.keda.scaler import build_external_scaler

            keda = build_external_scaler(settings, config, pod_cache, source, metrics.registry)
        limits = settings.connection_limits()
        ensure_file_limit(limits)
        adapter = cls(app=app, ssl_context=ssl_context, listen=settings.listen, api=client, limits=limits, keda=keda)
        metrics.connections.stats = adapter.connections.stats
        return adapter

    async def serve(self, stop: asyncio.Event, on_serving: Sequence[Callable[[str], None]] = ()) -> None:
        """Serve until `stop` is set, then shut down gracefully (open requests get a few seconds). Raises
        toolkit.serving.ListenError when the address cannot be served."""
        try:
            server = await start_server(
                self.app, self.listen, ssl_context=self.ssl_context, access_log=False, connections=self.connections
            )
            try:
                log.info("serving custom.metrics.k8s.io and external.metrics.k8s.io on %s", server.url)
                if self.keda is not None:  # after the HTTP server's start: the pod cache and the source run
                    await self.keda.start()
                    tls = "TLS" if self.keda.tls else "plaintext"
                    log.info("serving KEDA's external scaler (externalscaler.ExternalScaler) on %s, %s",
                             self.keda.address, tls)  # fmt: skip
                for callback in on_serving:
                    callback(server.url)
                await stop.wait()
                log.info("stopping")
            finally:
                if self.keda is not None:
                    await self.keda.stop()
                await server.stop()
        finally:
            self.api.close()  # type: ignore[no-untyped-call]
