"""The Prometheus HTTP API as the report uses it: range and instant queries, label values and series, each bounded.

Works the same against Prometheus, Thanos Query and Mimir (the plain `/api/v1` API; a path prefix such as Mimir's
`/prometheus` goes into the URL). Queries and series look-ups are POSTs (long matchers do not fit in a URL); label
values are GETs (the only method Prometheus 2 takes there). Each request waits at most `timeout` seconds (sent to
Prometheus as its own `timeout` too, so it stops working when we stop waiting), reads at most `max_response_bytes`,
and at most `parallel` run at once. An answer of the wrong shape, an error status or a timeout is a PrometheusError
naming the query: the report stops with that one line rather than print figures it could not read.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import msgspec
import numpy as np
import numpy.typing as npt

from toolkit.credentials import BearerToken
from toolkit.responses import UpstreamAnswerError, read_bounded

T = TypeVar("T")

FloatArray = npt.NDArray[np.float64]


class PrometheusError(RuntimeError):
    """A query that could not be answered, as one line."""


class _Matrix(msgspec.Struct, frozen=True):
    metric: dict[str, str]
    values: list[tuple[float, str]]


class _Vector(msgspec.Struct, frozen=True):
    metric: dict[str, str]
    value: tuple[float, str]


class _MatrixData(msgspec.Struct, frozen=True):
    resultType: str  # noqa: N815 (the API's name)
    result: list[_Matrix]


class _VectorData(msgspec.Struct, frozen=True):
    resultType: str  # noqa: N815
    result: list[_Vector]


class _Answer(msgspec.Struct, frozen=True):
    status: str
    data: msgspec.Raw = msgspec.Raw(b"null")
    error: str = ""
    errorType: str = ""  # noqa: N815


@dataclass(frozen=True, slots=True)
class RangeSeries:
    labels: Mapping[str, str]
    times: FloatArray
    values: FloatArray


@dataclass(frozen=True, slots=True)
class InstantSample:
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Connection:
    url: str
    token: BearerToken | None = None
    ssl_context: ssl.SSLContext | None = None
    timeout: float = 60.0
    max_response_bytes: int = 64 * 1024 * 1024
    parallel: int = 2


class PrometheusClient:
    """One HTTP session to one Prometheus-compatible API. Use as an async context manager."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._limit = asyncio.Semaphore(connection.parallel)
        self._session: aiohttp.ClientSession | None = None
        self.requests = 0
        self.bytes_read = 0

    async def __aenter__(self) -> PrometheusClient:
        connector = aiohttp.TCPConnector(limit=self._connection.parallel, ssl=self._connection.ssl_context or True)
        self._session = aiohttp.ClientSession(connector=connector)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def _post(self, path: str, form: dict[str, str], what: str, *, method: str = "POST") -> bytes:
        assert self._session is not None, "use the client as an async context manager"
        connection = self._connection
        headers = connection.token.headers() if connection.token is not None else {}
        url = connection.url.rstrip("/") + path
        timeout = aiohttp.ClientTimeout(total=connection.timeout)
        async with self._limit:
            try:
                async with self._session.request(
                    method,
                    url,
                    data=form if method == "POST" else None,
                    params=form if method == "GET" else None,
                    headers=headers,
                    timeout=timeout,
                    allow_redirects=False,
                ) as response:
                    body = await read_bounded(response, connection.max_response_bytes)
                    status = response.status
            except TimeoutError:
                raise PrometheusError(
                    f"{what}: no answer within {connection.timeout:g} s (--prometheus-timeout)"
                ) from None
            except UpstreamAnswerError as exc:
                raise PrometheusError(f"{what}: {exc} (--prometheus-max-response-bytes)") from None
            except aiohttp.ClientError as exc:
                raise PrometheusError(f"{what}: cannot reach {connection.url}: {exc}") from None
        self.requests += 1
        self.bytes_read += len(body)
        if status == 404:  # an exporter's, the adapter's or a web server's address, or a missing path prefix
            raise PrometheusError(
                f"{what}: {connection.url} has no Prometheus HTTP API (HTTP 404 for {path}): give --prometheus-url "
                "the address of a Prometheus, Thanos Query or Mimir (with its path prefix, such as /prometheus)"
            )
        if status != 200:
            raise PrometheusError(f"{what}: HTTP {status}: {_error_text(body)}")
        return body

    @staticmethod
    def _data(body: bytes, what: str) -> msgspec.Raw:
        try:
            answer = _decode_json(body, type=_Answer)
        except msgspec.DecodeError as exc:
            raise PrometheusError(f"{what}: not a Prometheus API answer: {exc}") from None
        if answer.status != "success":
            raise PrometheusError(f"{what}: {answer.errorType or 'error'}: {answer.error}")
        return answer.data

    async def range_query(self, expr: str, start: float, end: float, step: int) -> list[RangeSeries]:
        what = f"range query {_short(expr)}"
        form = {"query": expr, "start": _time(start), "end": _time(end), "step": str(step)}
        form["timeout"] = f"{self._connection.timeout:g}s"
        body = await self._post("/api/v1/query_range", form, what)
        try:
            data = _decode_json(self._data(body, what), type=_MatrixData)
        except msgspec.DecodeError as exc:
            raise PrometheusError(f"{what}: not a matrix: {exc}") from None
        out = []
        for series in data.result:
            times = np.fromiter((t for t, _ in series.values), dtype=np.float64, count=len(series.values))
            values = np.fromiter((float(v) for _, v in series.values), dtype=np.float64, count=len(series.values))
            out.append(RangeSeries(series.metric, times, values))
        return out

    async def instant_query(self, expr: str, at: float) -> list[InstantSample]:
        what = f"query {_short(expr)}"
        form = {"query": expr, "time": _time(at), "timeout": f"{self._connection.timeout:g}s"}
        body = await self._post("/api/v1/query", form, what)
        try:
            data = _decode_json(self._data(body, what), type=_VectorData)
        except msgspec.DecodeError as exc:
            raise PrometheusError(f"{what}: not a vector: {exc}") from None
        return [InstantSample(s.metric, float(s.value[1])) for s in data.result]

    async def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        what = f"values of label {label} in {_short(match)}"
        form = {"match[]": match, "start": _time(start), "end": _time(end)}
        body = await self._post(f"/api/v1/label/{label}/values", form, what, method="GET")  # GET only in 2.x
        try:
            return _decode_json(self._data(body, what), type=list[str])
        except msgspec.DecodeError as exc:
            raise PrometheusError(f"{what}: not a list of values: {exc}") from None

    async def series(self, match: str, start: float, end: float) -> list[dict[str, str]]:
        what = f"series {_short(match)}"
        form = {"match[]": match, "start": _time(start), "end": _time(end)}
        body = await self._post("/api/v1/series", form, what)
        try:
            return _decode_json(self._data(body, what), type=list[dict[str, str]])
        except msgspec.DecodeError as exc:
            raise PrometheusError(f"{what}: not a list of series: {exc}") from None


def _decode_json(body: bytes | msgspec.Raw, type: type[T]) -> T:  # msgspec's name
    """msgspec's decode, with an answer nested past the interpreter's recursion limit (an array 100,000 deep) refused
    as a DecodeError like any other bad answer: one line, not a RecursionError's traceback."""
    try:
        return msgspec.json.decode(body, type=type)
    except RecursionError:
        raise msgspec.DecodeError("JSON nested too deeply") from None


def _time(t: float) -> str:
    return f"{t:.3f}".rstrip("0").rstrip(".")


def _short(expr: str, limit: int = 100) -> str:
    flat = " ".join(expr.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _error_text(body: bytes) -> str:
    try:
        document: Any = _decode_json(body, object)
    except msgspec.DecodeError:
        return body[:200].decode("utf-8", "replace").strip() or "(empty body)"
    if isinstance(document, dict) and isinstance(document.get("error"), str):
        return str(document["error"])[:300]
    return "(no error text)"
