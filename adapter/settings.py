"""The adapter's settings: one model; each field is a flag and a `GPU_PULSE_ADAPTER_*` variable (toolkit.settings reads
them, with the error lines and `--help` both services share)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from adapter.promadapter.durations import parse_go_duration
from adapter.selectors import SelectorError, parse_selector
from adapter.sources.exporters import parse_endpoint_map
from toolkit.settings import (
    CommandLine,
    ConnectionSettings,
    ListenAddress,
    check_tls_pair,
    comma_list,
    lower,
    parse_listen,
    setting,
)

ENV_PREFIX = "GPU_PULSE_ADAPTER_"
PROG = "gpu-pulse-adapter"

CommaList = Annotated[tuple[str, ...], BeforeValidator(comma_list)]


def _optional_listen(value: object) -> ListenAddress | None:
    return None if value is None else parse_listen(value)


def _optional_duration(value: object) -> float | None:
    return None if value is None else parse_go_duration(value)


class AdapterSettings(ConnectionSettings):
    """Every setting of the adapter. Field `foo_bar` is flag `--foo-bar` and variable `GPU_PULSE_ADAPTER_FOO_BAR`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid", frozen=True)

    # the main settings: where it serves, where its figures come from, which metrics
    listen: Annotated[ListenAddress, BeforeValidator(parse_listen)] = setting(
        ListenAddress("0.0.0.0", 6443), "Address to serve the API on (TLS).", metavar="HOST:PORT"
    )
    source: Annotated[Literal["direct", "prometheus"], BeforeValidator(lower)] = setting(
        "direct",
        "Where figures come from, for metrics that do not name their own source: 'direct' (each node's exporter "
        "/pods) or 'prometheus' (PromQL over the HTTP API).",
        metavar="{direct,prometheus}",
    )
    config: Path | None = setting(
        None,
        "YAML file defining the served metrics (default: the shipped defaults, adapter/defaults.yaml), or "
        "prometheus-adapter's configuration file as it is (rules, externalRules), served from --prometheus-url beside "
        "the shipped GPU metrics; the two are told apart by their keys.",
        metavar="FILE",
    )
    metrics_relist_interval: Annotated[float, BeforeValidator(parse_go_duration)] = setting(
        600.0,
        "With a prometheus-adapter --config: how often its rules' series are listed from Prometheus (a Go duration "
        "as prometheus-adapter takes it, 1m, 30s, or seconds); default 10m, as prometheus-adapter's.",
        metavar="DURATION",
        gt=0,
        allow_inf_nan=False,
    )
    metrics_max_age: Annotated[float | None, BeforeValidator(_optional_duration)] = setting(
        None,
        "With a prometheus-adapter --config: how far back the series listing looks (a Go duration or seconds); "
        "default: --metrics-relist-interval, as prometheus-adapter's.",
        metavar="DURATION",
    )
    max_age: float | None = setting(
        None,
        "Seconds after which a figure is too old to serve (left out instead); "
        "default: 3 x the exporter's interval + 2 (direct), 60 (prometheus).",
        metavar="SECONDS",
        gt=0,
        allow_inf_nan=False,
    )
    # TLS
    tls_cert_file: Path | None = setting(
        None, "PEM serving certificate (with its chain); default: a self-signed one in --cert-dir.", metavar="FILE"
    )
    tls_private_key_file: Path | None = setting(None, "PEM private key of --tls-cert-file.", metavar="FILE")
    cert_dir: Path = setting(
        Path("/tmp/gpu-pulse-adapter"),
        "Directory for the generated self-signed certificate when --tls-cert-file is not given.",
        metavar="DIR",
    )
    exporter_selector: str = setting(
        "app.kubernetes.io/name=gpu-pulse-exporter",
        "Label selector of the exporter pods (direct source): each node's exporter is found by it in the pod cache.",
        metavar="SELECTOR",
    )
    exporter_namespace: str | None = setting(
        None, "Only exporter pods in this namespace count (default: any namespace).", metavar="NAMESPACE"
    )
    exporter_port: int = setting(9400, "Port of the exporters' HTTP server.", metavar="PORT", ge=1, le=65535)
    exporter_scheme: Annotated[Literal["http", "https"], BeforeValidator(lower)] = setting(
        "http", "Scheme of the exporters' HTTP server.", metavar="{http,https}"
    )
    exporter_url_template: str | None = setting(
        None,
        "Instead of finding exporter pods: a URL with {node}, e.g. http://{node}:9400 (host-network exporters).",
        metavar="URL",
    )
    exporter_endpoints: str | None = setting(
        None,
        "Instead of finding exporter pods: a fixed map node=url,... e.g. gpu-1=http://10.0.0.5:9400.",
        metavar="NODE=URL,...",
    )
    exporter_timeout: float = setting(
        1.0, "Seconds to wait for one exporter's /pods.", metavar="SECONDS", gt=0, le=60, allow_inf_nan=False
    )
    exporter_max_document_bytes: int = setting(
        4 * 1024 * 1024,
        "Largest /pods document read from an exporter (bytes, after decompression); a larger one is refused.",
        metavar="BYTES",
        ge=64 * 1024,
        le=1024**3,
    )
    exporter_token_file: Path | None = setting(
        None, "File with a bearer token for exporters that require one.", metavar="FILE"
    )
    exporter_ca_file: Path | None = setting(None, "CA bundle to verify https exporters.", metavar="FILE")
    exporter_refresh: float = setting(
        1.0,
        "Least seconds between two /pods documents a node's exporter sends (0: every snapshot it takes); the "
        "figures' age grows with it, the adapter's work shrinks (docs/install.md, sizing). At 1 an engine's figure "
        "reaches the answers within 2 s (docs/llm-serving.md).",
        metavar="SECONDS",
        ge=0,
        le=3600,
        allow_inf_nan=False,
    )
    keep_warm: float = setting(
        120.0,
        "Seconds a node's /pods is followed in the background after the last query that needed it.",
        metavar="SECONDS",
        ge=0,
        allow_inf_nan=False,
    )
    prometheus_url: str | None = setting(
        None,
        "Base URL of the Prometheus HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics), for metrics answered by the "
        "prometheus source and for a prometheus-adapter --config.",
        metavar="URL",
    )
    prometheus_token_file: Path | None = setting(None, "File with a bearer token for Prometheus.", metavar="FILE")
    prometheus_ca_file: Path | None = setting(None, "CA bundle to verify an https Prometheus.", metavar="FILE")
    prometheus_timeout: float = setting(
        2.0, "Seconds to wait for one PromQL query.", metavar="SECONDS", gt=0, le=60, allow_inf_nan=False
    )
    prometheus_max_response_bytes: int = setting(
        16 * 1024 * 1024,
        "Largest answer read from Prometheus (bytes, after decompression); a larger one is 'source unavailable'.",
        metavar="BYTES",
        ge=64 * 1024,
        le=1024**3,
    )
    # Kubernetes
    kubeconfig: Path | None = setting(
        None,
        "kubeconfig for the Kubernetes API; default: in-cluster service account, then $KUBECONFIG.",
        metavar="FILE",
    )
    client_ca_file: Path | None = setting(
        None,
        "CA bundle for client certificates; default: from the extension-apiserver-authentication ConfigMap.",
        metavar="FILE",
    )
    requestheader_client_ca_file: Path | None = setting(
        None,
        "CA bundle of the aggregator's proxy client certificate; default: from the ConfigMap.",
        metavar="FILE",
    )
    requestheader_allowed_names: CommaList | None = setting(
        None,
        "Common names the aggregator's client certificate may have (default: from the ConfigMap).",
        metavar="CN,...",
    )
    requestheader_username_headers: CommaList | None = setting(
        None, "Headers carrying the user name (default: from the ConfigMap, else X-Remote-User).", metavar="HEADER,..."
    )
    requestheader_group_headers: CommaList | None = setting(
        None, "Headers carrying the groups (default: from the ConfigMap, else X-Remote-Group).", metavar="HEADER,..."
    )
    requestheader_extra_headers_prefix: CommaList | None = setting(
        None, "Header prefixes carrying extra user info (default: from the ConfigMap).", metavar="PREFIX,..."
    )
    authorization_always_allow_paths: CommaList = setting(
        ("/healthz", "/livez", "/readyz", "/metrics"),
        "Paths served without authentication or authorization.",
        metavar="PATH,...",
    )
    # KEDA's external scaler (adapter/keda, docs/hpa.md)
    keda_listen: Annotated[ListenAddress | None, BeforeValidator(_optional_listen)] = setting(
        None,
        "Also serve KEDA's external scaler API (gRPC externalscaler.ExternalScaler) on this address, e.g. "
        "0.0.0.0:9443; default: not served.",
        metavar="HOST:PORT",
    )
    keda_tls: bool = setting(
        False,
        "Serve --keda-listen over TLS with the adapter's serving certificate (--tls-cert-file, or the self-signed "
        "one); KEDA's trigger then names its CA (caCert).",
        metavar="",
    )
    keda_client_ca_file: Path | None = setting(
        None,
        "With --keda-tls: accept only clients presenting a certificate this CA signed (KEDA's tlsClientCert), and "
        "authorize each call for its namespace as the certificate's user (CN; groups from O) by SubjectAccessReview.",
        metavar="FILE",
    )
    keda_activate_after: float = setting(
        0.0,
        "Seconds some selected pod's value must exceed the trigger's activationTarget before an inactive workload "
        "is reported active.",
        metavar="SECONDS",
        ge=0,
        le=3600,
        allow_inf_nan=False,
    )
    keda_deactivate_after: float = setting(
        60.0,
        "Seconds no selected pod's value may exceed activationTarget before an active workload is reported "
        "inactive (then KEDA's cooldownPeriod runs before it scales to zero).",
        metavar="SECONDS",
        ge=0,
        le=86_400,
        allow_inf_nan=False,
    )
    keda_activity_interval: float = setting(
        2.0,
        "Seconds between two observations of the activity of a workload KEDA asks about.",
        metavar="SECONDS",
        ge=0.1,
        le=60,
        allow_inf_nan=False,
    )
    keda_max_streams: int = setting(
        1000,
        "Most StreamIsActive streams open at once; another is refused with RESOURCE_EXHAUSTED.",
        metavar="N",
        ge=1,
        le=100_000,
    )
    keda_max_connections: int = setting(
        64,
        "Most connections the --keda-listen port holds at once, taken from --max-connections (the HTTP port keeps "
        "the rest); the port closes one more as it accepts it.",
        metavar="N",
        ge=1,
        le=100_000,
    )
    keda_call_timeout: float = setting(
        5.0,
        "Seconds a call of the external scaler may take; past it the answer is UNAVAILABLE.",
        metavar="SECONDS",
        gt=0,
        le=60,
        allow_inf_nan=False,
    )
    # logs
    log_level: Annotated[Literal["debug", "info", "warning", "error"], BeforeValidator(lower)] = setting(
        "info", "Log level.", metavar="{debug,info,warning,error}"
    )
    log_format: Annotated[Literal["text", "json"], BeforeValidator(lower)] = setting(
        "text", "Log line format.", metavar="{text,json}"
    )
    demo: bool = setting(
        False,
        "Run the whole pipeline on this machine instead: simulated GPU nodes, a Kubernetes API stand-in and this "
        "adapter (direct source) on --listen (default 127.0.0.1:6443 here), with a kubeconfig for kubectl.",
        metavar="",
    )
    demo_kubeconfig: Path = setting(
        Path("gpu-pulse-demo.kubeconfig"),
        "With --demo: where to write the kubeconfig for kubectl, once the adapter serves.",
        metavar="FILE",
    )
    demo_scale_to_zero: bool = setting(
        False,
        "With --demo: start llm-inference at zero replicas behind a simulated inference gateway, which holds its "
        "requests; the adapter serves them as inference_pending_requests (and KEDA activation, with --keda-listen).",
        metavar="",
    )

    @field_validator("exporter_selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        try:
            parse_selector(value)
        except SelectorError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("exporter_endpoints")
    @classmethod
    def _endpoints(cls, value: str | None) -> str | None:
        if value is not None:
            parse_endpoint_map(value)
        return value

    @field_validator("exporter_url_template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None and ("{node}" not in value or not value.startswith(("http://", "https://"))):
            raise ValueError("must be an http(s) URL containing {node}, e.g. http://{node}:9400")
        return value

    @field_validator("prometheus_url")
    @classmethod
    def _prometheus_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> AdapterSettings:
        if self.demo and self.source != "direct":
            # the demo runs no Prometheus: it would need the binary, scrape configuration and minutes of history before
            # its answers meant anything; the direct source tells the same story on its own (a prometheus-adapter
            # --config with --prometheus-url adds that Prometheus' metrics beside)
            raise ValueError(
                f"--demo serves through the direct source (it runs no Prometheus): leave out --source {self.source}"
            )
        if self.demo_scale_to_zero and not self.demo:
            raise ValueError("--demo-scale-to-zero changes the demo: give --demo too")
        if (
            self.metrics_max_age is not None and self.metrics_max_age < self.metrics_relist_interval
        ):  # prometheus-adapter's makeProvider: "max age must not be less than relist interval"
            raise ValueError("--metrics-max-age must not be less than --metrics-relist-interval")
        if self.source == "prometheus" and self.prometheus_url is None:
            raise ValueError("--source prometheus needs --prometheus-url")
        check_tls_pair(self.tls_cert_file, self.tls_private_key_file)
        if self.exporter_endpoints is not None and self.exporter_url_template is not None:
            raise ValueError("give --exporter-endpoints or --exporter-url-template, not both")
        if self.keda_client_ca_file is not None and not self.keda_tls:
            raise ValueError("--keda-client-ca-file needs --keda-tls: client certificates come with TLS")
        if self.keda_tls and self.keda_listen is None:
            raise ValueError("--keda-tls needs --keda-listen: the external scaler is not served without it")
        if self.keda_listen is not None and self.keda_max_connections >= self.max_connections:
            raise ValueError(
                f"--keda-max-connections {self.keda_max_connections}: must be less than --max-connections "
                f"{self.max_connections}, which it is taken from"
            )
        return self


COMMAND_LINE = CommandLine(
    model=AdapterSettings,
    prog=PROG,
    description="Serve per-pod GPU figures to the HorizontalPodAutoscaler as custom.metrics.k8s.io and "
    "external.metrics.k8s.io; each flag is also an environment variable.",
    env_prefix=ENV_PREFIX,
)


def load_settings(argv: Sequence[str], environ: Mapping[str, str]) -> AdapterSettings:
    """Settings from flags (`argv`, without the program name), then `GPU_PULSE_ADAPTER_*` variables, then defaults.
    Raises toolkit.settings.SettingsError (one line) on a bad value; `--help`/`--version` print and raise
    SystemExit(0)."""
    settings = COMMAND_LINE.load(argv, environ)
    assert isinstance(settings, AdapterSettings)
    return settings
