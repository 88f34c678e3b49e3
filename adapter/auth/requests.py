"""Authentication and authorization of requests, as an aggregated API server does it (kubernetes/apiserver:
requestheader, x509, delegated TokenReview and SubjectAccessReview).

Authenticators are tried in Kubernetes' order: requestheader (a proxy certificate from the requestheader CA, then the
`X-Remote-*` headers), client certificate (client CA: CN is the user, O the groups), bearer token (TokenReview).
Authorization asks a SubjectAccessReview. The aiohttp middleware answers 401/403 (and 500 when the
SubjectAccessReview cannot be made) with Kubernetes `Status` bodies; health paths, and any
`--authorization-always-allow-paths`, pass.

A TokenReview that cannot be made (the API server unreachable) is a 401 `Unauthorized`, as kube-apiserver answers:
kubernetes/apiserver pkg/endpoints/filters/authentication.go `withAuthentication` logs the authenticator's error and
serves the `failed` handler (`Unauthorized`: `apierrors.NewUnauthorized("Unauthorized")`) whether the request was
rejected or could not be checked; pkg/authentication/request/union/union.go tries every authenticator and fails only
when none knows the user. The error goes to the log; the token reviewer counts it
(`gpu_pulse_adapter_authentication_errors_total`).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Collection
from typing import Protocol

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from adapter.auth.clientcert import ClientCertAuthenticator
from adapter.auth.config import AuthenticationConfig
from adapter.auth.identity import (
    AuthenticationUnavailableError,
    AuthorizationUnavailableError,
    Decision,
    NonResourceAttributes,
    RequestAttributes,
    ResourceAttributes,
    UserInfo,
)
from adapter.auth.requestheader import RequestHeaderAuthenticator
from adapter.auth.tokenreview import TokenReviewer
from adapter.auth.trust import Clock
from adapter.status import status_response

__all__ = [
    "HEALTH_PATHS",
    "USER_KEY",
    "Authenticator",
    "Authorizer",
    "Decision",
    "DelegatingAuthenticator",
    "NonResourceAttributes",
    "RequestAttributes",
    "ResourceAttributes",
    "UserInfo",
    "auth_middleware",
    "forbidden_message",
]

HEALTH_PATHS = ("/healthz", "/livez", "/readyz")

log = logging.getLogger(__name__)

USER_KEY = web.RequestKey("gpu_pulse_user", UserInfo)
"""Where the middleware leaves the authenticated user for handlers: `request[USER_KEY]`."""


class Authenticator(Protocol):
    async def authenticate(self, request: web.Request) -> UserInfo | None:
        """The request's user, or None. Raises AuthenticationUnavailableError when it cannot tell."""
        ...


class Authorizer(Protocol):
    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        """Raises AuthorizationUnavailableError when it cannot tell."""
        ...


def peer_certificate(request: web.Request) -> bytes | None:
    """The client certificate (DER) the TLS layer accepted, if the client sent one."""
    if request.transport is None:
        return None
    ssl_object = request.transport.get_extra_info("ssl_object")
    if not isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return der or None


def bearer_token(request: web.Request) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class DelegatingAuthenticator:
    """requestheader, then client certificate, then bearer token; the first that knows the user wins."""

    def __init__(
        self,
        *,
        request_header: RequestHeaderAuthenticator | None = None,
        client_cert: ClientCertAuthenticator | None = None,
        tokens: TokenReviewer | None = None,
    ) -> None:
        self._certificates = (request_header, client_cert)
        self._tokens = tokens

    @classmethod
    def from_config(
        cls, config: AuthenticationConfig, tokens: TokenReviewer | None, *, clock: Clock | None = None
    ) -> DelegatingAuthenticator:
        authenticator = cls(tokens=tokens)
        authenticator.reconfigure(config, clock=clock)
        return authenticator

    def reconfigure(self, config: AuthenticationConfig, *, clock: Clock | None = None) -> None:
        """Use the CAs and requestheader settings of `config` from the next request on (one reference swap)."""
        self._certificates = (
            RequestHeaderAuthenticator(config.request_header, clock=clock) if config.request_header else None,
            ClientCertAuthenticator(config.client_ca_bundle, clock=clock) if config.client_ca_bundle else None,
        )

    async def authenticate(self, request: web.Request) -> UserInfo | None:
        user: UserInfo | None = None
        der = peer_certificate(request)
        if der is not None:
            request_header, client_cert = self._certificates
            if request_header is not None:
                user = request_header.authenticate(der, request.headers)
            if user is None and client_cert is not None:
                user = client_cert.authenticate(der)
        if user is None and self._tokens is not None and (token := bearer_token(request)) is not None:
            user = await self._tokens.review(token)
        return user.authenticated() if user is not None else None


def _path_matcher(paths: Collection[str]) -> Callable[[str], bool]:
    exact = frozenset(p for p in paths if not p.endswith("*"))
    prefixes = tuple(p[:-1] for p in paths if p.endswith("*"))
    return lambda path: path in exact or path.startswith(prefixes)


def forbidden_message(user: UserInfo, attributes: RequestAttributes, reason: str = "") -> str:
    """The message kube-apiserver gives a 403, so that users read the familiar sentence."""
    if isinstance(attributes, NonResourceAttributes):
        message = f'forbidden: User "{user.name}" cannot {attributes.verb} path "{attributes.path}"'
    else:
        resource = attributes.resource + (f"/{attributes.subresource}" if attributes.subresource else "")
        what = f"{attributes.resource}.{attributes.group}" if attributes.group else attributes.resource
        subject = f'{what} "{attributes.name}"' if attributes.name else what
        scope = f'in the namespace "{attributes.namespace}"' if attributes.namespace else "at the cluster scope"
        message = (
            f'{subject} is forbidden: User "{user.name}" cannot {attributes.verb} resource "{resource}" '
            f'in API group "{attributes.group}" {scope}'
        )
    return f"{message}: {reason}" if reason else message


def auth_middleware(
    authenticator: Authenticator,
    authorizer: Authorizer,
    resource_attributes: Callable[[web.Request], ResourceAttributes | None],
    always_allow_paths: Collection[str] = (),
) -> Middleware:
    """Authenticate, then authorize, every request but those on health and always-allowed paths.

    `resource_attributes` says which API resource a request touches; None makes it a non-resource request (checked
    by path and lower-case HTTP method, as Kubernetes does for discovery and OpenAPI). Handlers find the user under
    `USER_KEY`. `always_allow_paths` entries ending in `*` are prefixes.
    """
    allowed_without_auth = _path_matcher((*HEALTH_PATHS, *always_allow_paths))

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if allowed_without_auth(request.path):
            return await handler(request)
        try:
            user = await authenticator.authenticate(request)
        except AuthenticationUnavailableError as e:
            log.warning("unable to authenticate the request to %s: %s", request.path, e)
            return status_response(401, "Unauthorized", "Unauthorized")
        if user is None:
            return status_response(401, "Unauthorized", "Unauthorized")
        attributes: RequestAttributes | None = resource_attributes(request)
        if attributes is None:
            attributes = NonResourceAttributes(path=request.path, verb=request.method.lower())
        try:
            decision = await authorizer.authorize(user, attributes)
        except AuthorizationUnavailableError as e:
            return status_response(500, "InternalError", f"cannot authorize the request: {e}")
        if not decision.allowed:
            return status_response(403, "Forbidden", forbidden_message(user, attributes, decision.reason))
        request[USER_KEY] = user
        return await handler(request)

    return middleware
