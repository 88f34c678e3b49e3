"""GET /apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}: one value over the selected pods' GPUs."""

from __future__ import annotations

from aiohttp import web

from adapter.api.bodies import external_item, external_list
from adapter.api.paths import EXTERNAL_GROUP, EXTERNAL_VERSIONS, parse_external_path
from adapter.api.state import API_STATE, json_response, query_selector
from adapter.selectors import EVERYTHING, Operator
from adapter.sources.aggregation import served_value
from adapter.status import ApiError


async def external_metrics(request: web.Request) -> web.Response:
    state = request.app[API_STATE]
    version = request.match_info["version"]
    if version not in EXTERNAL_VERSIONS:
        raise ApiError(
            404, f"the server could not find the requested resource: {EXTERNAL_GROUP}/{version} is not served"
        )
    path = parse_external_path(request.rel_url.raw_path, version)
    metric = state.config.external_metric(path.metric)
    selector = query_selector(request, "labelSelector")
    if metric is None or not state.source.serves(metric):
        if state.rules is not None and state.rules.serves_external(path.metric):  # from prometheus-adapter's rules
            body = await state.rules.external_body(version, path.namespace, path.metric, selector)
            state.metrics.served_values.labels(EXTERNAL_GROUP).inc(len(body["items"]))  # type: ignore[arg-type]
            return json_response(body)
        raise ApiError(404, f"the server could not find the external metric {path.metric}")
    state.require_synced()
    pods = state.pods.pods_in_namespace(path.namespace, selector)
    samples = await state.source.samples(metric, pods) if pods else {}
    served = served_value(metric, samples.values(), EVERYTHING) if samples else None
    items = []
    if served is not None:
        # the value is about the pods the selector picks: its exact-match labels name them
        exact = (Operator.EQUALS, Operator.DOUBLE_EQUALS)
        labels = {r.key: r.values[0] for r in selector.requirements if r.operator in exact}
        state.metrics.figure_age.labels(EXTERNAL_GROUP).observe(max(0.0, state.clock() - served.sampled_at))
        state.metrics.served_values.labels(EXTERNAL_GROUP).inc()
        items.append(external_item(metric.name, labels, served))
    return json_response(external_list(version, items))
