"""The metrics the adapter serves, as configuration: YAML validated by pydantic, with shipped defaults.

A custom metric describes pods (and, aggregated over their pods, Deployments, StatefulSets, Namespaces and Nodes); an
external metric is one value over the GPUs of the pods a label selector picks in a namespace. Both say which per-pod
figure of the exporter's `/pods` view they read, how a pod's GPUs are combined, the unit and scale, and for the
`prometheus` source which PromQL gives the same figure. A metric may name its own `source` (direct or prometheus);
one that does not is answered by `--source`.

PromQL templates use `$namespace_matcher`, which becomes `namespace="ml"` (or a matcher over several namespaces):
queries select by namespace only and never grow with the number of pods. A `query` returns the figure in the same
unit as the `/pods` figure (before `scale`), one series per pod and device or per pod, each with `namespace` and `pod`
labels; `sample_time_query` returns, per (namespace, pod), the Unix time of the newest sample behind the figure.
"""

from __future__ import annotations

import re
import string
from decimal import Decimal
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from toolkit.inputfiles import InputFileError, read_input_text

NAMESPACE_MATCHER = "namespace_matcher"
_METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]*$")
_RANGE_SELECTOR = re.compile(r"\[\s*[0-9][0-9a-z.]*\s*(?::[^\]]*)?\]")  # [1m], [5m:30s]: a range vector or subquery


class MetricsConfigError(ValueError):
    """A metrics configuration that cannot be used; the message is one line naming the file and the bad field."""


class Figure(StrEnum):
    """Which per-device figure of a pod (toolkit.pods_contract.DeviceFigures) a metric reads."""

    UTILIZATION_PERCENT = "utilization_percent"  # the pod's GPU utilization on the device, 0-100
    MEMORY_USED_BYTES = "memory_used_bytes"  # the pod's framebuffer use on the device
    MEMORY_UTILIZATION = "memory_utilization"  # memory_used_bytes / memory_total_bytes, 0-1
    POWER_WATTS = "power_watts"  # the pod's part of the device's power draw


class Combine(StrEnum):
    """How figures of several devices (a pod's GPUs; the GPUs of all pods of a workload) become one value."""

    MEAN = "mean"
    MAX = "max"
    SUM = "sum"


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PrometheusQuery(_Strict):
    """How the `prometheus` source computes a metric's figure."""

    query: str = Field(description="PromQL template for the figure; use $namespace_matcher inside a selector")
    sample_time_query: str = Field(
        description="PromQL template giving per (namespace, pod) the Unix time of the newest sample behind the figure"
    )
    window_seconds: Annotated[int, Field(gt=0)] | None = Field(
        None,
        description="the span the query averages over (60 for avg_over_time(...[1m])), served as the window; "
        "required when the query has a range selector",
    )

    @field_validator("query", "sample_time_query")
    @classmethod
    def _template(cls, value: str) -> str:
        template = string.Template(value)
        if not template.is_valid():
            raise ValueError("invalid template: write $namespace_matcher for the namespace matcher and $$ for '$'")
        if template.get_identifiers() != [NAMESPACE_MATCHER]:
            raise ValueError("must select by namespace with $namespace_matcher, and use no other placeholder")
        return value

    @model_validator(mode="after")
    def _window_stated(self) -> PrometheusQuery:
        if self.window_seconds is None and _RANGE_SELECTOR.search(self.query):
            raise ValueError(
                "query: a range selector averages over a window: say how long in window_seconds (60 for [1m]), "
                "so the adapter serves the window it really reads"
            )
        return self

    def render(self, namespace_matcher: str) -> tuple[str, str]:
        """The (value query, sample-time query) with the namespace matcher filled in."""
        values = {NAMESPACE_MATCHER: namespace_matcher}
        return string.Template(self.query).substitute(values), string.Template(self.sample_time_query).substitute(
            values
        )


