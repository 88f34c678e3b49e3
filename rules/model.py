"""The rule model: recording rules and alerts, each carrying the promtool unit tests that prove it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class Severity(StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class InputSeries:
    """One promtool input series: `name{labels}` and values in promtool's expanding notation."""

    series: str
    values: str


@dataclass(frozen=True, slots=True)
class Sample:
    """An expected result sample: its full label set in PromQL syntax, and its value."""

    labels: str
    value: float


@dataclass(frozen=True, slots=True)
class ExpectedAlert:
    """An alert expected to fire: its labels (besides alertname and severity) and its expanded description."""

    labels: Mapping[str, str]
    description: str


@dataclass(frozen=True, slots=True)
class AlertCase:
    eval_time: str
    firing: tuple[ExpectedAlert, ...]  # empty: the alert must not fire at eval_time


@dataclass(frozen=True, slots=True)
class ExprCase:
    eval_time: str
    samples: tuple[Sample, ...]
    expr: str | None = None  # None: the recording rule's own name


@dataclass(frozen=True, slots=True)
class RuleTest:
    """A promtool test group: input series and what must (not) happen."""

    name: str
    inputs: tuple[InputSeries, ...]
    alert_cases: tuple[AlertCase, ...] = ()
    expr_cases: tuple[ExprCase, ...] = ()
    interval: str = "1m"


@dataclass(frozen=True, slots=True)
class Recording:
    record: str
    expr: str
    meaning: str  # one sentence for rules/README.md: what the value is, in which unit
    tests: tuple[RuleTest, ...]


@dataclass(frozen=True, slots=True)
class Alert:
    alert: str
    expr: str
    for_: str
    severity: Severity
    summary: str  # a plain sentence, no template
    description: str  # a Go template over $labels and $value
    tests: tuple[RuleTest, ...]
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def anchor(self) -> str:
        """The section anchor in docs/runbooks.md: the alert name in lower case (a `## GPUDown` heading)."""
        return self.alert.lower()


Rule = Recording | Alert


@dataclass(frozen=True, slots=True)
class Group:
    name: str
    rules: tuple[Rule, ...]
    interval: str | None = None
