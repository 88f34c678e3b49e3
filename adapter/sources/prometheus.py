"""The `prometheus` source: instant PromQL queries over the Prometheus HTTP API (`/api/v1/query`).

Works unchanged against anything that speaks that API (Prometheus, Thanos Query, Mimir, VictoriaMetrics). Each metric's
query (metrics_config) selects by namespace only; the result is joined with the selected pods here, so the query never
grows with the number of pods. A second query gives each pod's sample time (`timestamp()` of the raw series): served
timestamps are when the figures were sampled, never "now", and figures older than `max_age` are left out. The window
served is the one the query averages over (`prometheus.window_seconds`: 60 for `avg_over_time(...[1m])`), so both
sources agree after a load step.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from types import MappingProxyType
from typing import Any

import aiohttp

from adapter.metrics_config import MetricDefinition
from adapter.quantity import QuantityError, decimal_from_float
from adapter.sources.model import DeviceValue, PodKey, PodSample, ServedValue, SourceError, SourceUnavailableError
from adapter.sources.values import pod_value
from toolkit.pods import Pod

QueryObserver = Callable[[str, float], None]  # (outcome "ok" | "error" | "timeout", seconds)
DEFAULT_MAX_AGE = 60.0
# Past this many namespaces one query selects every namespace and the adapter filters: a matcher stays short.
_MAX_NAMESPACES_IN_MATCHER = 20
_HIDDEN_LABELS = frozenset({"__name__", "namespace", "pod"})


def promql_string(text: str) -> str:
    """A PromQL double-quoted string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _regex_escape(text: str) -> str:
    return "".join(f"\\{c}" if c in r".^$*+?()[]{}|\/" else c for c in text)


def namespace_matcher(namespaces: Sequence[str]) -> str:
    """The label matcher selecting `namespaces`: `namespace="a"`, `namespace=~"a|b"`, or every namespace."""
    unique = sorted(set(namespaces))
    if len(unique) == 1:
        return f"namespace={promql_string(unique[0])}"
    if len(unique) > _MAX_NAMESPACES_IN_MATCHER:
        return 'namespace!=""'
    return f"namespace=~{promql_string('|'.join(_regex_escape(n) for n in unique))}"


def _number(text: object) -> Decimal | None:
    """A sample value of the HTTP API (a string such as "80.00000000000001", "NaN", "+Inf") as the decimal it means."""
    try:
        return decimal_from_float(float(str(text)))
    except (ValueError, QuantityError):
        return None


class PrometheusSource:
    name = "prometheus"

    def __init__(
        self,
        url: str,
        *,
        headers: Callable[[], Mapping[str, str]] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 2.0,
        max_age: float | None = None,
        clock: Callable[[], float] = time.time,
        observe: QueryObserver | None = None,
    ) -> None:
        self._endpoint = url.rstrip("/") + "/api/v1/query"
        self._headers = headers
        self._ssl = ssl_context
        self._timeout = timeout
        self._max_age = DEFAULT_MAX_AGE if max_age is None else max_age
        self._clock = clock
        self._observe = observe
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=32, ssl=self._ssl or True)
        self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=self._timeout))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def serves(self, metric: MetricDefinition) -> bool:
        return metric.prometheus is not None

    async def samples(self, metric: MetricDefinition, pods: Sequence[Pod]) -> Mapping[PodKey, PodSample]:
        if metric.prometheus is None:
            raise SourceError(f"metric {metric.name} has no prometheus query configured")
        wanted = {(pod.namespace, pod.name) for pod in pods}
        if not wanted:
            return {}
        query, time_query = metric.prometheus.render(namespace_matcher([ns for ns, _ in wanted]))
        value_series, time_series = await asyncio.gather(self.query(query), self.query(time_query))
        sampled_at: dict[PodKey, float] = {}
        for series in time_series:
            labels = series.get("metric") or {}
            key = (labels.get("namespace", ""), labels.get("pod", ""))
            when = _number((series.get("value") or [None, None])[1])
            if key in wanted and when is not None:
                sampled_at[key] = max(sampled_at.get(key, -math.inf), float(when))
        devices: dict[PodKey, list[DeviceValue]] = defaultdict(list)
        for series in value_series:
            labels = series.get("metric") or {}
            key = (labels.get("namespace", ""), labels.get("pod", ""))
            value = _number((series.get("value") or [None, None])[1])
            if key in wanted and value is not None:
                shown = {k: str(v) for k, v in labels.items() if k not in _HIDDEN_LABELS}
                devices[key].append(DeviceValue(value, MappingProxyType(shown)))
        now = self._clock()
        window = None if metric.prometheus.window_seconds is None else float(metric.prometheus.window_seconds)
        found: dict[PodKey, PodSample] = {}
        for key, values in devices.items():
            when_sampled = sampled_at.get(key)
            if when_sampled is None or now - when_sampled > self._max_age:
                continue  # no sample time (cannot vouch for freshness) or too old
            found[key] = PodSample(key[0], key[1], tuple(values), when_sampled, window_seconds=window)
        return found

    async def pod_values(self, metric: MetricDefinition, pods: Sequence[Pod]) -> list[ServedValue | None]:
        samples = await self.samples(metric, pods)
        return [
            pod_value(metric, sample) if (sample := samples.get((pod.namespace, pod.name))) is not None else None
            for pod in pods
        ]

    async def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query; its vector result. SourceUnavailableError when Prometheus cannot be reached or is failing,
        SourceError when it rejects the query."""
        session = self._session
        if session is None:
            raise SourceUnavailableError("the prometheus source is not started")
        headers = dict(self._headers()) if self._headers is not None else None
        started = time.perf_counter()
        outcome = "error"
        try:
            async with session.get(self._endpoint, params={"query": promql}, headers=headers) as response:
                try:
                    body = await response.json(content_type=None)
                except ValueError:
                    body = None
                status = response.status
            if not isinstance(body, dict):
                raise SourceUnavailableError(f"{self._endpoint} answered HTTP {status} without a JSON body")
            if body.get("status") != "success":
                problem = f"{body.get('errorType', 'error')}: {body.get('error', 'no error message')}"
                if status in (400, 422):
                    raise SourceError(f"prometheus rejected the query {promql!r}: {problem}")
                raise SourceUnavailableError(f"prometheus answered HTTP {status}: {problem}")
            data = body.get("data") or {}
            if data.get("resultType") != "vector":
                raise SourceError(f"the query {promql!r} returns a {data.get('resultType')}, not an instant vector")
            outcome = "ok"
            result = data.get("result") or []
            return [series for series in result if isinstance(series, dict)]
        except TimeoutError:
            outcome = "timeout"
            raise SourceUnavailableError(f"prometheus did not answer within {self._timeout:g} s") from None
        except aiohttp.ClientError as exc:
            raise SourceUnavailableError(f"cannot reach prometheus at {self._endpoint}: {exc}") from None
        finally:
            if self._observe is not None:
                self._observe(outcome, time.perf_counter() - started)
