"""GET /apis/custom.metrics.k8s.io/{v1beta1,v1beta2}/...: metrics describing pods, workloads, namespaces and nodes."""

from __future__ import annotations

import math

from aiohttp import web

from adapter.api.bodies import CustomItems
from adapter.api.objects import POD, described_objects, described_pods, object_kind
from adapter.api.paths import CUSTOM_GROUP, CUSTOM_VERSIONS, CustomMetricPath, parse_custom_path
from adapter.api.state import API_STATE, ApiState, query_selector, unknown_metric
from adapter.selectors import Selector
from adapter.sources.aggregation import served_value
from adapter.status import ApiError


async def custom_metrics(request: web.Request) -> web.Response:
    state = request.app[API_STATE]
    version = request.match_info["version"]
    if version not in CUSTOM_VERSIONS:
        raise ApiError(404, f"the server could not find the requested resource: {CUSTOM_GROUP}/{version} is not served")
    path = parse_custom_path(request.rel_url.raw_path, version)
    metric = state.config.custom(path.metric)
    kind = object_kind(path.resource)
    label_selector = query_selector(request, "labelSelector")
    metric_selector = query_selector(request, "metricLabelSelector")
    if metric is None or kind is None or not state.source.serves(metric):
        if state.rules is not None and state.rules.serves_custom(path):  # a metric prometheus-adapter's rules give
            state.require_synced()
            return await _rule_metric(state, version, path, label_selector, metric_selector)
        raise unknown_metric(path.metric, path.resource)
    state.require_synced()
    items = CustomItems(version, metric.name, metric_selector.as_label_selector())
    oldest = math.inf
    if kind is POD and metric_selector.empty:  # the HPA's question: each pod's value over all its devices
        pods = described_pods(state.pods, path, label_selector)
        values = await state.source.pod_values(metric, pods) if pods else []
        oldest = items.add_pods(POD.kind, POD.api_version, pods, values)
    else:
        objects = described_objects(state.pods, path, kind, label_selector)
        behind_objects = [pod for obj in objects for pod in obj.pods]  # no pod stands behind two objects
        samples = await state.source.samples(metric, behind_objects) if behind_objects else {}
        for obj in objects:
            behind = [s for p in obj.pods if (s := samples.get((p.namespace, p.name))) is not None]
            served = served_value(metric, behind, metric_selector) if behind else None
            if served is not None:
                oldest = min(oldest, served.sampled_at)
                items.add(obj.reference(), served)
    if not path.wildcard and not items:
        raise ApiError(404, f"the server could not find the metric {metric.name} for {kind.resource} {path.name}")
    if items:
        state.metrics.figure_age.labels(CUSTOM_GROUP).observe(max(0.0, state.clock() - oldest))
    state.metrics.served_values.labels(CUSTOM_GROUP).inc(len(items))
    return web.Response(body=items.text().encode(), content_type="application/json")


async def _rule_metric(
    state: ApiState, version: str, path: CustomMetricPath, label_selector: Selector, metric_selector: Selector
) -> web.Response:
    assert state.rules is not None
    body, sampled = await state.rules.custom_body(version, path, label_selector, metric_selector)
    if sampled:
        state.metrics.figure_age.labels(CUSTOM_GROUP).observe(max(0.0, state.clock() - min(sampled)))
    state.metrics.served_values.labels(CUSTOM_GROUP).inc(len(sampled))
    return web.Response(body=body.encode(), content_type="application/json")
