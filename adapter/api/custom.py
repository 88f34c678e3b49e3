"""GET /apis/custom.metrics.k8s.io/{v1beta1,v1beta2}/...: metrics describing pods, workloads, namespaces and nodes."""

from __future__ import annotations

from aiohttp import web

from adapter.api.bodies import CustomItems
from adapter.api.objects import described_objects, object_kind
from adapter.api.paths import CUSTOM_GROUP, CUSTOM_VERSIONS, parse_custom_path
from adapter.api.state import API_STATE, query_selector, unknown_metric
from adapter.api.status import ApiError
from adapter.api.values import pod_value, served_value
from adapter.kube.pods import PodInfo


async def custom_metrics(request: web.Request) -> web.Response:
    state = request.app[API_STATE]
    version = request.match_info["version"]
    if version not in CUSTOM_VERSIONS:
        raise ApiError(404, f"the server could not find the requested resource: {CUSTOM_GROUP}/{version} is not served")
    path = parse_custom_path(request.rel_url.raw_path, version)
    metric = state.config.custom(path.metric)
    kind = object_kind(path.resource)
    if metric is None or kind is None or not state.source.serves(metric):
        raise unknown_metric(path.metric, path.resource)
    label_selector = query_selector(request, "labelSelector")
    metric_selector = query_selector(request, "metricLabelSelector")
    state.require_synced()
    objects = described_objects(state.pods, path, kind, label_selector)
    pods: dict[tuple[str, str], PodInfo] = {}
    for obj in objects:
        for pod in obj.pods:
            pods[(pod.namespace, pod.name)] = pod
    samples = await state.source.samples(metric, list(pods.values())) if pods else {}
    items = CustomItems(version, metric.name, metric_selector.as_label_selector())
    oldest = None
    every_device = metric_selector.empty
    for obj in objects:
        if every_device and len(obj.pods) == 1:  # a pod: the HPA's query, once per pod
            pod = obj.pods[0]
            sample = samples.get((pod.namespace, pod.name))
            served = pod_value(metric, sample) if sample is not None else None
        else:
            behind = [s for p in obj.pods if (s := samples.get((p.namespace, p.name))) is not None]
            served = served_value(metric, behind, metric_selector) if behind else None
        if served is None:
            continue
        oldest = served.sampled_at if oldest is None else min(oldest, served.sampled_at)
        items.add(obj.reference(), served)
    if not path.wildcard and not items:
        raise ApiError(404, f"the server could not find the metric {metric.name} for {kind.resource} {path.name}")
    if oldest is not None:
        state.metrics.figure_age.labels(CUSTOM_GROUP).observe(max(0.0, state.clock() - oldest))
    state.metrics.served_values.labels(CUSTOM_GROUP).inc(len(items))
    return web.Response(body=items.text().encode(), content_type="application/json")
