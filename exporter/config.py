"""The exporter's configuration: one pydantic-settings model; each field is a flag and a `GPU_PULSE_*` variable.

Flags win over environment variables, which win over defaults. The command line is generated from the model's fields
(description, default, `metavar`/`accepts` hints), so adding a setting is adding one field here; nothing else changes.
Any bad value fails `load_config` with one line naming the flag or variable and what it accepts.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from exporter.catalogue import Dialect

ENV_PREFIX = "GPU_PULSE_"
PROG = "gpu-pulse-exporter"


def package_version() -> str:
    try:
        return metadata.version("gpu-pulse")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class ConfigError(ValueError):
    """A configuration problem, as the one line the user sees (exit code 2)."""


@dataclass(frozen=True, slots=True)
class ListenAddress:
    host: str  # "0.0.0.0", "::", "127.0.0.1", "localhost", ...
    port: int  # 0: an ephemeral port

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(text: object) -> ListenAddress:
    """`host:port`, `[v6]:port` or `:port` (all interfaces). Raises ValueError with what is accepted."""
    if isinstance(text, ListenAddress):
        return text
    if not isinstance(text, str):
        raise ValueError("expected host:port")
    accepted = "expected host:port, [ipv6]:port or :port, with a port from 0 to 65535"
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError(accepted)
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address; {accepted}") from None
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            raise ValueError(accepted)
        if ":" in host:
            raise ValueError(f"put an IPv6 address in brackets, e.g. [::]:9400; {accepted}")
        if host and not all(part and len(part) <= 63 for part in host.split(".")):
            raise ValueError(f"{host!r} is not a host name or address; {accepted}")
        if any(c.isspace() or c in "/@?#[]" for c in host):
            raise ValueError(f"{host!r} is not a host name or address; {accepted}")
        host = host or "0.0.0.0"
    if not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ValueError(accepted)
    return ListenAddress(host, int(port))


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


def _setting(default: Any, description: str, *, metavar: str, accepts: str, **constraints: Any) -> Any:
    return Field(
        default, description=description, json_schema_extra={"metavar": metavar, "accepts": accepts}, **constraints
    )


class ExporterSettings(BaseSettings):
    """Every setting of the exporter. Field name `foo_bar` is flag `--foo-bar` and variable `GPU_PULSE_FOO_BAR`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid", frozen=True)

    listen: Annotated[ListenAddress, NoDecode, BeforeValidator(parse_listen)] = _setting(
        ListenAddress("0.0.0.0", 9400),
        "Address to serve /metrics, /pods, /healthz, /readyz and / on.",
        metavar="HOST:PORT",
        accepts="host:port, [ipv6]:port or :port",
    )
    interval: float = _setting(
        1.0,
        "Seconds between two polls of the GPUs (each scrape gets the newest poll).",
        metavar="SECONDS",
        accepts="a number of seconds > 0 and <= 3600",
        gt=0,
        le=3600,
        allow_inf_nan=False,
    )
    dialect: Dialect = _setting(
        Dialect.DCGM,
        "Metric names and labels: 'dcgm' (dcgm-exporter's, drop-in) or 'prometheus' (base units, promtool-clean).",
        metavar="{dcgm,prometheus}",
        accepts="dcgm or prometheus",
    )
    dcgm_hostname_label: Literal["Hostname", "hostname"] = _setting(
        "Hostname",
        "The dcgm dialect's node-name label: 'Hostname' as dcgm-exporter 4.5.3-4.8.2 (the release matched), or "
        "'hostname' as its later releases spell it.",
        metavar="LABEL",
        accepts="Hostname or hostname",
    )
    simulate: str | None = _setting(
        None,
        "Run on simulated GPUs: a built-in scenario (h100x8, a100-mig, shared, faulty) or a scenario file (YAML/JSON).",
        metavar="SCENARIO",
        accepts="a scenario name or file",
    )
    seed: int | None = _setting(
        None,
        "Seed of the simulated GPUs' identities and load (with --simulate). Default: the scenario's own seed.",
        metavar="N",
        accepts="an integer >= 0",
        ge=0,
    )
    node_name: str | None = _setting(
        None,
        "Node name on every series (Hostname / node label). Default: $NODE_NAME, then the host name.",
        metavar="NAME",
        accepts="a non-empty name",
        min_length=1,
    )
    log_level: Annotated[Literal["debug", "info", "warning", "error"], BeforeValidator(_lower)] = _setting(
        "info", "Least severe log level written.", metavar="LEVEL", accepts="debug, info, warning or error"
    )
    log_format: Annotated[Literal["text", "json"], BeforeValidator(_lower)] = _setting(
        "text",
        "Log line format: 'text' for people, 'json' for log pipelines.",
        metavar="FORMAT",
        accepts="text or json",
    )
    collectors: Path | None = _setting(
        None,
        "File choosing the exported measurements: catalogue keys or metric names one per line, or dcgm-exporter's "
        "counters CSV. Default: everything.",
        metavar="FILE",
        accepts="a readable file",
    )
    tls_cert_file: Path | None = _setting(
        None, "Serve HTTPS with this PEM certificate (chain); needs --tls-key-file.", metavar="FILE", accepts="a file"
    )
    tls_key_file: Path | None = _setting(None, "PEM private key of --tls-cert-file.", metavar="FILE", accepts="a file")
    auth_bearer_token_file: Path | None = _setting(
        None,
        "Require 'Authorization: Bearer <token>' on /metrics, /pods and / (token read from this file).",
        metavar="FILE",
        accepts="a file holding the token",
    )
    auth_basic_file: Path | None = _setting(
        None,
        "Require HTTP basic auth on /metrics, /pods and /; file lines: 'user:sha256:<hex of sha256(password)>' or "
        "'user:plain:<password>'.",
        metavar="FILE",
        accepts="a credentials file",
    )
    # ---- the pod side: kubelet pod-resources, the proc tree, the pod watch ----
    pod_attribution: bool = _setting(
        True,
        "Map GPUs and MIG instances to pods through the kubelet's pod-resources socket (--no-pod-attribution on a "
        "host without a kubelet). With --simulate, the simulated node's kubelet is used.",
        metavar="",
        accepts="true or false",
    )
    kubelet_socket: Path = _setting(
        Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
        "The kubelet's pod-resources socket (mount its directory, not the file: the kubelet recreates it).",
        metavar="PATH",
        accepts="a unix socket path",
    )
    kubelet_interval: float = _setting(
        5.0,
        "Seconds between two pod-resources List calls (never made on a scrape; the kubelet allows 100 qps in all).",
        metavar="SECONDS",
        accepts="a number of seconds > 0 and <= 600",
        gt=0,
        le=600,
        allow_inf_nan=False,
    )
    resource_names: str = _setting(
        "",
        "Extra extended-resource names that carry NVIDIA GPUs, comma-separated (nvidia.com/gpu, nvidia.com/gpu.shared "
        "and nvidia.com/mig-* are always read).",
        metavar="NAMES",
        accepts="comma-separated resource names",
    )
    proc_root: Path = _setting(
        Path("/proc"),
        "The host's /proc, to tie processes on shared GPUs to pods by cgroup (in a pod: mount the host's /proc here, "
        "or run with hostPID).",
        metavar="DIR",
        accepts="a directory",
    )
    kubernetes: bool = _setting(
        False,
        "Watch this node's pods through the Kubernetes API (in-cluster credentials, or --kubeconfig) to name the pods "
        "of processes on shared GPUs and to read their labels.",
        metavar="",
        accepts="true or false",
    )
    kubeconfig: Path | None = _setting(
        None, "Kubeconfig for the pod watch (implies --kubernetes).", metavar="FILE", accepts="a kubeconfig file"
    )
    pod_labels: str | None = _setting(
        None,
        "Regular expression of pod label keys copied onto per-pod series as label_<key> (bounded per pod).",
        metavar="REGEX",
        accepts="a regular expression",
    )

    @model_validator(mode="after")
    def _pairs(self) -> ExporterSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("--tls-cert-file and --tls-key-file go together: give both or neither")
        if self.auth_bearer_token_file is not None and self.auth_basic_file is not None:
            raise ValueError("--auth-bearer-token-file and --auth-basic-file exclude each other: give one")
        return self


