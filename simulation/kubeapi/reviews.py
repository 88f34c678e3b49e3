"""TokenReview and SubjectAccessReview answers: bearer tokens mapped to users, and an authorization policy."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from simulation.kubeapi.objects import JsonObject


@dataclass(frozen=True, slots=True)
class AccessGrant:
    """One allow rule of a table policy. `"*"` matches anything; `path` (a prefix when it ends in `*`) makes it a
    non-resource rule. A grant applies to `user`, or to members of `group`, or to everyone when both are None."""

    user: str | None = None
    group: str | None = None
    verb: str = "*"
    api_group: str = "*"
    resource: str = "*"
    subresource: str = "*"
    namespace: str = "*"
    name: str = "*"
    path: str | None = None

    def allows(self, spec: Mapping[str, Any]) -> bool:
        if self.user is not None and spec.get("user") != self.user:
            return False
        if self.group is not None and self.group not in (spec.get("groups") or ()):
            return False
        if self.path is not None:
            attrs = spec.get("nonResourceAttributes")
            if not attrs or not _wild(self.verb, attrs.get("verb", "")):
                return False
            want = str(attrs.get("path", ""))
            return want.startswith(self.path[:-1]) if self.path.endswith("*") else want == self.path
        attrs = spec.get("resourceAttributes")
        if not attrs:
            return False
        pairs = (
            (self.verb, "verb"),
            (self.api_group, "group"),
            (self.resource, "resource"),
            (self.subresource, "subresource"),
            (self.namespace, "namespace"),
            (self.name, "name"),
        )
        return all(_wild(mine, attrs.get(key) or "") for mine, key in pairs)


def _wild(pattern: str, value: str) -> bool:
    return pattern in ("*", value)


AuthorizationPolicy = Callable[[Mapping[str, Any]], bool]


# The audience of tokens made for the API server itself: kube-apiserver's --api-audiences defaults to its service
# account issuer, https://kubernetes.default.svc.cluster.local on most clusters (kubernetes/kubernetes,
# pkg/controlplane/apiserver/options: the issuer; TokenRequest's default audiences are the API audiences).
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True, slots=True)
class TokenUser:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # the audiences the token is bound to (a projected token's `audience`); a TokenReview naming none of them fails
    audiences: tuple[str, ...] = (API_AUDIENCE,)


def reviewed_audiences(user: TokenUser, asked: Iterable[str]) -> tuple[str, ...]:
    """The audiences a TokenReview reports for a token of `user`: those asked (the API server's own when none are)
    that the token is bound to; empty means the token is not valid for them.

    kube-apiserver (kubernetes/kubernetes pkg/registry/authentication/tokenreview/storage.go `Create`) authenticates
    the token for `spec.audiences`, or its own API audiences when the spec names none, and reports the intersection
    in `status.audiences`; a service account token bound to other audiences does not authenticate.
    """
    wanted = tuple(asked) or (API_AUDIENCE,)
    return tuple(a for a in wanted if a in user.audiences)


def policy_of(policy: AuthorizationPolicy | Iterable[AccessGrant] | None) -> AuthorizationPolicy:
    if policy is None:
        return lambda spec: True
    if callable(policy):
        return policy
    grants = tuple(policy)
    return lambda spec: any(g.allows(spec) for g in grants)


async def json_body(request: web.Request) -> JsonObject | None:
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def review_reply(review: JsonObject, api_version: str, kind: str, status: JsonObject) -> JsonObject:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"creationTimestamp": None},
        "spec": review.get("spec") or {},
        "status": status,
    }
