"""The external scaler built from the adapter's settings, on the adapter's metric definitions, pods and source."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from adapter.demand.signals import DemandSignals
from adapter.keda.activity import Hysteresis
from adapter.keda.admission import CallAdmission
from adapter.keda.callers import Authorizer, NamespaceAccess
from adapter.keda.followed_workloads import ActivityBoard
from adapter.keda.selfmetrics import AdmissionCollector, FrontCollector, KedaMetrics
from adapter.keda.servicer import ExternalScaler
from adapter.keda.serving import ExternalScalerServer, ScalerConnections, ScalerTls
from adapter.keda.workload import WorkloadReader
from adapter.metrics_config import MetricsConfig
from adapter.settings import AdapterSettings
from adapter.sources.metricsource import MetricSource, PodDirectory
from toolkit.selfsigned import DEFAULT_HOSTNAMES, ensure_self_signed


def build_external_scaler(
    settings: AdapterSettings,
    config: MetricsConfig,
    pods: PodDirectory,
    source: MetricSource,
    registry: CollectorRegistry,
    authorizer: Authorizer,
    demand: DemandSignals | None = None,
) -> ExternalScalerServer:
    """The server for `--keda-listen` (which must be set). TLSConfigError (one line) for a certificate it cannot
    serve. With `--keda-client-ca-file`, each call is authorized for its namespace through `authorizer` as the
    certificate's user (keda/callers.py)."""
    assert settings.keda_listen is not None
    reader = WorkloadReader(config, pods, source, demand)
    metrics = KedaMetrics(registry)
    board = ActivityBoard(
        reader,
        Hysteresis(settings.keda_activate_after, settings.keda_deactivate_after),
        interval=settings.keda_activity_interval,
        observe_timeout=settings.keda_call_timeout,
        on_change=metrics.activity_changed,
    )
    servicer = ExternalScaler(
        reader,
        board,
        metrics,
        call_timeout=settings.keda_call_timeout,
        max_streams=settings.keda_max_streams,
        registry=registry,
        access=NamespaceAccess(authorizer) if settings.keda_client_ca_file is not None else None,
    )
    tls = None
    if settings.keda_tls:
        if settings.tls_cert_file is not None and settings.tls_private_key_file is not None:
            cert, key = settings.tls_cert_file, settings.tls_private_key_file
        else:  # the HTTP side's self-signed pair (toolkit.selfsigned keeps one in --cert-dir)
            cert, key = ensure_self_signed(settings.cert_dir, DEFAULT_HOSTNAMES)
        tls = ScalerTls(cert, key, settings.keda_client_ca_file)
    connections = ScalerConnections(
        max_connections=settings.keda_max_connections,
        handshake_seconds=settings.header_read_timeout,
        idle_seconds=settings.idle_timeout,
    )
    admission = CallAdmission()
    registry.register(AdmissionCollector(admission))
    server = ExternalScalerServer(
        servicer,
        settings.keda_listen,
        tls=tls,
        max_streams=settings.keda_max_streams,
        connections=connections,
        admission=admission,
    )
    registry.register(FrontCollector(server.front))
    return server
