"""What the API handlers share: the metric definitions, the pod cache, the number source, the self-metrics, and
prometheus-adapter's rules when its configuration is served."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from adapter.api.selfmetrics import AdapterMetrics
from adapter.metrics_config import MetricsConfig
from adapter.selectors import EVERYTHING, Selector, SelectorError, parse_selector
from adapter.sources.metricsource import MetricSource, PodDirectory

if TYPE_CHECKING:
    from adapter.demand.signals import DemandSignals
    from adapter.promadapter.serving import RuleMetrics
from adapter.status import ApiError, bad_request, service_unavailable


@dataclass(frozen=True)
class ApiState:
    config: MetricsConfig
    pods: PodDirectory
    source: MetricSource
    metrics: AdapterMetrics
    clock: Callable[[], float] = field(default=time.time)
    rules: RuleMetrics | None = None  # prometheus-adapter's rules (--config in its format), beside the GPU metrics
    demand: DemandSignals | None = None  # requests waiting at gateways, External metrics with no pod (adapter/demand/)

    def require_synced(self) -> None:
        if not self.pods.synced:
            raise service_unavailable("the adapter's pod cache has not synced with the Kubernetes API yet")


API_STATE = web.AppKey("gpu_pulse_api_state", ApiState)


def query_selector(request: web.Request, parameter: str) -> Selector:
    """The label selector in query parameter `parameter` (absent or empty: everything); 400 naming the problem."""
    text = request.query.get(parameter, "")
    if not text.strip():
        return EVERYTHING
    try:
        return parse_selector(text)
    except SelectorError as exc:
        raise bad_request(f"{parameter}: {exc}") from None


def json_response(body: object, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(body, separators=(",", ":")).encode(), content_type="application/json"
    )


def unknown_metric(metric: str, resource: str) -> ApiError:
    return ApiError(404, f"the server could not find the metric {metric} for {resource}")
