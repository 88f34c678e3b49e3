"""Requests to the Kubernetes API on the event loop (aiohttp), with the credentials of a `kubernetes` client.

The `kubernetes` client is synchronous: each call runs in a worker thread, and its work (building models, urllib3,
deserializing) competes with the event loop for the interpreter. For requests made while answering clients (a
SubjectAccessReview per decision and life), this module makes them on the loop instead, with what the client's
`Configuration` holds: the server's URL, its CA, the client certificate, the bearer token (through the configuration's
refresh hook, so a rotated service account token is read again as the client would), and `verify_ssl` and
`tls_server_name`. A proxy configured for the client is not used: requests go to the API server directly.

Answers are read bounded (toolkit/responses.py) and must be JSON objects; anything else is a `KubeRequestError`.
"""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp

from toolkit.responses import UpstreamAnswerError, decode_json, read_bounded

# A review's answer is its request echoed with a status: a few KiB. This bounds what a broken server can make us hold.
MAX_ANSWER_BYTES = 1024 * 1024


class KubeRequestError(Exception):
    """A request that got no usable answer. `status` is the HTTP status when one came, else None; the message is one
    line."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def ssl_context_of(configuration: Any) -> ssl.SSLContext | None:
    """The TLS context the client would use for an https server (None for plain http)."""
    if not str(configuration.host).startswith("https"):
        return None
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class KubeRequests:
    """POSTs of JSON objects to the API server of a `kubernetes.client.Configuration`, on the running event loop."""

    def __init__(self, configuration: Any, *, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        self._configuration = configuration
        self._base = str(configuration.host).rstrip("/")
        self._ssl = ssl_context_of(configuration)
        self._server_name = getattr(configuration, "tls_server_name", None) or None
        self._max_bytes = max_answer_bytes
        self._session: aiohttp.ClientSession | None = None

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        token = self._configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            headers["Authorization"] = token
        return headers

    async def post(self, path: str, body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """The JSON object the server answers to `body` POSTed at `path` (2xx only); KubeRequestError otherwise."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16, ssl=self._ssl or False))
        extra: dict[str, Any] = {"server_hostname": self._server_name} if self._server_name and self._ssl else {}
        try:
            async with self._session.post(
                self._base + path,
                json=body,
                headers=self._headers(),
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout),
                **extra,
            ) as response:
                answered = await read_bounded(response, self._max_bytes)
                status, reason = response.status, response.reason or ""
        except UpstreamAnswerError as e:
            raise KubeRequestError(str(e)) from None
        except TimeoutError:
            raise KubeRequestError(f"no answer within {timeout:g} s") from None
        except aiohttp.ClientError as e:
            raise KubeRequestError(f"{type(e).__name__}: {e}".splitlines()[0]) from None
        if not 200 <= status < 300:
            raise KubeRequestError(f"HTTP {status} {reason}".strip(), status)
        try:
            answer = decode_json(answered)
        except UpstreamAnswerError as e:
            raise KubeRequestError(str(e), status) from None
        if not isinstance(answer, dict):
            raise KubeRequestError("the answer is not a JSON object", status)
        return answer

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
