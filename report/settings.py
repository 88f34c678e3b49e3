"""The report's settings: one model; each field is a flag and a `GPU_PULSE_REPORT_*` variable (toolkit.settings reads
them, with the error lines and `--help` the services share). The Prometheus flags are the adapter's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from report.window import MAX_WINDOW_SECONDS
from toolkit.durations import parse_duration
from toolkit.settings import CommandLine, lower, setting

ENV_PREFIX = "GPU_PULSE_REPORT_"
PROG = "gpu-pulse-report"


class ReportSettings(BaseSettings):
    """Field `foo_bar` is flag `--foo-bar` and variable `GPU_PULSE_REPORT_FOO_BAR`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid", frozen=True)

    prometheus_url: str | None = setting(
        None,
        "Base URL of the Prometheus HTTP API holding the history (Prometheus, Thanos Query, Mimir with its /prometheus "
        "prefix).",
        metavar="URL",
    )
    prometheus_token_file: Path | None = setting(None, "File with a bearer token for Prometheus.", metavar="FILE")
    prometheus_ca_file: Path | None = setting(None, "CA bundle to verify an https Prometheus.", metavar="FILE")
    prometheus_timeout: float = setting(
        120.0, "Seconds to wait for one query.", metavar="SECONDS", gt=0, le=3600, allow_inf_nan=False
    )
    prometheus_max_response_bytes: int = setting(
        64 * 1024 * 1024,
        "Largest answer read from Prometheus (bytes, after decompression); a larger one stops the report.",
        metavar="BYTES",
        ge=64 * 1024,
        le=4 * 1024**3,
    )
    prometheus_parallel: int = setting(2, "Queries sent at once.", metavar="N", ge=1, le=32)
    max_points: int = setting(
        500_000,
        "Most points (series x steps) one range query may return: queries are cut into time slices to stay under it.",
        metavar="N",
        ge=1000,
        le=11_000_000,
    )
    window: str = setting(
        "7d", "How far back the report looks, ending at --end.", metavar="DURATION", accepts="e.g. 7d, 36h, 1h30m"
    )
    end: float | None = setting(
        None, "End of the window, Unix seconds (default: now).", metavar="SECONDS", gt=0, allow_inf_nan=False
    )
    output: Path = setting(
        Path("gpu-pulse-report"), "Directory to write index.html and report.json into.", metavar="DIR"
    )
    prices: Path | None = setting(
        None, "YAML file of GPU prices per model per hour (docs/rightsizing.md); default: hours only.", metavar="FILE"
    )
    thresholds: Path | None = setting(
        None, "YAML file of thresholds (docs/rightsizing.md); flags below override it.", metavar="FILE"
    )
    idle_utilization: float | None = setting(
        None, "A device at most this busy over a step is idle (default 0.05).", metavar="RATIO"
    )
    reclaim_idle_share: float | None = setting(
        None, "Reclaim a workload idle for at least this share of its GPU-hours (default 0.9).", metavar="RATIO"
    )
    headroom: float | None = setting(None, "Margin a smaller profile leaves above p99 (default 0.2).", metavar="RATIO")
    share_utilization: float | None = setting(
        None, "Utilization p95 under which a whole-GPU workload may share (default 0.3).", metavar="RATIO"
    )
    kubeconfig: Path | None = setting(
        None,
        "kubeconfig for the Kubernetes API: pods' owner references name their workloads (default: kube-state-metrics' "
        "history in Prometheus, else each pod is its own workload).",
        metavar="FILE",
    )
    log_level: Annotated[Literal["debug", "info", "warning", "error"], BeforeValidator(lower)] = setting(
        "warning", "Log level.", metavar="{debug,info,warning,error}"
    )
    log_format: Annotated[Literal["text", "json"], BeforeValidator(lower)] = setting(
        "text", "Log line format.", metavar="{text,json}"
    )
    progress: bool = setting(True, "Show progress on stderr when it is a terminal (never otherwise).", metavar="")

    @field_validator("prometheus_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        if parse_duration(value) > MAX_WINDOW_SECONDS:
            raise ValueError(f"at most {MAX_WINDOW_SECONDS // 86400}d")
        return value

    @model_validator(mode="after")
    def _required(self) -> ReportSettings:
        if self.prometheus_url is None:
            raise ValueError(
                "--prometheus-url (or GPU_PULSE_REPORT_PROMETHEUS_URL) is required: the HTTP API to read from"
            )
        return self

    @property
    def url(self) -> str:
        assert self.prometheus_url is not None  # _required
        return self.prometheus_url

    @property
    def window_seconds(self) -> int:
        return parse_duration(self.window)


COMMAND_LINE = CommandLine(
    model=ReportSettings,
    prog=PROG,
    description="Write a GPU waste and right-sizing report (index.html and report.json) from the history Prometheus "
    "holds; each flag is also an environment variable.",
    env_prefix=ENV_PREFIX,
)


def load_settings(argv: Sequence[str], environ: Mapping[str, str]) -> ReportSettings:
    settings = COMMAND_LINE.load(argv, environ)
    assert isinstance(settings, ReportSettings)
    return settings
