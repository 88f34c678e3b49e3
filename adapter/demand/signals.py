"""Every configured demand, by the External metric it is served as: the value a label selector picks in a namespace.

An External metric's value is the sum of the series, over the metric's entries in the namespace, that the selector
picks (a series' labels, with its entry's `labels` added). Every entry that could hold a picked series must have read:
an entry whose `labels` contradict the selector is passed over, any other that failed makes the whole answer
unavailable with its reason, since a sum without it would understate what waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from adapter.demand.config import DemandDefinition
from adapter.demand.reader import DemandReader, DemandReadError
from adapter.selectors import Selector
from toolkit.boundedfetch import BoundedFetcher
from toolkit.credentials import BearerToken, client_ssl_context


class DemandUnavailableError(Exception):
    """No value can be served now; the message says which endpoint failed and why, in one line."""


class DemandNotServedError(LookupError):
    """No entry of the metric reads a gateway for that namespace: there is no demand to speak of there, not 0."""


@dataclass(frozen=True, slots=True)
class DemandValue:
    """The requests waiting that a selector picks, and the Unix time of the oldest read behind the figure."""

    value: Decimal
    sampled_at: float
    series: int  # how many series were summed


def _could_pick(selector: Selector, definition: DemandDefinition) -> bool:
    """Whether some series of the entry could be picked: no requirement on one of its fixed `labels` fails."""
    return all(r.matches(definition.labels) for r in selector.requirements if r.key in definition.labels)


def build_reader(definition: DemandDefinition, clock: Callable[[], float] = time.time) -> DemandReader:
    """The reader of one entry, with its bounds, token and CA; InputFileError (one line) for a file it cannot use."""
    where = f"demand {definition.name} ({definition.url})"
    token = (
        BearerToken(definition.bearer_token_file, f"{where} bearer_token_file")
        if definition.bearer_token_file
        else None
    )
    # verified, unlike an engine's pod IP: a gateway's Service has a name its certificate can hold
    tls = client_ssl_context(definition.ca_file, f"{where} ca_file") or ssl.create_default_context()
    fetcher = BoundedFetcher(timeout=definition.timeout_seconds, max_bytes=definition.max_bytes, tls=tls)
    return DemandReader(definition, fetcher, headers=token.headers if token else None, clock=clock)


class DemandSignals:
    """The readers of every entry, grouped by the External metric they serve."""

    def __init__(self, readers: Iterable[DemandReader]) -> None:
        self.readers = list(readers)
        self._by_name: dict[str, list[DemandReader]] = {}
        for reader in self.readers:
            self._by_name.setdefault(reader.definition.name, []).append(reader)

    @property
    def names(self) -> list[str]:
        return list(self._by_name)

    def serves(self, name: str) -> bool:
        return name in self._by_name

    def serves_in(self, name: str, namespace: str) -> bool:
        """Whether some entry of `name` reads a gateway for `namespace`."""
        return any(r.definition.namespace == namespace for r in self._by_name.get(name, ()))

    async def start(self) -> None:
        for reader in self.readers:
            await reader.start()

    async def close(self) -> None:
        for reader in self.readers:
            with contextlib.suppress(Exception):
                await reader.close()

    async def value(self, namespace: str, name: str, selector: Selector) -> DemandValue:
        """The sum of the series `selector` picks of metric `name` in `namespace` (0 when none waits there);
        DemandNotServedError when no entry of `name` is for `namespace`; DemandUnavailableError when an endpoint that
        could hold such a series failed its read."""
        here = [r for r in self._by_name.get(name, ()) if r.definition.namespace == namespace]
        if not here:
            raise DemandNotServedError(f"the demand {name} is not read for namespace {namespace}")
        readers = [r for r in here if _could_pick(selector, r.definition)]
        if not readers:  # every entry's own labels rule the selected series out: none of them waits
            return DemandValue(Decimal(0), time.time(), 0)
        outcomes = await asyncio.gather(*(r.reading() for r in readers), return_exceptions=True)
        total = Decimal(0)
        counted = 0
        oldest = float("inf")
        for reader, outcome in zip(readers, outcomes, strict=True):
            if isinstance(outcome, DemandReadError):
                raise DemandUnavailableError(
                    f"{name}: reading {reader.definition.url} failed ({outcome.kind}): {outcome.reason}"
                )
            if isinstance(outcome, BaseException):
                raise outcome
            oldest = min(oldest, outcome.read_at)
            for series in outcome.series:
                if selector.matches(series.labels):
                    total += Decimal(repr(series.value))
                    counted += 1
        return DemandValue(total, oldest, counted)


class DemandCollector(Collector):
    """The readers' self-metrics, read at scrape time: reads, failures by kind, whether the last read gave a value,
    the age of the last one that did, and the series it held."""

    def __init__(self, signals: DemandSignals, clock: Callable[[], float] = time.time) -> None:
        self._signals = signals
        self._clock = clock

    def collect(self) -> Iterable[Metric]:
        labels = ["demand", "namespace", "url"]
        reads = CounterMetricFamily(
            "gpu_pulse_adapter_demand_reads", "Reads of demand endpoints (made only while someone asks).", labels=labels
        )
        failures = CounterMetricFamily(
            "gpu_pulse_adapter_demand_read_failures",
            "Demand reads that gave no value, by kind (connect, http_status, redirect, timeout, too_large, encoding, "
            "wrong_type, bad_value, refused, credentials).",
            labels=[*labels, "kind"],
        )
        up = GaugeMetricFamily(
            "gpu_pulse_adapter_demand_up", "1 when the last read of the endpoint gave a value, else 0.", labels=labels
        )
        age = GaugeMetricFamily(
            "gpu_pulse_adapter_demand_age_seconds",
            "Seconds since the last read of the endpoint that gave a value started (absent: none has).",
            labels=labels,
        )
        series = GaugeMetricFamily(
            "gpu_pulse_adapter_demand_series",
            "Series of the demand metric the last good read held after the matchers (0 with the family absent).",
            labels=labels,
        )
        now = self._clock()
        for reader in self._signals.readers:
            d = reader.definition
            values = [d.name, d.namespace, d.url]
            reads.add_metric(values, reader.reads)
            for kind, count in reader.failures.items():
                failures.add_metric([*values, kind], count)
            if reader.reads:
                up.add_metric(values, 0 if reader.last_error is not None else 1)
            good = reader.last_success
            if good is not None:
                age.add_metric(values, max(0.0, now - good.read_at))
                series.add_metric(values, len(good.series))
        yield from (reads, failures, up, age, series)