# ---- the command line ------------------------------------------------------------------------------------------------
def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def _hint(info: FieldInfo, key: str) -> str:
    extra = info.json_schema_extra
    value = extra.get(key) if isinstance(extra, dict) else None
    return str(value) if value is not None else ""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own errors: one line, not usage + line
        raise ConfigError(f"{message} (see --help)")


def argument_parser() -> argparse.ArgumentParser:
    """The `--help`-bearing parser, generated from ExporterSettings' fields."""
    parser = _Parser(
        prog=PROG,
        description="Export NVIDIA GPU metrics, per pod, for Prometheus; each flag is also an environment variable.",
        argument_default=argparse.SUPPRESS,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    for name, info in ExporterSettings.model_fields.items():
        default = info.default
        shown = "" if default is None else f"; default: {default.value if hasattr(default, 'value') else default}"
        help_ = f"{info.description} [env {env_name(name)}{shown}]".replace("%", "%%")
        if info.annotation is bool:
            parser.add_argument(flag_name(name), dest=name, action=argparse.BooleanOptionalAction, help=help_)
        else:
            parser.add_argument(flag_name(name), dest=name, metavar=_hint(info, "metavar") or None, help=help_)
    return parser


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source, reading a given mapping instead of os.environ (injected, testable)."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


def _explain(error: ValidationError, from_cli: Mapping[str, Any]) -> str:
    problems = []
    for item in error.errors():
        loc = item.get("loc") or ()
        message = str(item.get("msg", "invalid value")).removeprefix("Value error, ")
        if not loc or loc[0] not in ExporterSettings.model_fields:
            problems.append(message)
            continue
        field = str(loc[0])
        where = flag_name(field) if field in from_cli else env_name(field)
        accepts = _hint(ExporterSettings.model_fields[field], "accepts")
        enumerated = message.startswith("Input should be '")  # pydantic already lists the choices
        hint = f" (accepts {accepts})" if accepts and not enumerated else ""
        problems.append(f"{where}: {message}{hint}, got {item.get('input')!r}")
    return "; ".join(problems)


def load_config(
    argv: Sequence[str],
    environ: Mapping[str, str],
    *,
    hostname: Callable[[], str] = socket.gethostname,
) -> ExporterSettings:
    """Settings from flags (`argv`, without the program name), then `GPU_PULSE_*` variables, then defaults.

    `--node-name` falls back to `$NODE_NAME`, then to `hostname()`. Raises ConfigError with one line on any bad value;
    `--help` and `--version` print and raise SystemExit(0) as argparse does.
    """
    from_cli = vars(argument_parser().parse_args(list(argv)))
    try:
        from_env = _MappingEnvSource(ExporterSettings, environ)()
    except Exception as error:  # a value pydantic-settings cannot even decode (JSON for structured settings)
        found = re.search(r'field "(\w+)"', str(error))
        where = env_name(found.group(1)) if found else "environment"
        raise ConfigError(f"{where}: cannot parse the value: {error}".splitlines()[0]) from None
    values = {**from_env, **from_cli}
    if not values.get("node_name"):
        values["node_name"] = environ.get("NODE_NAME") or hostname() or None
    try:
        return ExporterSettings.model_validate(values)
    except ValidationError as error:
        raise ConfigError(_explain(error, from_cli)) from None
