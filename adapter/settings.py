"""The adapter's configuration: one pydantic-settings model; each field is a flag and a `GPU_PULSE_ADAPTER_*` variable.

Flags win over environment variables, which win over defaults. The command line is generated from the fields (their
description, default and hints), so a new setting is one new field. A bad value fails `load_settings` with one line
naming the flag or variable and what it accepts; the CLI prints it and exits with code 2.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from adapter.selectors import SelectorError, parse_selector
from adapter.sources.exporters import parse_endpoint_map

ENV_PREFIX = "GPU_PULSE_ADAPTER_"
PROG = "gpu-pulse-adapter"


def package_version() -> str:
    try:
        return metadata.version("gpu-pulse")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class SettingsError(ValueError):
    """A configuration problem, as the one line the user sees (exit code 2)."""


@dataclass(frozen=True, slots=True)
class ListenAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(text: object) -> ListenAddress:
    """`host:port`, `[v6]:port` or `:port` (all interfaces)."""
    if isinstance(text, ListenAddress):
        return text
    accepted = "expected host:port, [ipv6]:port or :port with a port from 0 to 65535"
    if not isinstance(text, str):
        raise ValueError(accepted)
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(accepted) from None
    else:
        host, sep, port = text.rpartition(":")
        if ":" in host or any(c.isspace() or c in "/@?#[]" for c in host):
            raise ValueError(accepted)
        host = host or "0.0.0.0"
    if not sep or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ValueError(accepted)
    return ListenAddress(host, int(port))


def _comma_list(value: object) -> object:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


CommaList = Annotated[tuple[str, ...], BeforeValidator(_comma_list)]


def _setting(default: Any, description: str, *, metavar: str, **constraints: Any) -> Any:
    return Field(default, description=description, json_schema_extra={"metavar": metavar}, **constraints)


class AdapterSettings(BaseSettings):
    """Every setting of the adapter. Field `foo_bar` is flag `--foo-bar` and variable `GPU_PULSE_ADAPTER_FOO_BAR`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid", frozen=True)

    # serving
    listen: Annotated[ListenAddress, BeforeValidator(parse_listen)] = _setting(
        ListenAddress("0.0.0.0", 6443), "Address to serve the API on (TLS).", metavar="HOST:PORT"
    )
    max_connections: int = _setting(
        512,
        "Most connections served at once. At the cap, the connection that has waited longest for a request makes "
        "room for a new one; when all are busy, a new one gets 503. The open-file limit is raised to fit.",
        metavar="N",
        ge=1,
        le=1_000_000,
    )
    header_read_timeout: float = _setting(
        10.0,
        "Seconds a client has to finish the TLS handshake and send a whole request head.",
        metavar="SECONDS",
        gt=0,
        le=3600,
        allow_inf_nan=False,
    )
    idle_timeout: float = _setting(
        60.0,
        "Seconds a kept-alive connection may wait for its next request before it is closed.",
        metavar="SECONDS",
        gt=0,
        le=86_400,
        allow_inf_nan=False,
    )
    tls_cert_file: Path | None = _setting(
        None, "PEM serving certificate (with its chain); default: a self-signed one in --cert-dir.", metavar="FILE"
    )
    tls_private_key_file: Path | None = _setting(None, "PEM private key of --tls-cert-file.", metavar="FILE")
    cert_dir: Path = _setting(
        Path("/tmp/gpu-pulse-adapter"),
        "Directory for the generated self-signed certificate when --tls-cert-file is not given.",
        metavar="DIR",
    )
    # metrics and where their numbers come from
    config: Path | None = _setting(
        None,
        "YAML file defining the served metrics; default: the shipped defaults (adapter/defaults.yaml).",
        metavar="FILE",
    )
    source: Annotated[Literal["direct", "prometheus"], BeforeValidator(_lower)] = _setting(
        "direct",
        "Where figures come from: 'direct' (each node's exporter /pods) or 'prometheus' (PromQL over the HTTP API).",
        metavar="{direct,prometheus}",
    )
    max_age: float | None = _setting(
        None,
        "Seconds after which a figure is too old to serve (left out instead); "
        "default: 3 x the exporter's interval + 2 (direct), 60 (prometheus).",
        metavar="SECONDS",
        gt=0,
        allow_inf_nan=False,
    )
    exporter_selector: str = _setting(
        "app.kubernetes.io/name=gpu-pulse-exporter",
        "Label selector of the exporter pods (direct source): each node's exporter is found by it in the pod cache.",
        metavar="SELECTOR",
    )
    exporter_namespace: str | None = _setting(
        None, "Only exporter pods in this namespace count (default: any namespace).", metavar="NAMESPACE"
    )
    exporter_port: int = _setting(9400, "Port of the exporters' HTTP server.", metavar="PORT", ge=1, le=65535)
    exporter_scheme: Annotated[Literal["http", "https"], BeforeValidator(_lower)] = _setting(
        "http", "Scheme of the exporters' HTTP server.", metavar="{http,https}"
    )
    exporter_url_template: str | None = _setting(
        None,
        "Instead of finding exporter pods: a URL with {node}, e.g. http://{node}:9400 (host-network exporters).",
        metavar="URL",
    )
    exporter_endpoints: str | None = _setting(
        None,
        "Instead of finding exporter pods: a fixed map node=url,... e.g. gpu-1=http://10.0.0.5:9400.",
        metavar="NODE=URL,...",
    )
    exporter_timeout: float = _setting(
        1.0, "Seconds to wait for one exporter's /pods.", metavar="SECONDS", gt=0, le=60, allow_inf_nan=False
    )
    exporter_max_document_bytes: int = _setting(
        4 * 1024 * 1024,
        "Largest /pods document read from an exporter (bytes, after decompression); a larger one is refused.",
        metavar="BYTES",
        ge=64 * 1024,
        le=1024**3,
    )
    exporter_token_file: Path | None = _setting(
        None, "File with a bearer token for exporters that require one.", metavar="FILE"
    )
    exporter_ca_file: Path | None = _setting(None, "CA bundle to verify https exporters.", metavar="FILE")
    keep_warm: float = _setting(
        120.0,
        "Seconds a node's /pods is kept fresh in the background after the last query that needed it.",
        metavar="SECONDS",
        ge=0,
        allow_inf_nan=False,
    )
    prometheus_url: str | None = _setting(
        None,
        "Base URL of the Prometheus HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics) for --source prometheus.",
        metavar="URL",
    )
    prometheus_token_file: Path | None = _setting(None, "File with a bearer token for Prometheus.", metavar="FILE")
    prometheus_ca_file: Path | None = _setting(None, "CA bundle to verify an https Prometheus.", metavar="FILE")
    prometheus_timeout: float = _setting(
        2.0, "Seconds to wait for one PromQL query.", metavar="SECONDS", gt=0, le=60, allow_inf_nan=False
    )
    prometheus_max_response_bytes: int = _setting(
        16 * 1024 * 1024,
        "Largest answer read from Prometheus (bytes, after decompression); a larger one is 'source unavailable'.",
        metavar="BYTES",
        ge=64 * 1024,
        le=1024**3,
    )
    # Kubernetes
    kubeconfig: Path | None = _setting(
        None,
        "kubeconfig for the Kubernetes API; default: in-cluster service account, then $KUBECONFIG.",
        metavar="FILE",
    )
    client_ca_file: Path | None = _setting(
        None,
        "CA bundle for client certificates; default: from the extension-apiserver-authentication ConfigMap.",
        metavar="FILE",
    )
    requestheader_client_ca_file: Path | None = _setting(
        None,
        "CA bundle of the aggregator's proxy client certificate; default: from the ConfigMap.",
        metavar="FILE",
    )
    requestheader_allowed_names: CommaList | None = _setting(
        None,
        "Common names the aggregator's client certificate may have (default: from the ConfigMap).",
        metavar="CN,...",
    )
    requestheader_username_headers: CommaList | None = _setting(
        None, "Headers carrying the user name (default: from the ConfigMap, else X-Remote-User).", metavar="HEADER,..."
    )
    requestheader_group_headers: CommaList | None = _setting(
        None, "Headers carrying the groups (default: from the ConfigMap, else X-Remote-Group).", metavar="HEADER,..."
    )
    requestheader_extra_headers_prefix: CommaList | None = _setting(
        None, "Header prefixes carrying extra user info (default: from the ConfigMap).", metavar="PREFIX,..."
    )
    authorization_always_allow_paths: CommaList = _setting(
        ("/healthz", "/livez", "/readyz", "/metrics"),
        "Paths served without authentication or authorization.",
        metavar="PATH,...",
    )
    # logs
    log_level: Annotated[Literal["debug", "info", "warning", "error"], BeforeValidator(_lower)] = _setting(
        "info", "Log level.", metavar="{debug,info,warning,error}"
    )
    log_format: Annotated[Literal["text", "json"], BeforeValidator(_lower)] = _setting(
        "text", "Log line format.", metavar="{text,json}"
    )
    demo: bool = _setting(
        False,
        "Run the whole pipeline on this machine instead: simulated GPU nodes, a Kubernetes API stand-in and this "
        "adapter (direct source) on --listen (default 127.0.0.1:6443 here), with a kubeconfig for kubectl.",
        metavar="",
    )
    demo_kubeconfig: Path = _setting(
        Path("gpu-pulse-demo.kubeconfig"),
        "With --demo: where to write the kubeconfig for kubectl, once the adapter serves.",
        metavar="FILE",
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
        if self.source == "prometheus" and self.prometheus_url is None:
            raise ValueError("--source prometheus needs --prometheus-url")
        if (self.tls_cert_file is None) != (self.tls_private_key_file is None):
            raise ValueError("--tls-cert-file and --tls-private-key-file go together")
        if self.exporter_endpoints is not None and self.exporter_url_template is not None:
            raise ValueError("give --exporter-endpoints or --exporter-url-template, not both")
        return self


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def _metavar(info: FieldInfo) -> str | None:
    extra = info.json_schema_extra
    value = extra.get("metavar") if isinstance(extra, dict) else None
    return str(value) if value is not None else None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own errors: one line, not usage + line
        raise SettingsError(f"{message} (see --help)")


def _shown_default(default: object) -> str:
    if default is None:
        return ""
    if isinstance(default, tuple):
        return f"; default: {','.join(default)}"
    return f"; default: {default}"


def argument_parser() -> argparse.ArgumentParser:
    """The `--help`-bearing parser, generated from AdapterSettings' fields."""
    parser = _Parser(
        prog=PROG,
        description="Serve per-pod GPU figures to the HorizontalPodAutoscaler as custom.metrics.k8s.io and "
        "external.metrics.k8s.io; each flag is also an environment variable.",
        argument_default=argparse.SUPPRESS,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    for name, info in AdapterSettings.model_fields.items():
        help_ = f"{info.description} [env {env_name(name)}{_shown_default(info.default)}]".replace("%", "%%")
        if info.annotation is bool:
            parser.add_argument(flag_name(name), dest=name, action=argparse.BooleanOptionalAction, help=help_)
        else:
            parser.add_argument(flag_name(name), dest=name, metavar=_metavar(info), help=help_)
    return parser


def _explain(error: ValidationError, from_cli: Mapping[str, Any]) -> str:
    problems = []
    for item in error.errors():
        loc = item.get("loc") or ()
        message = str(item.get("msg", "invalid value")).removeprefix("Value error, ")
        if not loc or loc[0] not in AdapterSettings.model_fields:
            problems.append(message)
            continue
        field = str(loc[0])
        where = flag_name(field) if field in from_cli else env_name(field)
        problems.append(f"{where}: {message} (got {item.get('input')!r})")
    return "; ".join(problems)


def load_settings(argv: Sequence[str], environ: Mapping[str, str]) -> AdapterSettings:
    """Settings from flags (`argv`, without the program name), then `GPU_PULSE_ADAPTER_*` variables, then defaults.
    Raises SettingsError (one line) on a bad value; `--help`/`--version` print and raise SystemExit(0)."""
    from_cli = vars(argument_parser().parse_args(list(argv)))
    from_env = {
        field: environ[env_name(field)]
        for field in AdapterSettings.model_fields
        if environ.get(env_name(field), "") != ""
    }
    unknown = sorted(
        k
        for k in environ
        if k.startswith(ENV_PREFIX) and k.removeprefix(ENV_PREFIX).lower() not in AdapterSettings.model_fields
    )
    if unknown:
        raise SettingsError(f"{unknown[0]}: not a setting of {PROG} (see --help)")
    try:
        return AdapterSettings.model_validate({**from_env, **from_cli})
    except ValidationError as error:
        raise SettingsError(_explain(error, from_cli)) from None
