"""The `prometheus` source: instant PromQL queries over the Prometheus HTTP API (`/api/v1/query`).

Works unchanged against anything that speaks that API (Prometheus, Thanos Query, Mimir, VictoriaMetrics). Each metric's
query (metrics_config) selects by namespace only; the result is joined with the selected pods here, so the query never
grows with the number of pods. A second query gives each pod's sample time (`timestamp()` of the raw series): served
timestamps are when the figures were sampled, never "now", and figures older than `max_age` are left out. The window
served is the one the query averages over (`prometheus.window_seconds`: 60 for `avg_over_time(...[1m])`), so both
sources agree after a load step.

Prometheus' answer is not trusted: redirects are not followed, the body is read up to `max_response_bytes` (see
responses), decoded in bounded steps, large ones two at a time and off the event loop (promanswers), an answer of the
wrong shape is "source unavailable" (503), and each number is checked before it is used: values finite and within
their figure's unit (figures.FIGURE_BOUNDS), sample times finite and not in the future by more than
`FUTURE_TOLERANCE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from decimal import Decimal
from types import MappingProxyType

import aiohttp

from adapter.metrics_config import MetricDefinition
from adapter.quantity import QuantityError, decimal_from_float
from adapter.sources.aggregation import combined_value
from adapter.sources.device_figures import within_bounds
from adapter.sources.metricsource import (
    DeviceValue,
    PodKey,
    PodSample,
    ServedValue,
    SourceError,
    SourceUnavailableError,
)
from adapter.sources.promanswers import SERIES_PER_BYTE, LargeAnswers, PodSeries
from toolkit.pods import Pod
from toolkit.responses import UpstreamAnswerError, read_bounded

QueryObserver = Callable[[str, float], None]  # (outcome "ok" | "error" | "timeout", seconds)
DEFAULT_MAX_AGE = 60.0
# An instant query's answer for a namespace is about 250 bytes per pod and device: 16 MiB is some 60,000 series. At most
# MAX_PARALLEL_QUERIES answers are read at once, and of them at most two past 1 MiB (promanswers.LargeAnswers): bodies
# take at most 14 x 1 MiB + 2 x 16 MiB.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
MAX_PARALLEL_QUERIES = 16
# How far after the adapter's "now" a sample may be stamped (clocks of Prometheus and adapter differ a little).
FUTURE_TOLERANCE_SECONDS = 5.0
# Past this many namespaces one query selects every namespace and the adapter filters: a matcher stays short.
_MAX_NAMESPACES_IN_MATCHER = 20
_HIDDEN_LABELS = ("__name__", "namespace", "pod")


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


def _number(text: str) -> Decimal | None:
    """A sample value of the HTTP API (a string such as "80.00000000000001", "NaN", "+Inf") as the decimal it means;
    None when not finite."""
    try:
        return decimal_from_float(float(text))
    except (ValueError, OverflowError, QuantityError):
        return None


def _window_seconds(metric: MetricDefinition) -> float | None:
    """What the metric's query averages over (`prometheus.window_seconds`); None when it does not say."""
    assert metric.prometheus is not None
    seconds = metric.prometheus.window_seconds
    return None if seconds is None else float(seconds)


