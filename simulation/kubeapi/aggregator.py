"""The kube-aggregator part of the stand-in: API groups served by another server (an APIService), proxied to it.

As kube-apiserver's aggregator does (kubernetes/kube-aggregator pkg/apiserver/handler_proxy.go, with client-go
transport/round_trippers.go `NewAuthProxyRoundTripper`): the request is forwarded to the service over TLS with the
aggregator's own proxy client certificate, the user the server authenticated in `X-Remote-User`, one `X-Remote-Group`
per group, and no `Authorization` or caller-supplied `X-Remote-*` header. Who the user is, and whether it may ask, the
server decides first (server.py, `_aggregator`): a client certificate from the cluster CA (CN the user, O the groups) or
a bearer token it issued, with `system:authenticated` added as kube-apiserver's authenticated group adder adds it
(kubernetes/kubernetes pkg/kubeapiserver/authenticator/config.go wraps its authenticators in k8s.io/apiserver's
`group.NewAuthenticatedGroupAdder`); no credential at all is `system:anonymous` in `system:unauthenticated`
(--anonymous-auth is on by default), a token it does not know is 401. `/apis` lists the aggregated groups beside the
stand-in's own.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from cryptography import x509
from cryptography.x509.oid import NameOID

from simulation.kubeapi.objects import JsonObject, status_object

AUTHENTICATED_GROUP = "system:authenticated"
ANONYMOUS_USER = "system:anonymous"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
_DROPPED = ("authorization", "host", "connection", "content-length", "transfer-encoding")


@dataclass(frozen=True, slots=True)
class AggregatedApi:
    """An APIService: `group` (with `versions`, preferred first) served at `url` (https), reached with `client_ssl`
    (trusting the service's serving CA, presenting the aggregator's proxy client certificate)."""

    group: str
    versions: tuple[str, ...]
    url: str
    client_ssl: ssl.SSLContext = field(compare=False)

    def group_entry(self) -> JsonObject:
        versions = [{"groupVersion": f"{self.group}/{v}", "version": v} for v in self.versions]
        return {"name": self.group, "versions": versions, "preferredVersion": versions[0]}


def _names(certificate: x509.Certificate, oid: x509.ObjectIdentifier) -> list[str]:
    values = (a.value for a in certificate.subject.get_attributes_for_oid(oid))
    return [v if isinstance(v, str) else v.decode() for v in values]


def certificate_user(request: web.Request) -> tuple[str, list[str]] | None:
    """(user, groups) from the verified client certificate of the request, or None."""
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport is not None else None
    if not isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    certificate = x509.load_der_x509_certificate(der)
    users = _names(certificate, NameOID.COMMON_NAME)
    return (users[0], _names(certificate, NameOID.ORGANIZATION_NAME)) if users else None


def aggregated(apis: Mapping[str, AggregatedApi], path: str) -> AggregatedApi | None:
    """The APIService serving `path` (`/apis/<group>` or below), if any."""
    parts = path.split("/")
    return apis.get(parts[2]) if len(parts) > 2 and parts[1] == "apis" else None


def forwarded_headers(incoming: Iterable[tuple[str, str]], user: str, groups: Sequence[str]) -> list[tuple[str, str]]:
    """The headers the aggregator sends on: the caller's, less credentials and any `X-Remote-*` it made up, plus the
    user and each of its groups as the authenticator found them."""
    headers = [(k, v) for k, v in incoming if k.lower() not in _DROPPED and not k.lower().startswith("x-remote-")]
    headers.append(("X-Remote-User", user))
    headers.extend(("X-Remote-Group", group) for group in groups)
    return headers


async def proxy(
    api: AggregatedApi, request: web.Request, session: aiohttp.ClientSession, user: str, groups: Sequence[str]
) -> web.StreamResponse:
    """Forward `request` to the APIService, as the aggregator does, for the user the server authenticated."""
    headers = forwarded_headers(request.headers.items(), user, groups)
    target = api.url.rstrip("/") + request.rel_url.raw_path_qs
    body = await request.read()
    try:
        async with session.request(
            request.method, target, headers=headers, data=body or None, ssl=api.client_ssl
        ) as upstream:
            payload = await upstream.read()
            content_type = upstream.headers.get("Content-Type", "application/json")
            return web.Response(status=upstream.status, body=payload, headers={"Content-Type": content_type})
    except aiohttp.ClientError as error:
        message = f"error trying to reach service: {error}"  # kube-aggregator answers 503 when the service is down
        return web.json_response(status_object(503, "ServiceUnavailable", message), status=503)
