"""The parts of a running adapter, built from its settings: metric definitions, the Kubernetes client, the pod cache,
the number source, authentication and authorization, the serving TLS, the connection guard and KEDA's scaler.

Nothing here knows the aiohttp application (adapter/application.py puts the parts behind routes); each part that has
self-metrics registers its collector on the adapter's registry as it is built.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kubernetes.client import ApiClient

from adapter.api.selfmetrics import AdapterMetrics, ConnectionsCollector
from adapter.auth.config import AuthenticationConfig, AuthenticationFlags, load_authentication_config
from adapter.auth.reload import TrustReloader
from adapter.auth.requests import DelegatingAuthenticator
from adapter.auth.sar import SubjectAccessReviewer
from adapter.auth.tokenreview import TokenReviewer
from adapter.demand.signals import DemandCollector, DemandSignals, build_reader
from adapter.metrics_config import (
    Figure,
    MetricDefinition,
    MetricsConfig,
    MetricsConfigError,
    default_metrics_config,
    load_metrics_config,
)
from adapter.podcache.cache import PodCache
from adapter.promadapter.config import (
    GPU_PULSE_KEYS,
    OWN_KEYS,
    PromAdapterConfig,
    PromAdapterConfigError,
    is_prometheus_adapter_config,
    load_document,
    parse_prom_adapter_config,
)
from adapter.promadapter.discovery import RuleDiscovery, RuleDiscoveryCollector
from adapter.promadapter.naming import MetricNamer, namers_from_config
from adapter.promadapter.promapi import PrometheusApi
from adapter.promadapter.registry import ExternalSeriesRegistry, SeriesRegistry
from adapter.promadapter.restmapper import RestMapper
from adapter.promadapter.serving import RuleMetrics, not_served_overrides
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
from adapter.sources.feedmetrics import NodeFeedsCollector
from adapter.sources.metricsource import MetricSource, PodDirectory
from adapter.sources.nodefeeds import NodeFeeds
from adapter.sources.prometheus import PrometheusSource
from adapter.sources.routing import SourcesByMetric
from toolkit.clientcerts import request_unverified_client_certificates
from toolkit.connections import ConnectionGuard, ConnectionLimits, ensure_file_limit
from toolkit.credentials import BearerToken, client_ssl_context
from toolkit.inputfiles import InputFileError, read_input_text
from toolkit.kubeclient import api_client
from toolkit.selfsigned import build_server_ssl_context
from toolkit.tls import CertificateReloader

if TYPE_CHECKING:
    from adapter.keda.serving import ExternalScalerServer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdapterParts:
    """Everything the application and the server are made of, already built."""

    config: MetricsConfig
    api: ApiClient
    metrics: AdapterMetrics
    pods: PodCache
    source: MetricSource
    authenticator: DelegatingAuthenticator
    reviewer: SubjectAccessReviewer
    always_allow_paths: tuple[str, ...]
    trust: TrustReloader  # the client CAs and requestheader configuration, kept current (auth/reload.py)
    ssl_context: ssl.SSLContext
    certificate: CertificateReloader | None  # a renewed serving pair, served without a restart
    connections: ConnectionGuard
    keda: ExternalScalerServer | None  # KEDA's external scaler (--keda-listen)
    rules: RuleMetrics | None = None  # prometheus-adapter's rules (--config in its format)
    demand: DemandSignals | None = None  # requests waiting at gateways (the metrics file's `demand`)


async def build_parts(settings: AdapterSettings) -> AdapterParts:
    """Build every part; raises ValueError subclasses with one line when the configuration cannot work."""
    config, rule_config = served_configuration(settings)
    compiled = compile_rules(settings, rule_config) if rule_config is not None else None
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
    metrics = AdapterMetrics(settings.source)
    authenticator = DelegatingAuthenticator.from_config(auth_config, TokenReviewer(client, registry=metrics.registry))

    def trust(changed: AuthenticationConfig) -> None:
        authenticator.reconfigure(changed)
        for bundle in changed.ca_bundles():  # where the handshake still verifies (clientcerts.py fallback)
            ssl_context.load_verify_locations(cadata=bundle)

    # the ConfigMap, the CA files given by flag, or both, re-read while the adapter runs (auth/reload.py)
    reloader = TrustReloader(client, flags, trust, current=auth_config, registry=metrics.registry)
    pod_cache = PodCache(client, registry=metrics.registry)
    source = build_source(settings, pod_cache, metrics, config)
    rules = build_rules(settings, compiled, pod_cache, metrics) if compiled is not None else None
    reviewer = SubjectAccessReviewer(client)
    demand = build_demand(config, metrics)
    keda = None
    if settings.keda_listen is not None:  # grpc is imported only for KEDA (tests/adapter/test_keda_serving.py)
        from adapter.keda.scaler import build_external_scaler

        keda = build_external_scaler(settings, config, pod_cache, source, metrics.registry, reviewer, demand)
    limits = ConnectionLimits.of(settings)
    # the whole process's connections: the KEDA port's share is taken from them, with the two descriptors more that
    # each of its connections holds (its loopback connection to gRPC, keda/front.py)
    extra = keda.descriptors - settings.keda_max_connections if keda is not None else 0
    ensure_file_limit(replace(limits, max_connections=limits.max_connections + extra))
    if keda is not None:
        limits = replace(limits, max_connections=limits.max_connections - settings.keda_max_connections)
    connections = ConnectionGuard(limits)
    metrics.registry.register(ConnectionsCollector(connections))
    return AdapterParts(
        config=config,
        api=client,
        metrics=metrics,
        pods=pod_cache,
        source=source,
        authenticator=authenticator,
        reviewer=reviewer,
        always_allow_paths=tuple(settings.authorization_always_allow_paths),
        trust=reloader,
        ssl_context=ssl_context,
        certificate=certificate,
        connections=connections,
        keda=keda,
        rules=rules,
        demand=demand,
    )


def build_demand(config: MetricsConfig, metrics: AdapterMetrics) -> DemandSignals | None:
    """The readers of the metrics file's `demand` entries, their self-metrics registered; None when it has none.
    InputFileError (one line) for a token or CA file that cannot be used."""
    if not config.demand:
        return None
    signals = DemandSignals(build_reader(d) for d in config.demand)
    metrics.registry.register(DemandCollector(signals))
    return signals


def build_source(
    settings: AdapterSettings, pods: PodDirectory, metrics: AdapterMetrics, config: MetricsConfig | None = None
) -> MetricSource:
    """The number source: `--source` for every metric, or both sources side by side when `config` has metrics that
    name the other one (sources/routing.py). Raises ValueError with one line on unusable credentials."""
    needed = config.source_names(settings.source) if config is not None else {settings.source}
    saturation = (
        [d for d in (*config.metrics, *config.external) if d.figure is Figure.SATURATION] if config is not None else []
    )
    if len(needed) == 1:
        (only,) = needed
        return _one_source(only, settings, pods, metrics, metrics.observe_source_call, saturation)
    sources = {
        name: _one_source(name, settings, pods, metrics, metrics.source_observer(name), saturation) for name in needed
    }
    return SourcesByMetric(sources, default=settings.source)


def _one_source(
    name: str,
    settings: AdapterSettings,
    pods: PodDirectory,
    metrics: AdapterMetrics,
    observe: Callable[[str, float], None],
    saturation: Sequence[MetricDefinition] = (),
) -> MetricSource:
    """`saturation`: the metrics whose driving terms the direct source's self-metrics count."""
    if name == "prometheus":
        assert settings.prometheus_url is not None  # checked by the settings and metrics_config_for
        return PrometheusSource(
            settings.prometheus_url,
            headers=_prometheus_headers(settings),
            ssl_context=client_ssl_context(settings.prometheus_ca_file, "--prometheus-ca-file"),
            timeout=settings.prometheus_timeout,
            max_age=settings.max_age,
            observe=observe,
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
        observe=observe,
        max_document_bytes=settings.exporter_max_document_bytes,
    )
    metrics.registry.register(NodeFeedsCollector(cache, saturation))
    return DirectSource(locator, cache, max_age=settings.max_age)


