"""A rule's `metricsQuery` filled in for one question: prometheus-adapter pkg/naming/metrics_query.go.

The template gets `.Series` (the series' name), `.LabelMatchers` (the label matchers, comma-separated), `.GroupBy`
(the resource's label, comma-separated with any extra ones), `.GroupBySlice` and `.LabelValuesByName`. The matchers
are, in this order: one per requirement of the metric label selector (sorted by key, as labels.Parse sorts them),
the namespace (its label from the rule's resources) when the question has one, then the described objects' label:
`pod="a"` for one name, `pod=~"a|b"` for several (names joined as they are, not escaped, as upstream joins them).

A selector becomes matchers as `processQueryParts` makes them: `=`/`==` one value `label="v"`, `!=` `label!="v"`,
`in` with one value `=~"v"` and with several `=~"a|b"`, `notin` `!~`, exists `label!=""`, does-not-exist
`label=""`; `>` and `<` have no PromQL matcher and refuse the question (ErrUnsupportedOperator). Values are quoted as
Go's `%q` quotes them (pkg/client/helpers.go), which PromQL reads back.

`timestamps()` is gpu-pulse's own: the same matchers and grouping around `timestamp()`, giving each object the time of
its newest raw sample, which is served as the value's timestamp where prometheus-adapter serves "now".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from adapter.promadapter.gotemplate import Template, TemplateError, parse_template
from adapter.promadapter.restmapper import NAMESPACES, GroupResource
from adapter.selectors import Operator, Selector

QUERY_FIELDS = ("Series", "LabelMatchers", "GroupBy", "GroupBySlice")
QUERY_MAPS = ("LabelValuesByName",)

# pkg/naming/errors.go
UNSUPPORTED_OPERATOR = "operator not supported by prometheus"
MALFORMED_QUERY = "operator requires values"
UNSUPPORTED_VALUES = "operator does not support values"


class QueryError(Exception):
    """The question cannot become a query (an operator PromQL has no matcher for, no label for a resource)."""


class LabelSource(Protocol):
    def label_for_resource(self, resource: GroupResource) -> str: ...


def go_quote(text: str) -> str:
    """Go's strconv.Quote (fmt `%q`): a double-quoted literal with Go's escapes, printable characters kept."""
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char in "\a\b\f\n\r\t\v":
            out.append(
                {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}[char]
            )
        elif char.isprintable() or char == " ":
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def _matcher(label: str, operator: Operator, values: Sequence[str]) -> str:
    """selectMatcher and selectTargetValue of metrics_query.go, together."""
    if operator in (Operator.GREATER_THAN, Operator.LESS_THAN):
        raise QueryError(UNSUPPORTED_OPERATOR)
    existence = operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST)
    if not values:
        if not existence:
            raise QueryError(MALFORMED_QUERY)
        return f'{label}!=""' if operator is Operator.EXISTS else f'{label}=""'
    if existence:
        raise QueryError(UNSUPPORTED_VALUES)
    target = go_quote("|".join(values))
    if len(values) == 1:
        symbol = {
            Operator.EQUALS: "=",
            Operator.DOUBLE_EQUALS: "=",
            Operator.NOT_EQUALS: "!=",
            Operator.IN: "=~",
            Operator.NOT_IN: "!~",
        }[operator]
    else:
        symbol = "!~" if operator in (Operator.NOT_EQUALS, Operator.NOT_IN) else "=~"
    return f"{label}{symbol}{target}"


def selector_matchers(selector: Selector) -> tuple[list[str], dict[str, str]]:
    """The matchers and values by label of a metric label selector (requirements sorted by key)."""
    expressions: list[str] = []
    by_name: dict[str, str] = {}
    for requirement in sorted(selector.requirements, key=lambda r: r.key):
        if not requirement.key:
            raise QueryError("label not specified")
        values = sorted(set(requirement.values))
        expressions.append(_matcher(requirement.key, requirement.operator, values))
        by_name[requirement.key] = "|".join(values)
    return expressions, by_name


@dataclass(frozen=True)
class BuiltQuery:
    """A filled-in metricsQuery, and what went into it."""

    query: str
    series: str
    label_matchers: str
    group_by: str

    def timestamps(self) -> str:
        """The newest raw sample's time per group (gpu-pulse's own query; see the module's docstring)."""
        inner = f"timestamp({self.series}{{{self.label_matchers}}})"
        return f"max by ({self.group_by}) ({inner})" if self.group_by else f"max({inner})"


class MetricsQuery:
    """A rule's compiled `metricsQuery` (NewExternalMetricsQuery: `namespaced` only matters to external rules)."""

    def __init__(self, template: str, labels: LabelSource, namespaced: bool = True) -> None:
        try:
            self.template: Template = parse_template(template, QUERY_FIELDS, QUERY_MAPS)
        except TemplateError as exc:
            raise ValueError(f"unable to parse metrics query template {template!r}: {exc}") from None
        self._labels = labels
        self.namespaced = namespaced

    def _label(self, resource: GroupResource) -> str:
        try:
            return self._labels.label_for_resource(resource)
        except Exception as exc:  # LabelError, or whatever a test's converter raises
            raise QueryError(str(exc)) from None

    def _fill(self, series: str, expressions: list[str], by_name: dict[str, str], group_by: list[str]) -> BuiltQuery:
        matchers = ",".join(expressions)
        query = self.template.execute(
            {
                "Series": series,
                "LabelMatchers": matchers,
                "LabelValuesByName": by_name,
                "GroupBy": ",".join(group_by),
                "GroupBySlice": group_by,
            }
        )
        if not query:
            raise QueryError("empty query produced by metrics query template")
        return BuiltQuery(query, series, matchers, ",".join(group_by))

    def build(
        self,
        series: str,
        resource: GroupResource,
        namespace: str,
        extra_group_by: Sequence[str],
        metric_selector: Selector,
        names: Sequence[str],
    ) -> BuiltQuery:
        """`Build`: the query about objects `names` of `resource` (in `namespace`, "" for cluster-scoped ones)."""
        expressions, by_name = selector_matchers(metric_selector)
        if namespace:
            label = self._label(NAMESPACES)
            expressions.append(_matcher(label, Operator.EQUALS, [namespace]))
            by_name[label] = namespace
        resource_label = self._label(resource)
        target = "|".join(names)
        symbol = "=~" if len(names) > 1 else "="
        expressions.append(f"{resource_label}{symbol}{go_quote(target)}")
        by_name[resource_label] = target
        return self._fill(series, expressions, by_name, [resource_label, *extra_group_by])

    def build_external(
        self, series: str, namespace: str, group_by: str, group_by_slice: Sequence[str], metric_selector: Selector
    ) -> BuiltQuery:
        """`BuildExternal`: the query of an external metric in `namespace`."""
        expressions, by_name = selector_matchers(metric_selector)
        if self.namespaced and namespace:
            label = self._label(NAMESPACES)
            expressions.append(_matcher(label, Operator.EQUALS, [namespace]))
            by_name[label] = namespace
        matchers = ",".join(expressions)
        query = self.template.execute(
            {
                "Series": series,
                "LabelMatchers": matchers,
                "LabelValuesByName": by_name,
                "GroupBy": group_by,
                "GroupBySlice": list(group_by_slice),
            }
        )
        if not query:
            raise QueryError("empty query produced by metrics query template")
        return BuiltQuery(query, series, matchers, group_by)
