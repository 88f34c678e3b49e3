"""The two calls of the Prometheus HTTP API that prometheus-adapter's rules need, answers read without trusting them.

- `series(selector, start)`: GET /api/v1/series?match[]=...&start=... (prometheus-adapter pkg/client/api.go `Series`,
  with `start` = now - --metrics-max-age as pkg/custom-provider/provider.go `updateMetrics` sends it). Only each
  series' name and label names are kept, deduplicated: naming and resource mapping read nothing else, and a fleet's
  `container_*` series are many.
- `query(expr, at)`: GET /api/v1/query?query=...&time=... (`Query`, at the instant given: the value and its sample
  time are asked about the same instant). A vector or a scalar answer (external metrics take both,
  pkg/external-provider/metric_converter.go); anything else is the rule's mistake.

The answer shapes are the HTTP API's (prometheus docs/querying/api.md). The body is read up to a bound
(toolkit.responses), decoded by msgspec into typed structs (a wrong shape is "source unavailable"), off the event loop
when large. Redirects are not followed.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from adapter.promadapter.naming import SeriesName
from adapter.sources.metricsource import SourceError, SourceUnavailableError
from adapter.sources.promanswers import raise_unless_success
from toolkit.responses import UpstreamAnswerError, read_bounded

QueryObserver = Callable[[str, float], None]  # (outcome "ok" | "error" | "timeout", seconds)
INLINE_DECODE_BYTES = 64 * 1024


class _Head(msgspec.Struct):
    status: Any = None
    errorType: Any = None  # noqa: N815 (the HTTP API's names)
    error: Any = None


class _SeriesBody(msgspec.Struct):
    data: list[dict[str, str]]


class _VectorSample(msgspec.Struct):
    metric: dict[str, str]
    value: tuple[float, str]


class _VectorData(msgspec.Struct):
    resultType: str  # noqa: N815
    result: Any = None


class _QueryBody(msgspec.Struct):
    data: _VectorData


_HEAD = msgspec.json.Decoder(_Head)
_SERIES = msgspec.json.Decoder(_SeriesBody)
_QUERY = msgspec.json.Decoder(_QueryBody)


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample of an instant query's answer: its labels, its timestamp (Unix seconds) and value."""

    labels: Mapping[str, str]
    at: float
    value: float


@dataclass(frozen=True, slots=True)
class Answer:
    kind: str  # "vector" or "scalar"
    samples: tuple[Sample, ...]


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:200]


def _value(text: str) -> float:
    """A sample value as the API writes it ("1.5", "NaN", "+Inf")."""
    return float(text)


def _decode_series(body: bytes) -> list[SeriesName]:
    decoded = _SERIES.decode(body).data
    names: dict[tuple[str, frozenset[str]], SeriesName] = {}
    for labels in decoded:
        name = labels.get("__name__", "")
        label_names = frozenset(k for k in labels if k != "__name__")
        names.setdefault((name, label_names), SeriesName(name, label_names))
    return list(names.values())


def _decode_query(body: bytes) -> Answer:
    data = _QUERY.decode(body).data
    if data.resultType == "scalar":
        at, value = msgspec.convert(data.result, tuple[float, str])
        return Answer("scalar", (Sample({}, at, _value(value)),))
    if data.resultType != "vector":
        raise SourceError(f"the query returns a {_one_line(data.resultType)}, not an instant vector or a scalar")
    vector = msgspec.convert(data.result or [], list[_VectorSample])
    return Answer("vector", tuple(Sample(s.metric, s.value[0], _value(s.value[1])) for s in vector))


class PrometheusApi:
    """A client of one Prometheus-compatible HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics)."""

    def __init__(
        self,
        url: str,
        *,
        headers: Callable[[], Mapping[str, str]] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 2.0,
        discovery_timeout: float = 30.0,
        max_response_bytes: int = 16 * 1024 * 1024,
        max_series_bytes: int = 128 * 1024 * 1024,
        observe: QueryObserver | None = None,
    ) -> None:
        self._base = url.rstrip("/")
        self._headers = headers
        self._ssl = ssl_context
        self._timeout = timeout
        self._discovery_timeout = discovery_timeout
        self._max_bytes = max_response_bytes
        self._max_series_bytes = max_series_bytes
        self._observe = observe
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=16, ssl=self._ssl or True)
        self._session = aiohttp.ClientSession(connector=connector)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def series(self, selector: str, start: float) -> list[SeriesName]:
        """The distinct (name, label names) of the series `selector` matches since `start` (Unix seconds)."""
        params = {"match[]": selector, "start": f"{start:.3f}"}
        body = await self._get("/api/v1/series", params, self._max_series_bytes, self._discovery_timeout, selector)
        names: list[SeriesName] = await self._decode(_decode_series, body, "series")
        return names

    async def query(self, expr: str, at: float) -> Answer:
        """An instant query evaluated at `at` (Unix seconds)."""
        body = await self._get(
            "/api/v1/query", {"query": expr, "time": f"{at:.3f}"}, self._max_bytes, self._timeout, expr
        )
        answer: Answer = await self._decode(_decode_query, body, "query")
        return answer

    async def _decode(self, decode: Callable[[bytes], Any], body: bytes, what: str) -> Any:
        try:
            if len(body) <= INLINE_DECODE_BYTES:
                return decode(body)
            return await asyncio.to_thread(decode, body)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError) as exc:
            if isinstance(exc, SourceError):
                raise
            raise SourceUnavailableError(
                f"prometheus answered the {what} call with a malformed body: {_one_line(exc)}"
            ) from None

    async def _get(self, path: str, params: Mapping[str, str], limit: int, timeout: float, asked: str) -> bytes:
        session = self._session
        if session is None:
            raise SourceUnavailableError("the prometheus client is not started")
        headers = dict(self._headers()) if self._headers is not None else None
        started = time.perf_counter()
        outcome = "error"
        try:
            async with session.get(
                self._base + path,
                params=params,
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                try:
                    body = await read_bounded(response, limit)
                except UpstreamAnswerError as exc:
                    raise SourceUnavailableError(f"{self._base}{path} answered HTTP {response.status}: {exc}") from None
                status = response.status
            try:
                head = _HEAD.decode(body)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                raise SourceUnavailableError(f"prometheus answered HTTP {status} without a JSON object") from None
            raise_unless_success(head.status, head.errorType, head.error, status, repr(asked))
            outcome = "ok"
            return body
        except TimeoutError:
            outcome = "timeout"
            raise SourceUnavailableError(f"prometheus did not answer within {timeout:g} s") from None
        except aiohttp.ClientError as exc:
            raise SourceUnavailableError(f"cannot reach prometheus at {self._base}: {_one_line(exc)}") from None
        finally:
            if self._observe is not None:
                self._observe(outcome, time.perf_counter() - started)
