"""The exporter's settings: one model; each field is a flag and a `GPU_PULSE_*` variable (toolkit.settings reads
them, with the error lines and `--help` both services share)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from exporter.access import DEFAULT_TOKEN_AUDIENCE
from exporter.catalogue import Dialect
from exporter.nvml.errors import BUILTIN_SCENARIO_NAMES
from toolkit.settings import (
    CommandLine,
    ConnectionSettings,
    ListenAddress,
    check_tls_pair,
    lower,
    parse_listen,
    setting,
)

ENV_PREFIX = "GPU_PULSE_"
PROG = "gpu-pulse-exporter"


class ExporterSettings(ConnectionSettings):
    """Every setting of the exporter. Field name `foo_bar` is flag `--foo-bar` and variable `GPU_PULSE_FOO_BAR`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid", frozen=True)

    listen: Annotated[ListenAddress, NoDecode, BeforeValidator(parse_listen)] = setting(
        ListenAddress("0.0.0.0", 9400),
        "Address to serve /metrics, /pods, /healthz, /readyz and / on.",
        metavar="HOST:PORT",
        accepts="host:port, [ipv6]:port or :port",
    )
    interval: float = setting(
        1.0,
        "Seconds between two polls of the GPUs (each scrape gets the newest poll).",
        metavar="SECONDS",
        accepts="a number of seconds from 0.05 to 3600",
        ge=0.05,  # toolkit.pods_contract.INTERVAL_SECONDS_BOUNDS: what a reader of /pods accepts
        le=3600,
        allow_inf_nan=False,
    )
    dialect: Dialect = setting(
        Dialect.DCGM,
        "Metric names and labels: 'dcgm' (dcgm-exporter's, drop-in) or 'prometheus' (base units, promtool-clean).",
        metavar="{dcgm,prometheus}",
        accepts="dcgm or prometheus",
    )
    dcgm_hostname_label: Literal["Hostname", "hostname"] = setting(
        "Hostname",
        "The dcgm dialect's node-name label: 'Hostname' as dcgm-exporter 4.5.3-4.8.2 (the release matched), or "
        "'hostname' as its later releases spell it.",
        metavar="LABEL",
        accepts="Hostname or hostname",
    )
    simulate: str | None = setting(
        None,
        "Run on simulated GPUs: a built-in scenario (" + ", ".join(BUILTIN_SCENARIO_NAMES) + ") or a scenario file "
        "(YAML/JSON).",
        metavar="SCENARIO",
        accepts="a scenario name or file",
    )
    seed: int | None = setting(
        None,
        "Seed of the simulated GPUs' identities and load (with --simulate). Default: the scenario's own seed.",
        metavar="N",
        accepts="an integer >= 0",
        ge=0,
    )
    node_name: str | None = setting(
        None,
        "Node name on every series (Hostname / node label). Default: $NODE_NAME, then with --simulate the scenario's "
        "node, then the host name.",
        metavar="NAME",
        accepts="a non-empty name",
        min_length=1,
    )
    log_level: Annotated[Literal["debug", "info", "warning", "error"], BeforeValidator(lower)] = setting(
        "info", "Least severe log level written.", metavar="LEVEL", accepts="debug, info, warning or error"
    )
    log_format: Annotated[Literal["text", "json"], BeforeValidator(lower)] = setting(
        "text",
        "Log line format: 'text' for people, 'json' for log pipelines.",
        metavar="FORMAT",
        accepts="text or json",
    )
    collectors: Path | None = setting(
        None,
        "File choosing the exported measurements: catalogue keys or metric names one per line, or dcgm-exporter's "
        "counters CSV. Without it, --field-set chooses.",
        metavar="FILE",
        accepts="a readable file",
    )
    kernel_log: Path | None = setting(
        None,
        "Read the XIDs only the kernel log carries (79, 119, 120, as DCGM does) from this file: /dev/kmsg (only a "
        "privileged container can open it), or a pipe or file of its records (the chart's kernelLog relay); a GPU "
        "whose GSP times out (119) is then not called for a minute. With --simulate, the simulated driver writes its "
        "kernel log there. Default: not read.",
        metavar="FILE",
        accepts="a file",
    )
    field_set: Annotated[Literal["default", "all"], BeforeValidator(lower)] = setting(
        "default",
        "Measurements served without --collectors: 'default' is dcgm-exporter's default counters plus what the "
        "shipped alerts, recording rules and node board read; 'all' is every field NVML can give (docs/migration.md).",
        metavar="SET",
        accepts="default or all",
    )
    collectors_exact: bool = setting(
        False,
        "Serve exactly the measurements the --collectors file lists, as dcgm-exporter does, for a fixed series "
        "budget. Default: the measurements the shipped alerts read are served too, and named in the log.",
        metavar="",
        accepts="true or false",
    )
    tls_cert_file: Path | None = setting(
        None,
        "Serve HTTPS with this PEM certificate (chain); needs --tls-private-key-file.",
        metavar="FILE",
        accepts="a file",
    )
    tls_private_key_file: Path | None = setting(
        None, "PEM private key of --tls-cert-file.", metavar="FILE", accepts="a file"
    )
    auth_bearer_token_file: Path | None = setting(
        None,
        "Require 'Authorization: Bearer <token>' on /metrics, /pods and / (token read from this file).",
        metavar="FILE",
        accepts="a file holding the token",
    )
    auth_basic_file: Path | None = setting(
        None,
        "Require HTTP basic auth on /metrics, /pods and /; file lines: 'user:sha256:<hex of sha256(password)>' or "
        "'user:plain:<password>'.",
        metavar="FILE",
        accepts="a credentials file",
    )
    auth_allowed_users: str | None = setting(
        None,
        "Require on /pods a bearer token that the cluster (TokenReview) says belongs to one of these users, comma-"
        "separated; the adapter's ServiceAccount is system:serviceaccount:<namespace>:gpu-pulse-adapter. /metrics and "
        "/ stay open. Uses the in-cluster service account (or --kubeconfig) and needs create on tokenreviews.",
        metavar="USERS",
        accepts="comma-separated user names",
        min_length=1,
    )
    auth_token_audience: str = setting(
        DEFAULT_TOKEN_AUDIENCE,
        "With --auth-allowed-users: the audience the tokens must be bound to (a projected ServiceAccount token made "
        "for it); '' accepts tokens for the API server's own audience.",
        metavar="AUDIENCE",
        accepts="an audience name, or ''",
    )
    # ---- the pod side: kubelet pod-resources, the proc tree, the pod watch ----
    pod_attribution: bool = setting(
        True,
        "Map GPUs and MIG instances to pods through the kubelet's pod-resources socket (--no-pod-attribution on a "
        "host without a kubelet). With --simulate, the simulated node's kubelet is used unless --kubelet-socket is "
        "given.",
        metavar="",
        accepts="true or false",
    )
    kubelet_socket: Path = setting(
        Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
        "The kubelet's pod-resources socket (mount its directory, not the file: the kubelet recreates it). Given with "
        "--simulate, this kubelet is used and the simulated one is not started.",
        metavar="PATH",
        accepts="a unix socket path",
    )
    kubelet_interval: float = setting(
        5.0,
        "Seconds between two pod-resources List calls (never made on a scrape; the kubelet allows 100 qps in all).",
        metavar="SECONDS",
        accepts="a number of seconds > 0 and <= 600",
        gt=0,
        le=600,
        allow_inf_nan=False,
    )
    resource_names: str = setting(
        "",
        "Extra extended-resource names that carry NVIDIA GPUs, comma-separated (nvidia.com/gpu, nvidia.com/gpu.shared "
        "and nvidia.com/mig-* are always read).",
        metavar="NAMES",
        accepts="comma-separated resource names",
    )
    proc_root: Path = setting(
        Path("/proc"),
        "The host's /proc, to tie processes on shared GPUs to pods by cgroup (in a pod: mount the host's /proc here, "
        "or run with hostPID). Given with --simulate, it replaces the simulated node's.",
        metavar="DIR",
        accepts="a directory",
    )
    kubernetes: bool = setting(
        False,
        "Watch this node's pods and DRA ResourceSlices through the Kubernetes API (in-cluster credentials, or "
        "--kubeconfig): to name the pods of processes on shared GPUs, read their labels, and find the GPUs of "
        "ResourceClaims.",
        metavar="",
        accepts="true or false",
    )
    kubeconfig: Path | None = setting(
        None,
        "Kubeconfig for the Kubernetes API instead of the in-cluster service account: the pod and ResourceSlice "
        "watches (implies --kubernetes) and the TokenReviews of --auth-allowed-users.",
        metavar="FILE",
        accepts="a kubeconfig file",
    )
    pod_labels: str | None = setting(
        None,
        "Regular expression of pod label keys copied onto per-pod series as label_<key> (bounded per pod); needs "
        "--kubernetes, as the labels come from the Kubernetes API.",
        metavar="REGEX",
        accepts="a regular expression",
    )

    # ---- the serving engines of GPU pods ----
    engines: bool = setting(
        False,
        "Read the metrics endpoint of each GPU pod's serving engine (vLLM, SGLang, NIM, Triton TensorRT-LLM, Dynamo, "
        "TGI) at its pod IP, found from its annotations or a well-known port, and serve queue, batch, KV-cache and "
        "latency figures per pod. Needs the pod objects: --kubernetes (or --simulate). Off by default: it makes the "
        "exporter dial tenants' pods (docs/security.md).",
        metavar="",
        accepts="true or false",
    )
    engine_interval: float = setting(
        1.0,
        "Seconds between two reads of each engine's endpoint (with --engines); each read has most of this, at most "
        "2 s, to answer.",
        metavar="SECONDS",
        accepts="a number of seconds from 0.1 to 60",
        ge=0.1,
        le=60,
        allow_inf_nan=False,
    )

    @model_validator(mode="after")
    def _exact_needs_a_file(self) -> ExporterSettings:
        if self.collectors_exact and self.collectors is None:
            raise ValueError("--collectors-exact needs --collectors: without a file every measurement is served")
        return self

    @model_validator(mode="after")
    def _pairs(self) -> ExporterSettings:
        check_tls_pair(self.tls_cert_file, self.tls_private_key_file)
        given = [
            flag
            for flag, value in (
                ("--auth-bearer-token-file", self.auth_bearer_token_file),
                ("--auth-basic-file", self.auth_basic_file),
                ("--auth-allowed-users", self.auth_allowed_users),
            )
            if value is not None
        ]
        if len(given) > 1:
            raise ValueError(f"{' and '.join(given)} exclude each other: give one")
        if self.pod_labels is not None and not (self.kubernetes or self.kubeconfig or self.simulate):
            # the kubelet's pod-resources API names pods but not their labels: only the API server has them (a
            # simulated node's scenario gives its pods' labels itself)
            raise ValueError("--pod-labels needs --kubernetes: pod labels come from the Kubernetes API")
        return self


