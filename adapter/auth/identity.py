"""Who is asking: the user an authenticator found, and what they ask to do (the attributes authorization checks)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

AUTHENTICATED_GROUP = "system:authenticated"


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def authenticated(self) -> UserInfo:
        """This user with the `system:authenticated` group, as Kubernetes adds it to every authenticated user."""
        if AUTHENTICATED_GROUP in self.groups:
            return self
        return UserInfo(self.name, self.uid, (*self.groups, AUTHENTICATED_GROUP), self.extra)

    def cache_key(self) -> tuple[object, ...]:
        return (self.name, self.uid, self.groups, tuple(sorted((k, tuple(v)) for k, v in self.extra.items())))


@dataclass(frozen=True, slots=True)
class ResourceAttributes:
    """A request on an API resource, e.g. get pods/gpu_utilization in group custom.metrics.k8s.io."""

    verb: str
    group: str
    resource: str
    version: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""


@dataclass(frozen=True, slots=True)
class NonResourceAttributes:
    """A request on a plain path (discovery, OpenAPI, /metrics)."""

    path: str
    verb: str


RequestAttributes = ResourceAttributes | NonResourceAttributes


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""


class AuthenticationUnavailableError(Exception):
    """The authenticator could not decide (TokenReview failed): answer 401 as kube-apiserver does, do not cache."""


class AuthorizationUnavailableError(Exception):
    """The authorizer could not decide (SubjectAccessReview failed): answer 500, do not cache."""