def _seconds(text: str) -> float | None:
    """A sample time the HTTP API writes as a value ("1700000000.123"): the float it is; None when not finite."""
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) else None


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
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        max_parallel: int = MAX_PARALLEL_QUERIES,
    ) -> None:
        self._endpoint = url.rstrip("/") + "/api/v1/query"
        self._max_bytes = max_response_bytes
        self._max_series = max(1000, int(max_response_bytes * SERIES_PER_BYTE))
        self._large = LargeAnswers()
        self._max_parallel = max_parallel
        self._headers = headers
        self._ssl = ssl_context
        self._timeout = timeout
        self._max_age = DEFAULT_MAX_AGE if max_age is None else max_age
        self._clock = clock
        self._observe = observe
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=self._max_parallel, ssl=self._ssl or True)
        self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=self._timeout))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def ready(self) -> bool:
        return True  # nothing to warm: each question is a query

    def serves(self, metric: MetricDefinition) -> bool:
        return metric.prometheus is not None

    async def samples(self, metric: MetricDefinition, pods: Sequence[Pod]) -> Mapping[PodKey, PodSample]:
        value_series, sampled_at = await self._answers(metric, pods, labels=True)
        devices: dict[PodKey, list[DeviceValue]] = defaultdict(list)
        for series in value_series:
            value = _number(series.value)
            if series.pod in sampled_at and value is not None and within_bounds(metric.figure, value):
                shown = dict(series.labels or {})
                for hidden in _HIDDEN_LABELS:
                    shown.pop(hidden, None)
                devices[series.pod].append(DeviceValue(value, MappingProxyType(shown)))
        window = _window_seconds(metric)
        return {
            key: PodSample(key[0], key[1], tuple(values), sampled_at[key], window_seconds=window)
            for key, values in devices.items()
        }

    async def pod_values(self, metric: MetricDefinition, pods: Sequence[Pod]) -> list[ServedValue | None]:
        """Each pod's value over all its devices (the HPA's question, every 15 s for up to thousands of pods): the
        devices' labels, which only a metricLabelSelector reads, are not decoded, and no sample is built."""
        value_series, sampled_at = await self._answers(metric, pods, labels=False)
        figures: dict[PodKey, list[Decimal]] = {}
        for series in value_series:
            value = _number(series.value)
            if series.pod in sampled_at and value is not None and within_bounds(metric.figure, value):
                figures.setdefault(series.pod, []).append(value)
        window = _window_seconds(metric)
        return [
            combined_value(metric, values, sampled_at[key], window)
            if (values := figures.get(key := (pod.namespace, pod.name))) is not None
            else None
            for pod in pods
        ]

    async def _answers(
        self, metric: MetricDefinition, pods: Sequence[Pod], *, labels: bool
    ) -> tuple[list[PodSeries], dict[PodKey, float]]:
        """The value query's series of `pods` (their labels decoded when `labels`), and the sample time of each pod
        whose figures may be served: a pod without one (its freshness cannot be vouched for), with figures older than
        `max_age` or stamped in the future is left out of it."""
        if metric.prometheus is None:
            raise SourceError(f"metric {metric.name} has no prometheus query configured")
        wanted = {(pod.namespace, pod.name) for pod in pods}
        if not wanted:
            return [], {}
        query, time_query = metric.prometheus_queries(namespace_matcher([ns for ns, _ in wanted]))
        value_series, time_series = await asyncio.gather(
            self.query(query, wanted, labels=labels), self.query(time_query, wanted, labels=False)
        )
        newest: dict[PodKey, float] = {}
        for series in time_series:
            when = _seconds(series.value)
            if when is not None:
                newest[series.pod] = max(newest.get(series.pod, -math.inf), when)
        now = self._clock()
        oldest, latest = now - self._max_age, now + FUTURE_TOLERANCE_SECONDS
        return value_series, {key: when for key, when in newest.items() if oldest <= when <= latest}

    async def query(self, promql: str, wanted: Collection[PodKey], *, labels: bool = True) -> list[PodSeries]:
        """An instant query; the series of its vector result that belong to the pods in `wanted` (see promanswers).
        SourceUnavailableError when Prometheus cannot be reached or is failing, SourceError when it rejects the
        query."""
        session = self._session
        if session is None:
            raise SourceUnavailableError("the prometheus source is not started")
        headers = dict(self._headers()) if self._headers is not None else None
        started = time.perf_counter()
        outcome = "error"
        try:
            async with (
                session.get(
                    self._endpoint, params={"query": promql}, headers=headers, allow_redirects=False
                ) as response,
                self._large.admission() as admission,
            ):
                status = response.status
                try:
                    body = await read_bounded(response, self._max_bytes, admission.grown)
                except UpstreamAnswerError as exc:
                    raise SourceUnavailableError(f"{self._endpoint} answered HTTP {status}: {exc}") from None
                series = await admission.decode(
                    body, status, promql, wanted, max_series=self._max_series, labels=labels
                )
            outcome = "ok"
            return series
        except TimeoutError:
            outcome = "timeout"
            raise SourceUnavailableError(f"prometheus did not answer within {self._timeout:g} s") from None
        except aiohttp.ClientError as exc:
            raise SourceUnavailableError(f"cannot reach prometheus at {self._endpoint}: {exc}") from None
        finally:
            if self._observe is not None:
                self._observe(outcome, time.perf_counter() - started)