def _prometheus_headers(settings: AdapterSettings) -> Callable[[], Mapping[str, str]] | None:
    token_file = settings.prometheus_token_file
    return BearerToken(token_file, "--prometheus-token-file").headers if token_file else None


def served_configuration(settings: AdapterSettings) -> tuple[MetricsConfig, PromAdapterConfig | None]:
    """What `--config` defines: gpu-pulse's metrics file, or prometheus-adapter's (told apart by their keys), whose
    rules are served beside the shipped GPU metrics; checked against the sources it needs."""
    rules = None
    if settings.config is None:
        config = default_metrics_config()
    else:
        origin = f"--config {settings.config}"
        try:
            text = read_input_text(settings.config, "--config")
        except InputFileError as exc:
            raise MetricsConfigError(str(exc)) from None
        document = load_document(text, origin)
        if isinstance(document, dict) and set(document) & OWN_KEYS and set(document) & GPU_PULSE_KEYS:
            raise PromAdapterConfigError(
                f"{origin}: mixes gpu-pulse's keys (metrics, external) with prometheus-adapter's (rules, "
                "externalRules, resourceRules): a file is one or the other"
            )
        if is_prometheus_adapter_config(document):
            rules = parse_prom_adapter_config(document, origin)
            config = default_metrics_config()
            if settings.prometheus_url is None:
                raise PromAdapterConfigError(
                    f"{origin} is prometheus-adapter's configuration: it needs --prometheus-url"
                )
        else:
            config = load_metrics_config(settings.config)
    where = settings.config or "the defaults"
    missing = config.without_prometheus_queries(settings.source)
    if missing:
        raise MetricsConfigError(f"{where}: the prometheus source needs a prometheus query for {', '.join(missing)}")
    if "prometheus" in config.source_names(settings.source) and settings.prometheus_url is None:
        named = [d.name for d in (*config.metrics, *config.external) if d.source == "prometheus"]
        raise MetricsConfigError(f"{where}: {', '.join(named)} say source: prometheus: give --prometheus-url")
    return config, rules


