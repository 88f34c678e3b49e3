"""Discovery: `/version`, `/api`, `/apis` and the resource lists, enough for clients to start."""

from __future__ import annotations

from aiohttp import web

from simulation.kubeapi.objects import KINDS, JsonObject, status_object


async def version(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "major": "1",
            "minor": "32",
            "gitVersion": "v1.32.0-gpu-pulse-sim",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.23.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }
    )


async def api_versions(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}],
        }
    )


def api_group_list(extra: list[JsonObject] | None = None) -> web.Response:
    """`/apis`: the stand-in's own groups, then `extra` (the aggregated APIServices' groups)."""
    groups = [
        ("apps", "v1"),
        ("autoscaling", "v2"),
        ("authentication.k8s.io", "v1"),
        ("authorization.k8s.io", "v1"),
        ("resource.k8s.io", "v1"),
    ]
    own: list[JsonObject] = [
        {
            "name": g,
            "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
            "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v},
        }
        for g, v in groups
    ]
    return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": [*own, *(extra or [])]})


async def resource_list(request: web.Request) -> web.Response:
    group_version = request.path.removeprefix("/api/").removeprefix("/apis/")
    resources: list[JsonObject] = [
        {
            "name": k.resource,
            "singularName": k.kind.lower(),
            "namespaced": k.namespaced,
            "kind": k.kind,
            "verbs": ["get", "list", "watch"],
            **({"shortNames": list(k.short_names)} if k.short_names else {}),
        }
        for k in KINDS.values()
        if k.group_version == group_version
    ]
    reviews = {"authentication.k8s.io/v1": "TokenReview", "authorization.k8s.io/v1": "SubjectAccessReview"}
    if group_version in reviews:
        kind = reviews[group_version]
        resources.append(
            {"name": kind.lower() + "s", "singularName": "", "namespaced": False, "kind": kind, "verbs": ["create"]}
        )
    if not resources:
        return web.json_response(
            status_object(404, "NotFound", "the server could not find the requested resource"), status=404
        )
    return web.json_response({"kind": "APIResourceList", "groupVersion": group_version, "resources": resources})
