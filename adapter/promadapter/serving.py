"""prometheus-adapter's rules answering the metrics APIs: the values prometheus-adapter serves, from the same queries.

Custom metrics (prometheus-adapter pkg/custom-provider/provider.go, custom-metrics-apiserver
pkg/registry/custom_metrics): a question about a named object (`GetMetricByName`) queries that name, whether or not
the object exists, and is NotFound when the answer has no series for it; a question about `*`
(`GetMetricBySelector`) queries the names of the objects the label selector picks, and is NotFound when there are
none. gpu-pulse lists objects from its pod cache: pods (by label selector), and namespaces, nodes, Deployments and
StatefulSets that have pods; other resources are answered by name only. The series of the answer are matched to names
by the resource's label (`MatchValuesToNames`).

External metrics (pkg/external-provider): one item per sample of the answer (a vector, or a scalar), with the
sample's labels.

Values as prometheus-adapter makes them: `resource.NewMilliQuantity(int64(value*1000.0))`, that is truncated to the
milli-unit toward zero, and NaN served as 0 (provider.go `metricFor`); an infinite value, which Go would turn into
garbage, is left out. The one difference: the timestamp is the newest raw sample's behind the object
(query.BuiltQuery.timestamps, asked about the same instant as the value), where prometheus-adapter says "now"; when
that query finds nothing the instant of evaluation is served. Neither API has a window here (prometheus-adapter sets
none, and the fields are omitted).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from decimal import Decimal

from adapter.api.bodies import described_object, quantity, rfc3339
from adapter.api.paths import CUSTOM_GROUP, EXTERNAL_GROUP, CustomMetricPath
from adapter.promadapter.discovery import RuleDiscovery
from adapter.promadapter.naming import MetricNamer
from adapter.promadapter.promapi import Answer
from adapter.promadapter.query import BuiltQuery, QueryError
from adapter.promadapter.registry import CustomMetricInfo
from adapter.promadapter.restmapper import NAMESPACES, NODES, GroupResource, ResourceType, RestMapper
from adapter.selectors import Selector
from adapter.sources.metricsource import PodDirectory, SourceError, SourceUnavailableError
from adapter.status import ApiError, bad_request

log = logging.getLogger(__name__)

JsonObject = dict[str, object]
_INT64 = 2**63
_OWNER_KINDS = {
    GroupResource("apps", "deployments"): "Deployment",
    GroupResource("apps", "statefulsets"): "StatefulSet",
}


def served_quantity(value: float) -> Decimal | None:
    """The value prometheus-adapter serves for a sample: milli-units truncated toward zero, NaN as 0; None for an
    infinite value or one past int64 milli-units."""
    if math.isnan(value):
        return Decimal(0)
    if not math.isfinite(value):
        return None
    milli = int(value * 1000.0)
    if not -_INT64 <= milli < _INT64:
        return None
    return Decimal(milli).scaleb(-3)


def _not_found(resource: str, metric: str, name: str | None = None) -> ApiError:
    what = f"the server could not find the metric {metric} for {resource}"
    return ApiError(404, what if name is None else f"{what} {name}")


class RuleMetrics:
    """The API side of prometheus-adapter's rules: discovery documents and answers."""

    def __init__(
        self, discovery: RuleDiscovery, mapper: RestMapper, pods: PodDirectory, clock: Callable[[], float] = time.time
    ) -> None:
        self.discovery = discovery
        self._mapper = mapper
        self._pods = pods
        self._clock = clock
        self._timestamps_failed: set[str] = set()

    async def start(self) -> None:
        await self.discovery.start()

    async def close(self) -> None:
        await self.discovery.close()

    def ready(self) -> bool:
        """The first relist has finished (discovery.RuleDiscovery.ready)."""
        return self.discovery.ready()

    # discovery

    @property
    def generation(self) -> int:
        return self.discovery.generation

    def custom_resources(self) -> list[JsonObject]:
        """The APIResource of each discovered custom metric (customMetricsResourceLister)."""
        return [
            {
                "name": info.resource_name,
                "singularName": "",
                "namespaced": info.namespaced,
                "kind": "MetricValueList",
                "verbs": ["get"],
            }
            for info in self.discovery.custom.list_all_metrics()
        ]

    def external_resources(self) -> list[JsonObject]:
        return [
            {"name": name, "singularName": "", "namespaced": True, "kind": "ExternalMetricValueList", "verbs": ["get"]}
            for name in self.discovery.external.list_all_metrics()
        ]

    # custom.metrics.k8s.io

    def _info(self, path: CustomMetricPath) -> tuple[CustomMetricInfo, str, str]:
        """The normalized metric a path asks about, its namespace ("" for cluster-scoped) and object name."""
        if path.namespace_metric:  # namespaces/{ns}/metrics/{metric}: the Namespace object
            partial, namespace, name = NAMESPACES, "", path.name
        else:
            partial, namespace, name = GroupResource.parse(path.resource), path.namespace or "", path.name
        info = CustomMetricInfo(partial, namespace != "", path.metric)
        registry = self.discovery.custom
        normalized = registry.normalized(info)
        if normalized is None or registry.lookup(normalized) is None:
            raise _not_found(path.resource, path.metric)
        return normalized, namespace, name

    def serves_custom(self, path: CustomMetricPath) -> bool:
        try:
            self._info(path)
        except ApiError:
            return False
        return True

    def _listed_names(self, resource: GroupResource, namespace: str, selector: Selector) -> list[str]:
        """The names of the objects a `*` question is about (helpers.ListObjectNames, from the pod cache)."""
        if resource == GroupResource("", "pods"):
            return [pod.name for pod in self._pods.pods_in_namespace(namespace, selector)]
        if not selector.empty:
            raise bad_request(
                f"labelSelector selects {resource} by their labels, which the adapter knows only for pods: ask for "
                f"one {resource} by name"
            )
        if resource == NAMESPACES:
            return sorted({pod.namespace for pod in self._pods.all_pods()})
        if resource == NODES:
            return sorted({pod.node for pod in self._pods.all_pods() if pod.node})
        owner_kind = _OWNER_KINDS.get(resource)
        if owner_kind is not None:
            return self._workloads(namespace, owner_kind)
        raise ApiError(
            404,
            f"the adapter lists pods, namespaces, nodes, Deployments and StatefulSets only: ask for one {resource} by "
            "name",
        )

    def _workloads(self, namespace: str, kind: str) -> list[str]:
        """The Deployments or StatefulSets of a namespace that have pods: a pod's controller, or for a Deployment the
        ReplicaSet's name less its pod-template-hash, confirmed by the pod cache's owner index."""
        candidates = set()
        for pod in self._pods.pods_in_namespace(namespace):
            owner = pod.owner
            if owner is None:
                continue
            if owner.kind == kind:
                candidates.add(owner.name)
            elif kind == "Deployment" and owner.kind == "ReplicaSet" and "-" in owner.name:
                candidates.add(owner.name.rsplit("-", 1)[0])
        return sorted(name for name in candidates if self._pods.pods_owned_by(namespace, kind, name))

    async def custom_items(
        self, path: CustomMetricPath, label_selector: Selector, metric_selector: Selector
    ) -> list[tuple[str, Decimal, float]]:
        """(describedObject JSON, value, sample time) of each object the question is about that has a value."""
        info, namespace, name = self._info(path)
        resource_type = self._mapper.type_for(info.group_resource)
        assert resource_type is not None  # normalized by the mapper
        names = self._listed_names(info.group_resource, namespace, label_selector) if path.wildcard else [name]
        registry = self.discovery.custom
        try:
            built = registry.query_for_metric(info, namespace, metric_selector, names)
            label = registry.resource_label(info)
        except QueryError as exc:
            log.error("unable to construct query for metric %s: %s", info.resource_name, exc)
            built = label = None
        if built is None or label is None:
            raise _not_found(path.resource, path.metric)
        answer, newest = await self._ask(built, f"{info.resource_name}")
        if answer.kind != "vector":
            raise SourceError(f"the metricsQuery of {info.resource_name} returns a {answer.kind}, not a vector")
        values = {sample.labels.get(label, ""): sample for sample in answer.samples}
        times = {sample.labels.get(label, ""): sample.value for sample in newest.samples}
        if not path.wildcard and name not in values:
            raise _not_found(path.resource, path.metric, name)
        items = []
        for object_name in names:
            sample = values.get(object_name)
            if sample is None:
                continue
            value = served_quantity(sample.value)
            if value is None:
                continue
            at = _sample_time(times.get(object_name), sample.at)
            items.append((self._reference(resource_type, namespace, object_name), value, at))
        return items

    def _reference(self, resource_type: ResourceType, namespace: str, name: str) -> str:
        return described_object(resource_type.kind, resource_type.api_version, namespace or None, name)

    async def custom_body(
        self, version: str, path: CustomMetricPath, label_selector: Selector, metric_selector: Selector
    ) -> tuple[str, list[float]]:
        """The MetricValueList of a question (JSON text) and the sample time of each item."""
        items = await self.custom_items(path, label_selector, metric_selector)
        selector = json.dumps(metric_selector.as_label_selector(), separators=(",", ":"))
        metric_name = json.dumps(path.metric)
        texts = []
        for reference, value, at in items:
            if version == "v1beta1":
                texts.append(
                    f'{{"describedObject":{reference},"metricName":{metric_name},"timestamp":"{rfc3339(at)}",'
                    f'"value":"{quantity(value)}","selector":{selector}}}'
                )
            else:
                texts.append(
                    f'{{"describedObject":{reference},"metric":{{"name":{metric_name},"selector":{selector}}},'
                    f'"timestamp":"{rfc3339(at)}","value":"{quantity(value)}"}}'
                )
        head = f'{{"kind":"MetricValueList","apiVersion":"{CUSTOM_GROUP}/{version}","metadata":{{}},"items":['
        return head + ",".join(texts) + "]}", [at for _, _, at in items]

    # external.metrics.k8s.io

    def serves_external(self, metric: str) -> bool:
        return metric in self.discovery.external.list_all_metrics()

    async def external_body(self, version: str, namespace: str, metric: str, selector: Selector) -> JsonObject:
        """The ExternalMetricValueList of a question."""
        try:
            built = self.discovery.external.query_for_metric(namespace, metric, selector)
        except QueryError as exc:
            raise SourceError(f"unable to generate a query for the external metric {metric}: {exc}") from None
        if built is None:
            raise ApiError(404, f"the server could not find the external metric {metric}")
        answer, newest = await self._ask(built, metric)
        latest = max((s.value for s in newest.samples if math.isfinite(s.value)), default=None)
        items: list[JsonObject] = []
        for sample in answer.samples:
            value = served_quantity(sample.value)
            if value is None:
                continue
            items.append(
                {
                    "metricName": metric,
                    "metricLabels": dict(sample.labels) if answer.kind == "vector" else None,
                    "timestamp": rfc3339(_sample_time(latest, sample.at)),
                    "value": quantity(value),
                }
            )
        return {
            "kind": "ExternalMetricValueList",
            "apiVersion": f"{EXTERNAL_GROUP}/{version}",
            "metadata": {},
            "items": items,
        }

    async def _ask(self, built: BuiltQuery, what: str) -> tuple[Answer, Answer]:
        """The rule's query and its sample-time query, both at this instant."""
        at = self._clock()
        api = self.discovery.api
        value_call = asyncio.ensure_future(api.query(built.query, at))
        try:
            newest = await api.query(built.timestamps(), at)
        except (SourceError, SourceUnavailableError) as exc:
            if what not in self._timestamps_failed and len(self._timestamps_failed) < 1000:
                self._timestamps_failed.add(what)
                log.warning(
                    "the sample times of %s cannot be read (%s): its values are stamped when evaluated", what, exc
                )
            newest = Answer("vector", ())
        return await value_call, newest


def _sample_time(newest: float | None, evaluated: float) -> float:
    """The newest sample's time when known and sane (not after the evaluation), else the evaluation's."""
    if newest is None or not math.isfinite(newest) or newest > evaluated:
        return evaluated
    return newest


def not_served_overrides(namers: Sequence[MetricNamer]) -> list[str]:
    """Overrides naming resources the mapper does not know, as phrases for the start-up line."""
    return [
        f"{namer.rule.where}.resources.overrides.{unknown.label} ({unknown.resource})"
        for namer in namers
        for unknown in namer.unknown_overrides
    ]