def metrics_config_for(settings: AdapterSettings) -> MetricsConfig:
    """The metric definitions (--config or the shipped defaults), checked against the chosen source."""
    return served_configuration(settings)[0]


@dataclass(frozen=True)
class CompiledRules:
    """prometheus-adapter's rules, compiled against the resource mapper."""

    mapper: RestMapper
    custom: list[MetricNamer]
    external: list[MetricNamer]


def compile_rules(settings: AdapterSettings, rules: PromAdapterConfig) -> CompiledRules:
    """Each rule compiled (refused in one line where prometheus-adapter refuses it); what the file asks for that
    gpu-pulse does not serve is logged, once, at start."""
    origin = f"--config {settings.config}"
    mapper = RestMapper()
    custom = namers_from_config(rules.rules, mapper, origin)
    external = namers_from_config(rules.external_rules, mapper, origin)
    not_served = [*rules.not_served(), *not_served_overrides([*custom, *external])]
    if not_served:
        log.warning("%s: not served by gpu-pulse: %s", origin, "; ".join(not_served))
    return CompiledRules(mapper, custom, external)


def build_rules(
    settings: AdapterSettings, rules: CompiledRules, pods: PodDirectory, metrics: AdapterMetrics
) -> RuleMetrics:
    """The rules' discovery, answers and self-metrics."""
    assert settings.prometheus_url is not None  # checked by served_configuration
    api = PrometheusApi(
        settings.prometheus_url,
        headers=_prometheus_headers(settings),
        ssl_context=client_ssl_context(settings.prometheus_ca_file, "--prometheus-ca-file"),
        timeout=settings.prometheus_timeout,
        max_response_bytes=settings.prometheus_max_response_bytes,
        observe=metrics.source_observer("prometheus-adapter-rules"),
    )
    relist = settings.metrics_relist_interval
    discovery = RuleDiscovery(
        api,
        SeriesRegistry(rules.mapper),
        rules.custom,
        ExternalSeriesRegistry(),
        rules.external,
        interval=relist,
        max_age=settings.metrics_max_age if settings.metrics_max_age is not None else relist,
    )
    metrics.registry.register(RuleDiscoveryCollector(discovery))
    return RuleMetrics(discovery, rules.mapper, pods)
