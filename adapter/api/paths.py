"""The request paths of the metrics APIs, parsed, and the authorization attributes Kubernetes derives from them.

custom.metrics.k8s.io/{v1beta1,v1beta2}:
    namespaces/{ns}/{resource}/{name|*}/{metric}   a metric of namespaced objects (pods, deployments.apps, ...)
    {resource}/{name|*}/{metric}                   a metric of cluster-scoped objects (namespaces, nodes)
    namespaces/{ns}/metrics/{metric}               a metric of the Namespace itself
external.metrics.k8s.io/v1beta1:
    namespaces/{ns}/{metric}

Segments are percent-decoded one by one, so `%2A` is `*` and an encoded `/` never splits a segment. The handlers and
authorization read a path through the same function (`path_segments`), so they agree on what a path names by
construction: `/apis/%63ustom.metrics.k8s.io/...` is the custom metrics API for both, and a path whose decoded segments
do not start with the group and version it was routed to (`custom.metrics.k8s.io%2Fv1beta2`: one segment for us, two
for a router that decodes first) is not served.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote

from aiohttp import web

from adapter.auth.identity import ResourceAttributes
from adapter.status import ApiError, bad_request

CUSTOM_GROUP: Final = "custom.metrics.k8s.io"
EXTERNAL_GROUP: Final = "external.metrics.k8s.io"
CUSTOM_VERSIONS: Final = ("v1beta2", "v1beta1")  # preferred first
EXTERNAL_VERSIONS: Final = ("v1beta1",)
SERVED: Final = {CUSTOM_GROUP: CUSTOM_VERSIONS, EXTERNAL_GROUP: EXTERNAL_VERSIONS}
WILDCARD: Final = "*"


@dataclass(frozen=True, slots=True)
class CustomMetricPath:
    version: str
    namespace: str | None  # None for cluster-scoped objects
    resource: str  # group-resource as written: "pods", "deployments.apps", "namespaces", "nodes"
    name: str  # object name, or "*"
    metric: str
    namespace_metric: bool = False  # namespaces/{ns}/metrics/{metric}: the Namespace object itself

    @property
    def wildcard(self) -> bool:
        return self.name == WILDCARD


@dataclass(frozen=True, slots=True)
class ExternalMetricPath:
    version: str
    namespace: str
    metric: str


def path_segments(raw_path: str) -> list[str]:
    """The segments of a request's raw path (without its query), each percent-decoded on its own."""
    rest = raw_path.split("?", 1)[0].strip("/")
    return [unquote(part) for part in rest.split("/")] if rest else []


def _after_group_version(raw_path: str, group: str, version: str) -> list[str]:
    parts = path_segments(raw_path)
    if parts[:3] != ["apis", group, version]:
        raise ApiError(404, f"the server could not find the requested resource {raw_path}")
    return parts[3:]


def parse_custom_path(raw_path: str, version: str) -> CustomMetricPath:
    """Parse a custom-metrics path: the part after /apis/custom.metrics.k8s.io/{version}/."""
    parts = _after_group_version(raw_path, CUSTOM_GROUP, version)
    if any(part == "" for part in parts):
        raise bad_request(f"empty path segment in {raw_path}")
    if len(parts) < 3:
        raise bad_request(
            f"the path {raw_path} names no metric: use namespaces/{{namespace}}/{{resource}}/{{name or *}}/{{metric}}, "
            "{resource}/{name or *}/{metric} or namespaces/{namespace}/metrics/{metric}"
        )
    if len(parts) == 3:
        resource, name, metric = parts
        return CustomMetricPath(version, None, resource, name, metric)
    if parts[0] != "namespaces" or len(parts) > 5:
        raise ApiError(404, f"the server could not find the requested resource {raw_path}")
    if len(parts) == 4:
        if parts[2] != "metrics":
            raise ApiError(404, f"the server could not find the requested resource {raw_path}")
        return CustomMetricPath(version, parts[1], "namespaces", parts[1], parts[3], namespace_metric=True)
    _, namespace, resource, name, metric = parts
    return CustomMetricPath(version, namespace, resource, name, metric)


def parse_external_path(raw_path: str, version: str) -> ExternalMetricPath:
    """Parse an external-metrics path: the part after /apis/external.metrics.k8s.io/{version}/."""
    parts = _after_group_version(raw_path, EXTERNAL_GROUP, version)
    if any(part == "" for part in parts):
        raise bad_request(f"empty path segment in {raw_path}")
    if len(parts) != 3 or parts[0] != "namespaces":
        if len(parts) < 3:
            raise bad_request(f"the path {raw_path} names no metric: use namespaces/{{namespace}}/{{metric}}")
        raise ApiError(404, f"the server could not find the requested resource {raw_path}")
    return ExternalMetricPath(version, parts[1], parts[2])


_NAMESPACE_SUBRESOURCES: Final = frozenset({"status", "finalize"})


def request_attributes(method: str, raw_path: str) -> ResourceAttributes | None:
    """The resource attributes of a request under /apis/{group}/{version}/..., following kube-apiserver's
    RequestInfoFactory; None for any other path (a non-resource request: discovery, openapi, health, metrics)."""
    parts = path_segments(raw_path)
    if len(parts) < 4 or parts[0] != "apis":
        return None
    group, version, rest = parts[1], parts[2], parts[3:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    method_verbs = {
        "GET": "get",
        "HEAD": "get",
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete",
    }
    verb = method_verbs.get(method.upper(), method.lower())
    if verb == "get" and not name:
        verb = "list"
    return ResourceAttributes(
        verb=verb,
        group=group,
        resource=resource,
        version=version,
        subresource=subresource,
        namespace=namespace,
        name=name,
    )


def resource_attributes(request: web.Request) -> ResourceAttributes | None:
    """What authorization checks for `request` (the middleware of adapter.auth.requests calls this)."""
    return request_attributes(request.method, request.rel_url.raw_path)
