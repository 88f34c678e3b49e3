"""What discovery found: the metrics each rule's series give, and the query that answers each.

Custom metrics (prometheus-adapter pkg/custom-provider/series_registry.go, `basicSeriesRegistry`): each kept series
gives one metric per resource its labels name, keyed by (group-resource, namespaced, name); namespaces, nodes and
persistent volumes are never namespaced, the other resources as the series is (resources.py). A later rule or series
giving the same key replaces the earlier one, as the map assignment upstream does.

External metrics (pkg/external-provider/external_series_registry.go): one metric per name, the last series giving it
wins; every external metric is namespaced in discovery.

A question is answered only if its (normalized) key was discovered; `query_for_metric` with no object names finds
nothing, as upstream's does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from adapter.promadapter.naming import MetricNamer, SeriesName
from adapter.promadapter.query import BuiltQuery
from adapter.promadapter.restmapper import CLUSTER_SCOPED_RESOURCES, GroupResource, RestMapper
from adapter.selectors import Selector

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, order=True)
class CustomMetricInfo:
    """provider.CustomMetricInfo."""

    group_resource: GroupResource
    namespaced: bool
    metric: str

    @property
    def resource_name(self) -> str:
        """Its name in discovery: `pods/http_requests`, `jobs.batch/http_requests` (customMetricsResourceLister)."""
        return f"{self.group_resource}/{self.metric}"


@dataclass(frozen=True, slots=True)
class SeriesInfo:
    series_name: str
    namer: MetricNamer


class SeriesRegistry:
    """The custom metrics discovery found, replaced whole at each relist."""

    def __init__(self, mapper: RestMapper) -> None:
        self._mapper = mapper
        self._info: Mapping[CustomMetricInfo, SeriesInfo] = {}

    def set_series(self, series: Sequence[Sequence[SeriesName]], namers: Sequence[MetricNamer]) -> None:
        if len(series) != len(namers):
            raise ValueError("need one set of series per namer")
        found: dict[CustomMetricInfo, SeriesInfo] = {}
        for namer_series, namer in zip(series, namers, strict=True):
            for one in namer_series:
                resources, namespaced = namer.converter.resources_for_series(one.labels)
                name = namer.metric_name(one.name)
                if name is None:
                    log.debug("series %s does not match its rule's name.matches; skipped", one.name)
                    continue
                for resource in resources:
                    info = CustomMetricInfo(resource, namespaced and resource not in CLUSTER_SCOPED_RESOURCES, name)
                    found[info] = SeriesInfo(one.name, namer)
        self._info = found

    def list_all_metrics(self) -> list[CustomMetricInfo]:
        return sorted(self._info)

    def normalized(self, info: CustomMetricInfo) -> CustomMetricInfo | None:
        resource = self._mapper.resource_for(info.group_resource)
        return None if resource is None else CustomMetricInfo(resource, info.namespaced, info.metric)

    def lookup(self, info: CustomMetricInfo) -> SeriesInfo | None:
        """The discovered series behind a (normalized) metric, or None."""
        return self._info.get(info)

    def query_for_metric(
        self, info: CustomMetricInfo, namespace: str, metric_selector: Selector, names: Sequence[str]
    ) -> BuiltQuery | None:
        """QueryForMetric: the query for `names`, None when the metric was not discovered or no name is asked about.
        Raises query.QueryError when the question cannot become a query (upstream logs it and finds nothing)."""
        if not names:
            return None
        normalized = self.normalized(info)
        found = None if normalized is None else self._info.get(normalized)
        if normalized is None or found is None:
            return None
        return found.namer.query_for_series(
            found.series_name, normalized.group_resource, namespace, metric_selector, names
        )

    def resource_label(self, info: CustomMetricInfo) -> str | None:
        """The label whose values name the objects in the metric's query results (MatchValuesToNames)."""
        normalized = self.normalized(info)
        found = None if normalized is None else self._info.get(normalized)
        if normalized is None or found is None:
            return None
        return found.namer.converter.label_for_resource(normalized.group_resource)


class ExternalSeriesRegistry:
    """The external metrics discovery found, replaced whole at each relist."""

    def __init__(self) -> None:
        self._info: Mapping[str, SeriesInfo] = {}

    def set_series(self, series: Sequence[Sequence[SeriesName]], namers: Sequence[MetricNamer]) -> None:
        if len(series) != len(namers):
            raise ValueError("need one set of series per namer")
        found: dict[str, SeriesInfo] = {}
        for namer_series, namer in zip(series, namers, strict=True):
            for one in namer_series:
                name = namer.metric_name(one.name)
                if name is None:
                    continue
                found[name] = SeriesInfo(one.name, namer)
        self._info = found

    def list_all_metrics(self) -> list[str]:
        return sorted(self._info)

    def query_for_metric(self, namespace: str, metric: str, metric_selector: Selector) -> BuiltQuery | None:
        """None when the metric was not discovered; query.QueryError when the question cannot become a query."""
        found = self._info.get(metric)
        if found is None:
            return None
        return found.namer.query_for_external_series(found.series_name, namespace, metric_selector)
