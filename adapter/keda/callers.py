"""Who calls the external scaler, and whether they may read the namespace a ScaledObjectRef names.

A caller is named by its client certificate where the port asks for one (`--keda-client-ca-file`): the subject's
common name is the user and its organizations the groups, as kube-apiserver's x509 authenticator reads a client
certificate (adapter/auth/clientcert.py does the same for the HTTP side). grpc core hands the verified certificate to
the call in its auth context as `x509_pem_cert` (GRPC_X509_PEM_CERT_PROPERTY_NAME,
include/grpc/grpc_security_constants.h; grpcio's `ServicerContext.auth_context()`). Without a certificate, the caller
is its peer's address (without the port: one host's connections are one caller).

Authorization maps a call on a namespace's workload to what reading the same figures through the custom metrics API
asks: `get` on `pods` (name `*`, subresource the trigger's metric) in `custom.metrics.k8s.io`, in that namespace, asked
of the adapter's SubjectAccessReviewer (adapter/auth/sar.py), decisions cached as the HTTP side's are. So one RBAC rule
grants a KEDA identity what it would grant the HPA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from cryptography import x509

from adapter.auth.identity import (
    AuthorizationUnavailableError,
    Decision,
    RequestAttributes,
    ResourceAttributes,
    UserInfo,
)
from adapter.auth.trust import common_name, organizations

Context = grpc.aio.ServicerContext[Any, Any]
PEM_CERT_PROPERTY = "x509_pem_cert"
METRICS_GROUP = "custom.metrics.k8s.io"
EXTERNAL_METRICS_GROUP = "external.metrics.k8s.io"


class Authorizer(Protocol):
    """What adapter/auth/sar.py's SubjectAccessReviewer answers (the HTTP side's Authorizer, without its HTTP)."""

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        """Raises AuthorizationUnavailableError when it cannot tell."""
        ...


@dataclass(frozen=True, slots=True)
class Caller:
    key: str  # what the caller's bounds are counted by: "user:<name>" or "peer:<address>"
    user: UserInfo | None  # the certificate's user, or None without one


def caller_of(context: Context) -> Caller:
    """The caller of this call: its client certificate's user where it presented one, else its peer's address."""
    user = certificate_user(context)
    if user is not None:
        return Caller(f"user:{user.name}", user)
    return Caller(f"peer:{peer_host(context.peer())}", None)


def certificate_user(context: Context) -> UserInfo | None:
    """The user the verified client certificate names (CN, groups from O), None without one or without a CN."""
    try:
        pems = list(context.auth_context().get(PEM_CERT_PROPERTY) or ())
    except (AttributeError, ValueError):  # a call without a transport security context
        return None
    if not pems:
        return None
    try:
        certificate = x509.load_pem_x509_certificate(pems[0])
    except ValueError:
        return None
    name = common_name(certificate)
    if not name:
        return None
    return UserInfo(name=name, groups=organizations(certificate)).authenticated()


def peer_host(peer: str) -> str:
    """`ipv4:10.0.0.1:4321` -> `ipv4:10.0.0.1`, `ipv6:[::1]:4321` -> `ipv6:[::1]` (grpc core's peer strings)."""
    host, sep, port = peer.rpartition(":")
    return host if sep and port.isdigit() and host else peer


class NamespaceAccessDeniedError(Exception):
    """The caller may not read the namespace's figures (PERMISSION_DENIED) or is not known (UNAUTHENTICATED)."""

    def __init__(self, message: str, *, authenticated: bool = True) -> None:
        super().__init__(message)
        self.authenticated = authenticated


class NamespaceAccess:
    """Whether a caller may read a namespace's figures of a metric, asked of an Authorizer (a SubjectAccessReviewer)."""

    def __init__(self, authorizer: Authorizer) -> None:
        self._authorizer = authorizer
        self.denied = 0

    async def check(self, caller: Caller, namespace: str, metric: str, *, external: bool = False) -> None:
        """Returns when allowed; NamespaceAccessDeniedError, or AuthorizationUnavailableError when the review failed.
        An `external` metric (a demand, adapter/demand/) is reviewed as kube-apiserver reviews a GET of it under
        external.metrics.k8s.io: the resource is the metric's name."""
        if caller.user is None:
            self.denied += 1
            raise NamespaceAccessDeniedError(
                "the call carries no client certificate naming a user", authenticated=False
            )
        if external:
            attributes = ResourceAttributes(
                verb="get", group=EXTERNAL_METRICS_GROUP, resource=metric, namespace=namespace
            )
            what = f'{metric} in API group "{EXTERNAL_METRICS_GROUP}"'
        else:
            attributes = ResourceAttributes(
                verb="get", group=METRICS_GROUP, resource="pods", name="*", subresource=metric, namespace=namespace
            )
            what = f'pods/{metric} in API group "{METRICS_GROUP}"'

        decision = await self._authorizer.authorize(caller.user, attributes)
        if not decision.allowed:
            self.denied += 1
            why = f": {decision.reason}" if decision.reason else ""
            raise NamespaceAccessDeniedError(
                f'User "{caller.user.name}" cannot get {what} in the namespace "{namespace}"{why}'
            )


__all__ = [
    "AuthorizationUnavailableError",
    "Authorizer",
    "Caller",
    "NamespaceAccess",
    "NamespaceAccessDeniedError",
    "caller_of",
    "certificate_user",
    "peer_host",
]
