"""The metrics the adapter serves, as configuration: YAML validated by pydantic, with shipped defaults.

A custom metric describes pods (and, aggregated over their pods, Deployments, StatefulSets, Namespaces and Nodes); an
external metric is one value over the GPUs of the pods a label selector picks in a namespace. Both say which per-pod
figure of the exporter's `/pods` view they read, how a pod's GPUs are combined, the unit and scale, and for the
`prometheus` source which PromQL gives the same figure. A metric may name its own `source` (direct or prometheus);
one that does not is answered by `--source`.

A figure is of one of two kinds: a device figure (one per GPU a pod uses: utilization, memory, power) or an inference
figure (one per pod: what the serving engine in it reports, toolkit.pods_contract.InferenceFigures). A latency figure
is a percentile, and its metric says which (`percentile`); its PromQL may write `$quantile` for it.

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

from adapter.demand.config import DemandDefinition
from adapter.saturation import SaturationSpec
from adapter.saturation import prometheus_queries as saturation_queries
from toolkit.inputfiles import InputFileError, read_input_text

NAMESPACE_MATCHER = "namespace_matcher"
QUANTILE = "quantile"
_METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]*$")
_RANGE_SELECTOR = re.compile(r"\[\s*[0-9][0-9a-z.]*\s*(?::[^\]]*)?\]")  # [1m], [5m:30s]: a range vector or subquery


class MetricsConfigError(ValueError):
    """A metrics configuration that cannot be used; the message is one line naming the file and the bad field."""


class Figure(StrEnum):
    """Which figure of a pod a metric reads: one of each GPU it uses (toolkit.pods_contract.DeviceFigures), or one of
    the serving engine in it (toolkit.pods_contract.InferenceFigures, served only while the engine is ready)."""

    UTILIZATION_PERCENT = "utilization_percent"  # the pod's GPU utilization on the device, 0-100
    MEMORY_USED_BYTES = "memory_used_bytes"  # the pod's framebuffer use on the device
    MEMORY_UTILIZATION = "memory_utilization"  # memory_used_bytes / memory_total_bytes, 0-1
    POWER_WATTS = "power_watts"  # the pod's part of the device's power draw
    QUEUED_REQUESTS = "queued_requests"  # requests waiting in the engine
    RUNNING_REQUESTS = "running_requests"  # requests the engine is working on
    KV_CACHE_UTILIZATION = "kv_cache_utilization"  # the engine's KV-cache use, 0-1
    TIME_TO_FIRST_TOKEN_SECONDS = "time_to_first_token_seconds"  # a percentile over the exporter's window
    INTER_TOKEN_LATENCY_SECONDS = "inter_token_latency_seconds"  # a percentile over the exporter's window
    REQUESTS_PER_SECOND = "requests_per_second"  # finished requests, per second over the window
    GENERATED_TOKENS_PER_SECOND = "generated_tokens_per_second"  # output tokens, per second over the window
    SATURATION = "saturation"  # the largest of the engine's signals over their targets, percent (adapter.saturation)

    @property
    def of_inference(self) -> bool:
        """Whether the figure is the serving engine's (one per pod), not a GPU's."""
        return self not in _DEVICE_FIGURES

    @property
    def is_latency(self) -> bool:
        """Whether the figure is a latency distribution, read at a percentile."""
        return self in _LATENCY_FIGURES


_DEVICE_FIGURES = frozenset(
    {Figure.UTILIZATION_PERCENT, Figure.MEMORY_USED_BYTES, Figure.MEMORY_UTILIZATION, Figure.POWER_WATTS}
)
_LATENCY_FIGURES = frozenset({Figure.TIME_TO_FIRST_TOKEN_SECONDS, Figure.INTER_TOKEN_LATENCY_SECONDS})


class Percentile(StrEnum):
    """Which percentile of a latency figure a metric reads (toolkit.pods_contract.LatencyQuantiles)."""

    P50 = "p50"
    P90 = "p90"
    P99 = "p99"

    @property
    def quantile(self) -> str:
        """The percentile as a quantile, as Prometheus labels write it (`quantile="0.9"`)."""
        return _QUANTILES[self]


_QUANTILES = {Percentile.P50: "0.5", Percentile.P90: "0.9", Percentile.P99: "0.99"}


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
        identifiers = set(template.get_identifiers())
        if NAMESPACE_MATCHER not in identifiers or not identifiers <= {NAMESPACE_MATCHER, QUANTILE}:
            raise ValueError(
                "must select by namespace with $namespace_matcher, and use no other placeholder than $quantile"
            )
        return value

    @property
    def uses_quantile(self) -> bool:
        return any(QUANTILE in string.Template(q).get_identifiers() for q in (self.query, self.sample_time_query))

    @model_validator(mode="after")
    def _window_stated(self) -> PrometheusQuery:
        if self.window_seconds is None and _RANGE_SELECTOR.search(self.query):
            raise ValueError(
                "query: a range selector averages over a window: say how long in window_seconds (60 for [1m]), "
                "so the adapter serves the window it really reads"
            )
        return self

    def render(self, namespace_matcher: str, quantile: str | None = None) -> tuple[str, str]:
        """The (value query, sample-time query) with the namespace matcher (and the quantile, for a latency figure's
        `$quantile`) filled in."""
        values = {NAMESPACE_MATCHER: namespace_matcher}
        if quantile is not None:
            values[QUANTILE] = quantile
        return string.Template(self.query).substitute(values), string.Template(self.sample_time_query).substitute(
            values
        )


class MetricDefinition(_Strict):
    """One served metric."""

    name: str = Field(description="the metric name clients ask for (a path segment of the API)")
    description: str = ""
    figure: Figure = Field(description="which /pods figure the metric reads")
    percentile: Percentile | None = Field(
        None, description="which percentile of a latency figure the metric reads (p50, p90, p99); latency figures only"
    )
    combine: Combine = Field(
        description="how the figures of a pod's GPUs (and of a workload's pods) are combined; an inference figure is "
        "one per pod, combined over a workload's pods"
    )
    unit: str = Field("", description="what the served value measures, for people (percent, bytes, watts)")
    scale: Annotated[Decimal, Field(gt=0)] = Field(Decimal(1), description="served value = figure x scale")
    window_seconds: Annotated[int, Field(gt=0)] | None = Field(
        None, description="the window the value averages over; default: as the exporter reports it (direct), 60 s"
    )
    prometheus: PrometheusQuery | None = Field(None, description="how the prometheus source computes the figure")
    source: Literal["direct", "prometheus"] | None = Field(
        None, description="which source answers this metric (direct or prometheus); default: --source"
    )
    saturation: SaturationSpec | None = Field(
        None, description="the terms, targets, idle floor and cap of a saturation figure (adapter.saturation)"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _METRIC_NAME.match(value):
            raise ValueError("must start with a letter or '_' and hold only letters, digits, '_', '.', ':' or '-'")
        return value

    @model_validator(mode="after")
    def _percentile_of_latency_only(self) -> MetricDefinition:
        if self.figure.is_latency and self.percentile is None:
            raise ValueError(f"percentile: {self.figure} is a distribution: say which percentile (p50, p90 or p99)")
        if not self.figure.is_latency and self.percentile is not None:
            raise ValueError(f"percentile: {self.figure} is not a latency figure, it has no percentile")
        if self.prometheus is not None and self.prometheus.uses_quantile and self.percentile is None:
            raise ValueError("prometheus: $quantile stands for the percentile of a latency figure, and this has none")
        return self

    def prometheus_queries(self, namespace_matcher: str) -> tuple[str, str]:
        """The (value query, sample-time query) of the prometheus source, for the namespaces `namespace_matcher`
        selects; ValueError when the metric has no `prometheus` block."""
        if self.prometheus is None:
            raise ValueError(f"metric {self.name} has no prometheus query")
        quantile = None if self.percentile is None else self.percentile.quantile
        return self.prometheus.render(namespace_matcher, quantile)

    @model_validator(mode="after")
    def _saturation_has_its_terms(self) -> MetricDefinition:
        """A saturation figure says its terms in a `saturation` block (kept with its preset resolved), and its PromQL
        is built from them, for both sources to serve one figure from one configuration."""
        if self.figure is not Figure.SATURATION:
            if self.saturation is not None:
                raise ValueError(f"saturation: only a saturation figure has terms, and this reads {self.figure}")
            return self
        if self.saturation is None:
            raise ValueError("saturation: a saturation figure needs a saturation block naming its terms and targets")
        if self.prometheus is not None:
            raise ValueError(
                "prometheus: a saturation figure's PromQL is built from its terms: leave the prometheus block out"
            )
        spec = self.saturation.resolved()
        query, sample_time_query = saturation_queries(spec)
        # the model is frozen: the resolved spec and the built queries are set once, here, as it is validated
        object.__setattr__(self, "saturation", spec)
        object.__setattr__(
            self,
            "prometheus",
            PrometheusQuery(query=query, sample_time_query=sample_time_query, window_seconds=60),
        )
        return self

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
    # requests waiting at gateways, served as External metrics even with no pod (adapter/demand/config.py)
    demand: tuple[DemandDefinition, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> MetricsConfig:
        for field_name, definitions in (("metrics", self.metrics), ("external", self.external)):
            seen: set[str] = set()
            for definition in definitions:
                if definition.name in seen:
                    raise ValueError(f"{field_name}: metric name {definition.name!r} is defined twice")
                seen.add(definition.name)
        clashing = {d.name for d in self.demand} & {d.name for d in self.external}
        if clashing:
            raise ValueError(f"demand: {', '.join(sorted(clashing))} is also an external metric: name it once")
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
    if not config.metrics and not config.external and not config.demand:
        raise MetricsConfigError(f"{origin}: defines no metric ('metrics', 'external' and 'demand' are all empty)")
    return config


def default_metrics_config() -> MetricsConfig:
    """The shipped defaults (adapter/defaults.yaml)."""
    text = resources.files("adapter").joinpath("defaults.yaml").read_text(encoding="utf-8")
    return parse_metrics_config(text, "adapter/defaults.yaml")
