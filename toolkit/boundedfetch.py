"""One bounded read of a metrics endpoint that is someone else's server (a serving engine's in a tenant's pod, an
inference gateway's): a GET with a deadline, a size cap, no redirects. The exporter reads engines with it
(exporter/engines/reader.py), the adapter reads demand at gateways (adapter/demand/).

The endpoint is untrusted, so nothing it sends is trusted to be small, quick or honest: the whole read
(connect, headers, body) has one deadline; the body is read in chunks and refused past `max_bytes`, before and after
decompression (a gzip body a few kilobytes long can inflate to gigabytes); a redirect is refused, never followed (it
could point anywhere); TLS to a pod IP is not verified (no certificate names an ephemeral pod IP), which is said in
docs/security.md. A failure is a `FetchError` with a bounded `kind` (for self-metrics) and a one-line reason.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
CHUNK = 64 * 1024
# what the text format is asked for in (prometheus/common expfmt: text 0.0.4); identity: compressing a few hundred
# kilobytes costs the engine more CPU than sending them across a node's pod network
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

# the kinds of failure, a bounded label value (gpu_pulse_engine_read_failures_total, the adapter's demand reads)
CONNECT = "connect"  # nothing accepts connections there (yet)
HTTP_STATUS = "http_status"
REDIRECT = "redirect"
TIMEOUT = "timeout"
TOO_LARGE = "too_large"
ENCODING = "encoding"  # a Content-Encoding or charset it cannot be read in
FAILURE_KINDS = (CONNECT, HTTP_STATUS, REDIRECT, TIMEOUT, TOO_LARGE, ENCODING)


class FetchError(Exception):
    """A read that failed: `kind` one of FAILURE_KINDS, `reason` one line."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Body:
    text: str
    wire_bytes: int  # as received (compressed, when it was)
    seconds: float


def _insecure_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class BoundedFetcher:
    """Reads endpoints through one aiohttp session (its own connection pool); use inside one event loop."""

    def __init__(
        self, *, timeout: float, max_bytes: int = DEFAULT_MAX_BYTES, tls: ssl.SSLContext | None = None
    ) -> None:
        """`tls`: how https endpoints are verified; None: not at all (a pod IP, which no certificate names)."""
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._session: aiohttp.ClientSession | None = None
        self._tls = tls if tls is not None else _insecure_context()

    async def __aenter__(self) -> BoundedFetcher:
        self._session = aiohttp.ClientSession(
            auto_decompress=False,  # bounded here instead
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, force_close=False),
            trust_env=False,  # never through a proxy from the environment: the pod's own IP only
        )
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def get(self, url: str, headers: Mapping[str, str] | None = None) -> Body:
        """The body at `url` (decoded text), asked for with `headers` beside the fetcher's own; FetchError
        otherwise."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                return await self._get(url, started, headers or {})
        except TimeoutError:
            raise FetchError(TIMEOUT, f"no complete answer within {self.timeout:g} s") from None

    async def _get(self, url: str, started: float, headers: Mapping[str, str]) -> Body:
        assert self._session is not None, "use the fetcher as an async context manager"
        try:
            async with self._session.get(
                url,
                allow_redirects=False,
                headers={**headers, "Accept": ACCEPT, "Accept-Encoding": "identity"},
                ssl=self._tls if url.startswith("https:") else True,  # True: aiohttp's default (no TLS for http)
            ) as response:
                if 300 <= response.status < 400:
                    raise FetchError(REDIRECT, f"HTTP {response.status} redirect refused (never followed)")
                if response.status != 200:
                    raise FetchError(HTTP_STATUS, f"HTTP {response.status}")
                length = response.content_length
                if length is not None and length > self.max_bytes:
                    raise FetchError(TOO_LARGE, f"Content-Length {length} above {self.max_bytes} bytes")
                raw = await self._body(response)
                encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
                charset = response.charset or "utf-8"
        except aiohttp.ClientConnectionError as error:
            raise FetchError(CONNECT, _one_line(error)) from None
        except aiohttp.ClientResponseError as error:  # a malformed answer (headers too long, bad status line)
            raise FetchError(HTTP_STATUS, _one_line(error)) from None
        data = self._decoded(raw, encoding)
        try:
            text = data.decode(charset, errors="replace")
        except LookupError:
            raise FetchError(ENCODING, f"charset {charset[:40]!r} unknown") from None
        return Body(text, len(raw), time.perf_counter() - started)

    async def _body(self, response: aiohttp.ClientResponse) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            chunk = await response.content.read(CHUNK)
            if not chunk:
                return b"".join(parts)
            size += len(chunk)
            if size > self.max_bytes:
                raise FetchError(TOO_LARGE, f"body larger than {self.max_bytes} bytes")
            parts.append(chunk)

    def _decoded(self, raw: bytes, encoding: str) -> bytes:
        if encoding in ("identity", ""):
            return raw
        if encoding not in ("gzip", "x-gzip", "deflate"):
            raise FetchError(ENCODING, f"Content-Encoding {encoding[:40]!r} not read")
        inflater = zlib.decompressobj(wbits=47 if encoding != "deflate" else 15)  # 47: gzip or zlib header
        try:
            data = inflater.decompress(raw, self.max_bytes + 1)
        except zlib.error as error:
            raise FetchError(ENCODING, f"{encoding} body is corrupt: {error}") from None
        if len(data) > self.max_bytes or inflater.unconsumed_tail:
            raise FetchError(TOO_LARGE, f"body inflates to more than {self.max_bytes} bytes")
        return data


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:160]
