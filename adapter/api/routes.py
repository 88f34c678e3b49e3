"""Every route the adapter serves, on one aiohttp application."""

from __future__ import annotations

from aiohttp import web

from adapter.api.custom import custom_metrics
from adapter.api.discovery import DemandName, Discovery, Named
from adapter.api.external import external_metrics
from adapter.api.health import Check, Health
from adapter.api.openapi import OpenApiDocuments
from adapter.api.paths import CUSTOM_GROUP, EXTERNAL_GROUP
from adapter.api.state import API_STATE, ApiState


def add_routes(app: web.Application, state: ApiState, readiness: list[Check]) -> None:
    """Install the metrics APIs, discovery, OpenAPI, health and /metrics, all answering from `state`."""
    app[API_STATE] = state
    custom = [m for m in state.config.metrics if state.source.serves(m)]
    external: list[Named] = [m for m in state.config.external if state.source.serves(m)]
    if state.demand is not None:  # requests waiting at gateways (adapter/demand/), one resource per name
        external.extend(DemandName(name) for name in state.demand.names)
    discovery = Discovery(custom, external, state.rules)
    openapi = OpenApiDocuments()
    health = Health(readiness)
    router = app.router
    router.add_get("/apis", discovery.groups)
    router.add_get("/apis/{group}", discovery.group)
    router.add_get("/apis/{group}/{version}", discovery.resources)
    router.add_get(f"/apis/{CUSTOM_GROUP}/{{version}}/{{rest:.+}}", custom_metrics)
    router.add_get(f"/apis/{EXTERNAL_GROUP}/{{version}}/{{rest:.+}}", external_metrics)
    router.add_get("/openapi/v2", openapi.v2)
    router.add_get("/openapi/v3", openapi.v3_index)
    router.add_get("/openapi/v3/apis/{group}/{version}", openapi.v3_group_version)
    router.add_get("/healthz", health.live)
    router.add_get("/livez", health.live)
    router.add_get("/readyz", health.ready)
    router.add_get("/metrics", state.metrics.handle)