# ---- the command line ------------------------------------------------------------------------------------------------
COMMAND_LINE = CommandLine(
    model=ExporterSettings,
    prog=PROG,
    description="Export NVIDIA GPU metrics, per pod, for Prometheus; each flag is also an environment variable.",
    env_prefix=ENV_PREFIX,
    aliases={"tls-key-file": "tls_private_key_file"},  # the name before 0.2, when it differed from the adapter's
    foreign_env_prefixes=("GPU_PULSE_ADAPTER_", "GPU_PULSE_REPORT_"),
)


def load_settings(
    argv: Sequence[str],
    environ: Mapping[str, str],
    *,
    hostname: Callable[[], str] = socket.gethostname,
) -> ExporterSettings:
    """Settings from flags (`argv`, without the program name), then `GPU_PULSE_*` variables, then defaults.

    `--node-name` falls back to `$NODE_NAME`, then (without `--simulate`, whose scenario names its node) to
    `hostname()`. Raises toolkit.settings.SettingsError with one line on any bad value; `--help` and `--version` print
    and raise SystemExit(0) as argparse does.
    """

    def complete(values: dict[str, Any]) -> dict[str, Any]:
        if not values.get("node_name"):
            # a simulated node is named by its scenario, unless the flags or NODE_NAME say otherwise
            values["node_name"] = environ.get("NODE_NAME") or (None if values.get("simulate") else hostname()) or None
        return values

    settings = COMMAND_LINE.load(argv, environ, complete=complete)
    assert isinstance(settings, ExporterSettings)
    return settings