class MetricDefinition(_Strict):
    """One served metric."""

    name: str = Field(description="the metric name clients ask for (a path segment of the API)")
    description: str = ""
    figure: Figure = Field(description="which /pods figure the metric reads")
    combine: Combine = Field(description="how the figures of a pod's GPUs (and of a workload's pods) are combined")
    unit: str = Field("", description="what the served value measures, for people (percent, bytes, watts)")
    scale: Annotated[Decimal, Field(gt=0)] = Field(Decimal(1), description="served value = figure x scale")
    window_seconds: Annotated[int, Field(gt=0)] | None = Field(
        None, description="the window the value averages over; default: as the exporter reports it (direct), 60 s"
    )
    prometheus: PrometheusQuery | None = Field(None, description="how the prometheus source computes the figure")
    source: Literal["direct", "prometheus"] | None = Field(
        None, description="which source answers this metric (direct or prometheus); default: --source"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _METRIC_NAME.match(value):
            raise ValueError("must start with a letter or '_' and hold only letters, digits, '_', '.', ':' or '-'")
        return value

    @model_validator(mode="after")
    def _source_can_answer(self) -> MetricDefinition:
        if self.source == "prometheus" and self.prometheus is None:
            raise ValueError("source: prometheus needs a prometheus block saying how to compute the figure")
        return self

    def source_name(self, default: str) -> str:
        """The source that answers this metric: its own `source`, else `default` (--source)."""
        return self.source or default


class MetricsConfig(_Strict):
    """Every metric the adapter serves: `metrics` under custom.metrics.k8s.io, `external` under
    external.metrics.k8s.io."""

    metrics: tuple[MetricDefinition, ...] = ()
    external: tuple[MetricDefinition, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> MetricsConfig:
        for field_name, definitions in (("metrics", self.metrics), ("external", self.external)):
            seen: set[str] = set()
            for definition in definitions:
                if definition.name in seen:
                    raise ValueError(f"{field_name}: metric name {definition.name!r} is defined twice")
                seen.add(definition.name)
        return self

    def custom(self, name: str) -> MetricDefinition | None:
        return next((d for d in self.metrics if d.name == name), None)

    def external_metric(self, name: str) -> MetricDefinition | None:
        return next((d for d in self.external if d.name == name), None)

    def without_prometheus_queries(self, default_source: str = "prometheus") -> list[str]:
        """Names of metrics the prometheus source would answer (theirs, or `default_source`) that it cannot serve (no
        `prometheus` block)."""
        return [
            d.name
            for d in (*self.metrics, *self.external)
            if d.prometheus is None and d.source_name(default_source) == "prometheus"
        ]

    def source_names(self, default_source: str) -> set[str]:
        """The sources the metrics need: each metric's own, else `default_source`."""
        return {d.source_name(default_source) for d in (*self.metrics, *self.external)}


def _describe(error: ValidationError) -> str:
    """Every problem pydantic found, on one line: a user fixes a file once, not once per problem."""
    problems = []
    for item in error.errors():
        where = ".".join(f"[{part}]" if isinstance(part, int) else str(part) for part in item["loc"]).replace(".[", "[")
        message = item["msg"].removeprefix("Value error, ")
        got = item.get("input")
        shown = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
        problems.append(f"{where or 'top level'}: {message}{shown}")
    return "; ".join(problems)


def parse_metrics_config(text: str, origin: str = "<config>") -> MetricsConfig:
    """Validate a YAML document; raise MetricsConfigError with one line naming `origin` and the bad field."""
    try:
        document = yaml.safe_load(text)
    except RecursionError:
        raise MetricsConfigError(f"{origin}: nested too deep to be a metrics configuration") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise MetricsConfigError(f"{origin}:{where} not valid YAML: {problem}") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise MetricsConfigError(
            f"{origin}: expected a mapping with 'metrics' and 'external', got {type(document).__name__}"
        )
    try:
        return MetricsConfig.model_validate(document)
    except RecursionError:
        raise MetricsConfigError(f"{origin}: nested too deep to be a metrics configuration") from None
    except ValidationError as exc:
        raise MetricsConfigError(f"{origin}: {_describe(exc)}") from None


def load_metrics_config(path: Path) -> MetricsConfig:
    """Read and validate the `--config` file: a regular UTF-8 file of bounded size that defines some metric."""
    origin = f"--config {path}"
    try:
        text = read_input_text(path, "--config")
    except InputFileError as exc:
        raise MetricsConfigError(str(exc)) from None
    config = parse_metrics_config(text, origin)
    if not config.metrics and not config.external:
        raise MetricsConfigError(f"{origin}: defines no metric (both 'metrics' and 'external' are empty)")
    return config


def default_metrics_config() -> MetricsConfig:
    """The shipped defaults (adapter/defaults.yaml)."""
    text = resources.files("adapter").joinpath("defaults.yaml").read_text(encoding="utf-8")
    return parse_metrics_config(text, "adapter/defaults.yaml")
