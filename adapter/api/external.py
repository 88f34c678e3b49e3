"""GET /apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}: one value over the selected pods' GPUs."""

from __future__ import annotations

from aiohttp import web

from adapter.api.bodies import external_item, external_list
from adapter.api.paths import EXTERNAL_GROUP, EXTERNAL_VERSIONS, parse_external_path
from adapter.api.state import API_STATE, ApiState, json_response, query_selector
from adapter.demand.signals import DemandNotServedError, DemandUnavailableError
from adapter.selectors import EVERYTHING, Operator, Selector
from adapter.sources.aggregation import served_value
from adapter.sources.metricsource import ServedValue
from adapter.status import ApiError, service_unavailable


async def external_metrics(request: web.Request) -> web.Response:
    state = request.app[API_STATE]
    version = request.match_info["version"]
    if version not in EXTERNAL_VERSIONS:
        raise ApiError(
            404, f"the server could not find the requested resource: {EXTERNAL_GROUP}/{version} is not served"
        )
    path = parse_external_path(request.rel_url.raw_path, version)
    selector = query_selector(request, "labelSelector")
    if state.demand is not None and state.demand.serves(path.metric):
        return await _demand(state, version, path.namespace, path.metric, selector)
    metric = state.config.external_metric(path.metric)
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


async def _demand(state: ApiState, version: str, namespace: str, name: str, selector: Selector) -> web.Response:
    """Requests waiting at gateways (adapter/demand/): a value even when the workload has no pod, none (503 with the
    reason) when an endpoint that could hold the selected series failed its read."""
    assert state.demand is not None
    try:
        demand = await state.demand.value(namespace, name, selector)
    except DemandUnavailableError as exc:
        raise service_unavailable(str(exc)) from None
    except DemandNotServedError as exc:
        raise ApiError(404, f"the server could not find the external metric {name}: {exc}") from None
    served = ServedValue(value=demand.value, sampled_at=demand.sampled_at, window_seconds=0)  # a gauge read at once
    state.metrics.figure_age.labels(EXTERNAL_GROUP).observe(max(0.0, state.clock() - served.sampled_at))
    state.metrics.served_values.labels(EXTERNAL_GROUP).inc()
    return json_response(external_list(version, [external_item(name, _selected_labels(selector), served)]))


def _selected_labels(selector: Selector) -> dict[str, str]:
    """The selector's exact-match requirements: the labels naming what the value is about."""
    exact = (Operator.EQUALS, Operator.DOUBLE_EQUALS)
    return {r.key: r.values[0] for r in selector.requirements if r.operator in exact}
