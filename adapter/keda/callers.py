"""Who calls the external scaler, and whether they may read the namespace a ScaledObjectRef names.

Clients reach the gRPC server only through the port's front (keda/front.py), which ends their TLS and opens one
loopback connection to gRPC for each of theirs. The front enters each such connection in a `PeerDirectory` under its
local port: who is on the other side (the client's address, and the certificate its TLS handshake verified). A call
is looked up there by its peer (grpc core's peer string, `ipv4:127.0.0.1:<that port>`); one that is not there did not
come through the front (another process in the pod, on the loopback port) and is refused as unauthenticated.

A caller is named by its client certificate where the port asks for one (`--keda-client-ca-file`): the subject's
common name is the user and its organizations the groups, as kube-apiserver's x509 authenticator reads a client
certificate (adapter/auth/clientcert.py does the same for the HTTP side). Without a certificate, the caller is its
address (without the port: one host's connections are one caller).

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
METRICS_GROUP = "custom.metrics.k8s.io"
EXTERNAL_METRICS_GROUP = "external.metrics.k8s.io"


class Authorizer(Protocol):
    """What adapter/auth/sar.py's SubjectAccessReviewer answers (the HTTP side's Authorizer, without its HTTP)."""

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        """Raises AuthorizationUnavailableError when it cannot tell."""
        ...


@dataclass(frozen=True, slots=True)
class Peer:
    """A client of the port as its front met it."""

    host: str  # its address without the port, as grpc core writes a peer: `ipv4:10.0.0.7`, `ipv6:[fd00::7]`
    certificate: bytes | None = None  # the client certificate its TLS handshake verified (DER), if any


class PeerDirectory:
    """The front's connections to gRPC, by the local port each comes from."""

    def __init__(self) -> None:
        self._peers: dict[int, Peer] = {}

    def __len__(self) -> int:
        return len(self._peers)

    def add(self, port: int, peer: Peer) -> None:
        self._peers[port] = peer

    def remove(self, port: int) -> None:
        self._peers.pop(port, None)

    def of(self, grpc_peer: str) -> Peer | None:
        """The client behind a call whose peer is `grpc_peer`; None unless it is one of the front's connections."""
        host, _, port = grpc_peer.rpartition(":")
        if host not in ("ipv4:127.0.0.1", "ipv6:[::1]") or not port.isdigit():
            return None
        return self._peers.get(int(port))


@dataclass(frozen=True, slots=True)
class Caller:
    key: str  # what the caller's bounds are counted by: "user:<name>" or "peer:<address>"
    user: UserInfo | None  # the certificate's user, or None without one


def caller_of(context: Context, peers: PeerDirectory) -> Caller:
    """The caller of this call: its client certificate's user where it presented one, else its address.
    NamespaceAccessDeniedError (unauthenticated) for a call that did not come through the front."""
    peer = peers.of(context.peer())
    if peer is None:
        raise NamespaceAccessDeniedError("the call did not come through the KEDA port", authenticated=False)
    user = certificate_user(peer.certificate)
    if user is not None:
        return Caller(f"user:{user.name}", user)
    return Caller(f"peer:{peer.host}", None)


def certificate_user(certificate: bytes | None) -> UserInfo | None:
    """The user a verified client certificate (DER) names (CN, groups from O); None without one or without a CN."""
    if not certificate:
        return None
    try:
        parsed = x509.load_der_x509_certificate(certificate)
    except ValueError:
        return None
    name = common_name(parsed)
    if not name:
        return None
    return UserInfo(name=name, groups=organizations(parsed)).authenticated()


def peer_host(address: tuple[Any, ...] | str | None) -> str:
    """A socket's peer address as grpc core names a peer, without the port: `("10.0.0.1", 4321)` ->
    `ipv4:10.0.0.1`, `("::1", 4321, 0, 0)` -> `ipv6:[::1]`; a Unix socket's path as it is."""
    if isinstance(address, tuple) and len(address) >= 2:
        host = str(address[0])
        return f"ipv6:[{host}]" if ":" in host else f"ipv4:{host}"
    return f"unix:{address or ''}"


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
    "Peer",
    "PeerDirectory",
    "caller_of",
    "certificate_user",
    "peer_host",
]
