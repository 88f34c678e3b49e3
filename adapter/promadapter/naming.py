"""A rule made ready to use: which series it keeps, what it names them, how it asks about them.

prometheus-adapter pkg/naming/metric_namer.go (`NamersFromConfig`, `metricNamer`, `ReMatcher`):

- `seriesFilters`: each `is` (the name must match) or `isNot` (must not), never both nor neither; `name.matches`
  is one more `is` filter. A match is a search, not a full match (Go's MatchString).
- the API name: `name.as` expanded with the captures of `name.matches` (Go's ExpandString); without `as`, `$0` when
  `matches` has no capture group, `$1` with one, and a refusal with more; an empty `matches` is `.*`.
- a rule's queries are namespaced unless `resources.namespaced: false` (it only changes external queries).

A rule prometheus-adapter refuses at start is refused here in one line naming the rule and field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from adapter.promadapter.config import DiscoveryRule, PromAdapterConfigError, RegexFilter
from adapter.promadapter.goregexp import GoRegexpError, compile_go, expand
from adapter.promadapter.query import BuiltQuery, MetricsQuery
from adapter.promadapter.resources import ResourceConverter, ResourceMappingError, UnknownOverride
from adapter.promadapter.restmapper import GroupResource, RestMapper
from adapter.selectors import Selector


@dataclass(frozen=True)
class SeriesName:
    """A series as discovery lists it: its name and its label names (values play no part in naming)."""

    name: str
    labels: frozenset[str]


@dataclass(frozen=True)
class ReMatcher:
    regex: re.Pattern[str]
    positive: bool

    def matches(self, value: str) -> bool:
        return (self.regex.search(value) is not None) == self.positive


def re_matcher(regex_filter: RegexFilter) -> ReMatcher:
    """NewReMatcher; ValueError with upstream's message."""
    if regex_filter.is_ and regex_filter.is_not:
        raise ValueError(
            f"cannot have both an `is` ({regex_filter.is_!r}) and `isNot` ({regex_filter.is_not!r}) expression in a "
            "single filter"
        )
    if not regex_filter.is_ and not regex_filter.is_not:
        raise ValueError("must have either an `is` or `isNot` expression in a filter")
    raw = regex_filter.is_ or regex_filter.is_not
    try:
        return ReMatcher(compile_go(raw), positive=bool(regex_filter.is_))
    except GoRegexpError as exc:
        raise ValueError(f"unable to compile series filter {raw!r}: {exc}") from None


class MetricNamer:
    """One rule, compiled."""

    def __init__(
        self,
        rule: DiscoveryRule,
        converter: ResourceConverter,
        metrics_query: MetricsQuery,
        matchers: Sequence[ReMatcher],
        name_matches: re.Pattern[str],
        name_as: str,
    ) -> None:
        self.rule = rule
        self.selector = rule.series_query
        self.converter = converter
        self.metrics_query = metrics_query
        self._matchers = tuple(matchers)
        self._name_matches = name_matches
        self._name_as = name_as

    def filter_series(self, series: Iterable[SeriesName]) -> list[SeriesName]:
        return [s for s in series if all(m.matches(s.name) for m in self._matchers)]

    def metric_name(self, series_name: str) -> str | None:
        """The API name of a series; None when `name.matches` does not match it (logged and skipped upstream)."""
        match = self._name_matches.search(series_name)
        return None if match is None else expand(self._name_as, match)

    def query_for_series(
        self, series: str, resource: GroupResource, namespace: str, metric_selector: Selector, names: Sequence[str]
    ) -> BuiltQuery:
        return self.metrics_query.build(series, resource, namespace, (), metric_selector, names)

    def query_for_external_series(self, series: str, namespace: str, metric_selector: Selector) -> BuiltQuery:
        return self.metrics_query.build_external(series, namespace, "", [], metric_selector)

    @property
    def unknown_overrides(self) -> tuple[UnknownOverride, ...]:
        return self.converter.unknown_overrides


def _fail(rule: DiscoveryRule, field: str, problem: str, origin: str) -> PromAdapterConfigError:
    return PromAdapterConfigError(f"{origin}: {rule.where}.{field}: {problem}")


def namer_from_rule(rule: DiscoveryRule, mapper: RestMapper, origin: str = "--config") -> MetricNamer:
    """One rule's namer (NamersFromConfig's loop body); PromAdapterConfigError names the rule and field."""
    try:
        converter = ResourceConverter(rule.resources.template, rule.resources.overrides, mapper)
    except ResourceMappingError as exc:
        raise _fail(rule, "resources", str(exc), origin) from None
    namespaced = True if rule.resources.namespaced is None else rule.resources.namespaced
    try:
        metrics_query = MetricsQuery(rule.metrics_query, converter, namespaced)
    except ValueError as exc:
        raise _fail(rule, "metricsQuery", str(exc), origin) from None
    matchers = []
    for index, regex_filter in enumerate(rule.series_filters):
        try:
            matchers.append(re_matcher(regex_filter))
        except ValueError as exc:
            raise _fail(rule, f"seriesFilters[{index}]", str(exc), origin) from None
    if rule.name.matches:
        try:
            name_matches = compile_go(rule.name.matches)
        except GoRegexpError as exc:
            raise _fail(
                rule, "name.matches", f"unable to compile series name match expression: {exc}", origin
            ) from None
        matchers.append(ReMatcher(name_matches, positive=True))
    else:
        name_matches = re.compile(".*")
    name_as = rule.name.as_
    if not name_as:
        groups = name_matches.groups
        if groups > 1:
            raise _fail(rule, "name.as", f"must specify an 'as' value for name matcher {rule.name.matches!r}", origin)
        name_as = "$0" if groups == 0 else "$1"
    return MetricNamer(rule, converter, metrics_query, matchers, name_matches, name_as)


def namers_from_config(
    rules: Iterable[DiscoveryRule], mapper: RestMapper, origin: str = "--config"
) -> list[MetricNamer]:
    return [namer_from_rule(rule, mapper, origin) for rule in rules]
