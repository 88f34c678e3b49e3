"""API discovery: `/apis` (APIGroupList), `/apis/{group}` (APIGroup) and `/apis/{group}/{version}` (APIResourceList
with one resource per served metric and described resource, e.g. `pods/gpu_utilization`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from adapter.api.objects import KINDS
from adapter.api.paths import CUSTOM_GROUP, SERVED
from adapter.status import ApiError

JsonObject = dict[str, object]


def _group(name: str) -> JsonObject:
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in SERVED[name]]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def group_list() -> JsonObject:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g) for g in SERVED]}


def api_group(name: str) -> JsonObject:
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name)}


class Named(Protocol):
    """A served metric, as discovery lists it."""

    @property
    def name(self) -> str: ...


@dataclass(frozen=True, slots=True)
class DemandName:
    """A demand metric (adapter/demand/), listed by its name."""

    name: str


def resource_list(group: str, version: str, custom: Sequence[Named], external: Sequence[Named]) -> JsonObject:
    resources: list[JsonObject] = []
    if group == CUSTOM_GROUP:
        for metric in custom:
            for kind in KINDS:
                resources.append(
                    {
                        "name": f"{kind.resource}/{metric.name}",
                        "singularName": "",
                        "namespaced": kind.namespaced,
                        "kind": "MetricValueList",
                        "verbs": ["get"],
                    }
                )
    else:
        for metric in external:
            resources.append(
                {
                    "name": metric.name,
                    "singularName": "",
                    "namespaced": True,
                    "kind": "ExternalMetricValueList",
                    "verbs": ["get"],
                }
            )
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}", "resources": resources}


def _json(body: JsonObject) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


class RuleResources(Protocol):
    """The resources of metrics that change while the adapter runs (prometheus-adapter's rules, relisted)."""

    @property
    def generation(self) -> int: ...

    def custom_resources(self) -> list[JsonObject]: ...

    def external_resources(self) -> list[JsonObject]: ...


class Discovery:
    """The discovery documents, rendered once from the served metrics, and again after each relist of
    prometheus-adapter's rules when they are served (their resources follow the GPU metrics', each name once)."""

    def __init__(self, custom: Sequence[Named], external: Sequence[Named], rules: RuleResources | None = None) -> None:
        self._groups = _json(group_list())
        self._group = {g: _json(api_group(g)) for g in SERVED}
        self._fixed = {
            (g, v): resource_list(g, v, custom, external) for g, versions in SERVED.items() for v in versions
        }
        self._resources = {key: _json(body) for key, body in self._fixed.items()}
        self._rules = rules
        self._rendered_generation = -1

    def _current(self) -> dict[tuple[str, str], bytes]:
        rules = self._rules
        if rules is None or rules.generation == self._rendered_generation:
            return self._resources
        generation = rules.generation
        rendered = {}
        for (group, version), body in self._fixed.items():
            own = body["resources"]
            assert isinstance(own, list)
            names = {resource["name"] for resource in own}
            extra = rules.custom_resources() if group == CUSTOM_GROUP else rules.external_resources()
            merged = [*own, *(r for r in extra if r["name"] not in names)]
            rendered[group, version] = _json({**body, "resources": merged})
        self._resources, self._rendered_generation = rendered, generation
        return rendered

    async def groups(self, request: web.Request) -> web.Response:
        return web.Response(body=self._groups, content_type="application/json")

    async def group(self, request: web.Request) -> web.Response:
        body = self._group.get(request.match_info["group"])
        if body is None:
            raise ApiError(
                404, f"the server could not find the requested resource: group {request.match_info['group']}"
            )
        return web.Response(body=body, content_type="application/json")

    async def resources(self, request: web.Request) -> web.Response:
        group, version = request.match_info["group"], request.match_info["version"]
        body = self._current().get((group, version))
        if body is None:
            raise ApiError(404, f"the server could not find the requested resource: {group}/{version} is not served")
        return web.Response(body=body, content_type="application/json")
