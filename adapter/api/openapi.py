"""OpenAPI documents of the served groups: `/openapi/v2` (Swagger 2.0, all groups) and `/openapi/v3` (a discovery
document pointing at one OpenAPI 3.0 document per group-version, `/openapi/v3/apis/{group}/{version}`).

The aggregator fetches both every minute and merges them into the cluster's documents; `kubectl explain` reads them.
Schema names follow the Go packages of k8s.io/metrics and apimachinery, as the Kubernetes documents name them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from adapter.api.paths import CUSTOM_GROUP, CUSTOM_VERSIONS, EXTERNAL_GROUP, EXTERNAL_VERSIONS

JsonObject = dict[str, Any]
Ref = Callable[[str], JsonObject]

_META = "io.k8s.apimachinery.pkg.apis.meta.v1"
_CORE = "io.k8s.api.core.v1"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"


def _custom_package(version: str) -> str:
    return f"io.k8s.metrics.pkg.apis.custom_metrics.{version}"


def _external_package(version: str) -> str:
    return f"io.k8s.metrics.pkg.apis.external_metrics.{version}"


def _gvk(group: str, version: str, kind: str) -> list[JsonObject]:
    return [{"group": group, "version": version, "kind": kind}]


def _list_schema(ref: Ref, group: str, version: str, kind: str, item: str, description: str) -> JsonObject:
    return {
        "description": description,
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": "APIVersion of this representation of an object.", "type": "string"},
            "kind": {"description": "Kind of this object.", "type": "string"},
            "metadata": {**ref(f"{_META}.ListMeta"), "description": "Standard list metadata."},
            "items": {"description": "the values", "type": "array", "items": ref(item)},
        },
        "x-kubernetes-group-version-kind": _gvk(group, version, kind),
    }


def _common_schemas(ref: Ref) -> dict[str, JsonObject]:
    string = {"type": "string"}
    return {
        f"{_META}.ListMeta": {
            "description": "Metadata of a list.",
            "type": "object",
            "properties": {
                "continue": string,
                "remainingItemCount": {"type": "integer", "format": "int64"},
                "resourceVersion": string,
                "selfLink": string,
            },
        },
        f"{_META}.Time": {"description": "RFC 3339 time, UTC, whole seconds.", "type": "string", "format": "date-time"},
        _QUANTITY: {"description": "A fixed-point number in its canonical string form, e.g. 85300m.", "type": "string"},
        f"{_META}.LabelSelectorRequirement": {
            "description": "A key, an operator and values.",
            "type": "object",
            "required": ["key", "operator"],
            "properties": {"key": string, "operator": string, "values": {"type": "array", "items": string}},
        },
        f"{_META}.LabelSelector": {
            "description": "A label query over a set of resources.",
            "type": "object",
            "properties": {
                "matchExpressions": {"type": "array", "items": ref(f"{_META}.LabelSelectorRequirement")},
                "matchLabels": {"type": "object", "additionalProperties": string},
            },
            "x-kubernetes-map-type": "atomic",
        },
        f"{_CORE}.ObjectReference": {
            "description": "The object a metric value describes.",
            "type": "object",
            "properties": {
                "apiVersion": string,
                "fieldPath": string,
                "kind": string,
                "name": string,
                "namespace": string,
                "resourceVersion": string,
                "uid": string,
            },
            "x-kubernetes-map-type": "atomic",
        },
        f"{_META}.Status": {
            "description": "The outcome of a failed request.",
            "type": "object",
            "properties": {
                "apiVersion": string,
                "kind": string,
                "code": {"type": "integer", "format": "int32"},
                "message": string,
                "reason": string,
                "status": string,
                "metadata": ref(f"{_META}.ListMeta"),
            },
            "x-kubernetes-group-version-kind": _gvk("", "v1", "Status"),
        },
    }


def _custom_schemas(ref: Ref, version: str) -> dict[str, JsonObject]:
    package = _custom_package(version)
    common = {
        "describedObject": ref(f"{_CORE}.ObjectReference"),
        "timestamp": {**ref(f"{_META}.Time"), "description": "when the figures behind the value were sampled"},
        "value": {**ref(_QUANTITY), "description": "the value of the metric for this object"},
    }
    schemas: dict[str, JsonObject] = {
        f"{package}.MetricValueList": _list_schema(
            ref, CUSTOM_GROUP, version, "MetricValueList", f"{package}.MetricValue", "a list of values for a metric"
        )
    }
    if version == "v1beta1":
        schemas[f"{package}.MetricValue"] = {
            "description": "the value of a metric for an object",
            "type": "object",
            "required": ["describedObject", "metricName", "timestamp", "value"],
            "properties": {
                **common,
                "metricName": {"description": "the name of the metric", "type": "string"},
                "window": {"description": "seconds the value is averaged over", "type": "integer", "format": "int64"},
                "selector": ref(f"{_META}.LabelSelector"),
            },
        }
    else:
        schemas[f"{package}.MetricIdentifier"] = {
            "description": "a metric by name and label selector",
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "selector": ref(f"{_META}.LabelSelector")},
        }
        schemas[f"{package}.MetricValue"] = {
            "description": "the value of a metric for an object",
            "type": "object",
            "required": ["describedObject", "metric", "timestamp", "value"],
            "properties": {
                **common,
                "metric": ref(f"{package}.MetricIdentifier"),
                "windowSeconds": {
                    "description": "seconds the value is averaged over",
                    "type": "integer",
                    "format": "int64",
                },
            },
        }
    return schemas


def _external_schemas(ref: Ref, version: str) -> dict[str, JsonObject]:
    package = _external_package(version)
    return {
        f"{package}.ExternalMetricValueList": _list_schema(
            ref,
            EXTERNAL_GROUP,
            version,
            "ExternalMetricValueList",
            f"{package}.ExternalMetricValue",
            "a list of values of an external metric",
        ),
        f"{package}.ExternalMetricValue": {
            "description": "one value of an external metric",
            "type": "object",
            "required": ["metricName", "metricLabels", "timestamp", "value"],
            "properties": {
                "metricName": {"type": "string"},
                "metricLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                "timestamp": ref(f"{_META}.Time"),
                "window": {"type": "integer", "format": "int64"},
                "value": ref(_QUANTITY),
            },
        },
    }


@dataclass(frozen=True, slots=True)
class _Route:
    path: str
    operation: str
    parameters: tuple[str, ...]
    response: str  # schema name
    description: str
    kind: str
    group: str
    version: str


def _routes(group: str, version: str) -> list[_Route]:
    base = f"/apis/{group}/{version}"
    if group == EXTERNAL_GROUP:
        package = _external_package(version)
        return [
            _Route(
                f"{base}/namespaces/{{namespace}}/{{metric}}",
                "listNamespacedExternalMetricValue",
                ("namespace", "metric"),
                f"{package}.ExternalMetricValueList",
                "values of an external metric over the pods the label selector picks in a namespace",
                "ExternalMetricValueList",
                group,
                version,
            )
        ]
    list_name = f"{_custom_package(version)}.MetricValueList"
    return [
        _Route(
            f"{base}/namespaces/{{namespace}}/{{resource}}/{{name}}/{{metric}}",
            "listNamespacedMetricValue",
            ("namespace", "resource", "name", "metric"),
            list_name,
            "a metric of one namespaced object, or of all of them for name *",
            "MetricValueList",
            group,
            version,
        ),
        _Route(
            f"{base}/{{resource}}/{{name}}/{{metric}}",
            "listMetricValue",
            ("resource", "name", "metric"),
            list_name,
            "a metric of one cluster-scoped object (namespaces, nodes), or of all of them for name *",
            "MetricValueList",
            group,
            version,
        ),
        _Route(
            f"{base}/namespaces/{{namespace}}/metrics/{{metric}}",
            "readMetricValueForNamespace",
            ("namespace", "metric"),
            list_name,
            "a metric of the Namespace object itself",
            "MetricValueList",
            group,
            version,
        ),
    ]


_PARAMETER_TEXT = {
    "namespace": "object name and auth scope, such as for teams and projects",
    "resource": "the described objects' resource, e.g. pods, deployments.apps, namespaces, nodes",
    "name": "name of the described object, or * for all",
    "metric": "the name of the metric",
    "labelSelector": "a selector restricting the described objects (pods) by their labels",
    "metricLabelSelector": "a selector restricting the metric's figures by their labels (gpu, uuid, share, ...)",
}


def _operation(route: _Route, ref: Ref, v3: bool) -> JsonObject:
    def parameter(name: str, where: str) -> JsonObject:
        param: JsonObject = {"name": name, "in": where, "description": _PARAMETER_TEXT[name]}
        param["required"] = where == "path"
        if v3:
            param["schema"] = {"type": "string"}
        else:
            param["type"] = "string"
            if where == "query":
                param["uniqueItems"] = True
        return param

    queries = ("labelSelector",) if route.group == EXTERNAL_GROUP else ("labelSelector", "metricLabelSelector")
    parameters = [parameter(p, "path") for p in route.parameters] + [parameter(q, "query") for q in queries]
    ok: JsonObject = {"description": "OK"}
    status: JsonObject = {"description": "a failure, as a Status"}
    if v3:
        ok["content"] = {"application/json": {"schema": ref(route.response)}}
        status["content"] = {"application/json": {"schema": ref(f"{_META}.Status")}}
    else:
        ok["schema"] = ref(route.response)
        status["schema"] = ref(f"{_META}.Status")
    operation: JsonObject = {
        "description": route.description,
        "operationId": route.operation
        + route.version.capitalize()
        + ("External" if route.group == EXTERNAL_GROUP else ""),
        "tags": [f"{route.group.split('.')[0]}Metrics_{route.version}"],
        "parameters": parameters,
        "responses": {"200": ok, "400": status, "401": status, "403": status, "404": status, "503": status},
        "x-kubernetes-action": "list",
        "x-kubernetes-group-version-kind": {"group": route.group, "version": route.version, "kind": route.kind},
    }
    if not v3:
        operation["produces"] = ["application/json"]
        operation["schemes"] = ["https"]
    return operation


def _schemas_for(ref: Ref, group: str, version: str) -> dict[str, JsonObject]:
    schemas = _common_schemas(ref)
    if group == CUSTOM_GROUP:
        schemas.update(_custom_schemas(ref, version))
    else:
        schemas.update(_external_schemas(ref, version))
    return schemas


_GROUP_VERSIONS = [(CUSTOM_GROUP, v) for v in CUSTOM_VERSIONS] + [(EXTERNAL_GROUP, v) for v in EXTERNAL_VERSIONS]


def openapi_v2(title: str, version: str) -> JsonObject:
    """One Swagger 2.0 document for every served group-version."""

    def ref(name: str) -> JsonObject:
        return {"$ref": f"#/definitions/{name}"}

    definitions: dict[str, JsonObject] = {}
    paths: dict[str, JsonObject] = {}
    for group, group_version in _GROUP_VERSIONS:
        definitions.update(_schemas_for(ref, group, group_version))
        for route in _routes(group, group_version):
            paths[route.path] = {"get": _operation(route, ref, v3=False)}
    return {
        "swagger": "2.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    }


def openapi_v3(title: str, version: str, group: str, group_version: str) -> JsonObject:
    """The OpenAPI 3.0 document of one group-version."""

    def ref(name: str) -> JsonObject:
        return {"$ref": f"#/components/schemas/{name}"}

    paths = {route.path: {"get": _operation(route, ref, v3=True)} for route in _routes(group, group_version)}
    return {
        "openapi": "3.0.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {
            "schemas": _schemas_for(ref, group, group_version),
            "securitySchemes": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
        },
        "security": [{"BearerToken": []}],
    }


@dataclass(frozen=True, slots=True)
class _Document:
    body: bytes
    etag: str


def _document(content: JsonObject) -> _Document:
    body = json.dumps(content, separators=(",", ":"), sort_keys=True).encode()
    return _Document(body, hashlib.sha512(body).hexdigest().upper())


class OpenApiDocuments:
    """The documents, rendered once; handlers answer with ETags so that unchanged documents cost a 304."""

    def __init__(self, title: str = "gpu-pulse-adapter", version: str = "0.1.0") -> None:
        self._v2 = _document(openapi_v2(title, version))
        self._v3 = {f"apis/{g}/{v}": _document(openapi_v3(title, version, g, v)) for g, v in _GROUP_VERSIONS}
        self._v3_index = _document(
            {
                "paths": {
                    path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={doc.etag}"}
                    for path, doc in sorted(self._v3.items())
                }
            }
        )

    @staticmethod
    def _answer(request: web.Request, document: _Document, immutable: bool = False) -> web.Response:
        etag = f'"{document.etag}"'
        headers = {"ETag": etag, "Vary": "Accept"}
        headers["Cache-Control"] = "public, immutable" if immutable else "no-cache, private"
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers=headers)
        return web.Response(body=document.body, content_type="application/json", headers=headers)

    async def v2(self, request: web.Request) -> web.Response:
        return self._answer(request, self._v2)

    async def v3_index(self, request: web.Request) -> web.Response:
        return self._answer(request, self._v3_index)

    async def v3_group_version(self, request: web.Request) -> web.Response:
        key = f"apis/{request.match_info['group']}/{request.match_info['version']}"
        document = self._v3.get(key)
        if document is None:
            raise web.HTTPNotFound()
        return self._answer(request, document, immutable=request.query.get("hash") == document.etag)
