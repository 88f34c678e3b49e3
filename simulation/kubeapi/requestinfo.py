"""What a request asks to do, as kube-apiserver's authorizer sees it: the attributes of a SubjectAccessReview.

k8s.io/apiserver pkg/endpoints/request/requestinfo.go (`RequestInfoFactory.NewRequestInfo`): under
`/apis/<group>/<version>/` (or `/api/<version>/`) a path is a resource request, `[namespaces/<ns>/]<resource>
[/<name>[/<subresource>...]]`, its verb from the method (GET is `get` with a name, `list` without, `watch` with
`?watch=true`); any other path, and a group or version alone, is a non-resource request with the lower-case method as
verb. The stand-in's aggregator asks its authorization policy with these before it proxies, as kube-apiserver
authorizes every request before its aggregator does (pkg/controlplane/apiserver/config.go: the authorization filter
wraps the whole handler chain, the aggregator's included).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_NAMESPACE_SUBRESOURCES = ("status", "finalize")
_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def access_attributes(method: str, path: str, query: Mapping[str, str]) -> dict[str, Any]:
    """`resourceAttributes` or `nonResourceAttributes` of a SubjectAccessReview spec for this request."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["apis"] and len(parts) > 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    elif parts[:1] == ["api"] and len(parts) > 2:
        group, version, rest = "", parts[1], parts[2:]
    else:
        return {"nonResourceAttributes": {"path": path, "verb": method.lower()}}
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]  # /namespaces/<ns> and its own subresources (status, finalize) are the namespace itself
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    verb = _VERBS.get(method.upper(), method.lower())
    if verb == "get" and not name:
        verb = "watch" if query.get("watch") in ("1", "true") else "list"
    elif verb == "delete" and not name:
        verb = "deletecollection"
    attributes = {"verb": verb, "group": group, "version": version, "resource": resource, "namespace": namespace}
    attributes |= {"name": name, "subresource": subresource}
    return {"resourceAttributes": attributes}


def forbidden_message(user: str, attributes: Mapping[str, Any]) -> str:
    """kube-apiserver's reason for a 403 (k8s.io/apiserver pkg/endpoints/handlers/responsewriters/errors.go,
    `forbiddenMessage`)."""
    plain = attributes.get("nonResourceAttributes")
    if plain is not None:
        return f'forbidden: User "{user}" cannot {plain["verb"]} path "{plain["path"]}"'
    spec = attributes["resourceAttributes"]
    resource = spec["resource"] + (f"/{spec['subresource']}" if spec["subresource"] else "")
    qualified = f"{spec['resource']}.{spec['group']}" if spec["group"] else spec["resource"]
    subject = f'{qualified} "{spec["name"]}" is forbidden' if spec["name"] else f"{qualified} is forbidden"
    what = f'User "{user}" cannot {spec["verb"]} resource "{resource}" in API group "{spec["group"]}"'
    where = f' in the namespace "{spec["namespace"]}"' if spec["namespace"] else " at the cluster scope"
    return f"{subject}: {what}{where}"
