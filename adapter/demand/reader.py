"""One gateway's demand, read directly from its metrics endpoint: at a bounded rate, within a deadline and a size cap.

A read happens only when someone asks (the External metrics API, KEDA's activity board) and the last one is older
than the entry's `refresh_seconds`; every asker in between shares that reading, or waits for the one under way. So
however many HPAs and ScaledObjects ask, the gateway is read at most once per `refresh_seconds`, and not at all while
nobody asks. A failed read is shared the same way: no value and its reason, never the reading before it.

The endpoint is not trusted (toolkit/boundedfetch.py bounds the read; toolkit/textparse.py parses only the named
metrics, within bounds). A sample that is NaN, infinite or negative, or a family declared other than a gauge (or
untyped), fails the read with a reason: a count of waiting requests is none of these. An endpoint that serves none of
the names has nothing waiting (client_golang prints a labelled gauge only once it has a child: an EPP whose queue has
never held a request serves no line of it), which `family` says: None.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from adapter.demand.config import DemandDefinition
from toolkit.boundedfetch import FAILURE_KINDS as FETCH_FAILURE_KINDS
from toolkit.boundedfetch import BoundedFetcher, FetchError
from toolkit.inputfiles import InputFileError
from toolkit.textparse import ExpositionRefusedError, parse_wanted

WRONG_TYPE = "wrong_type"  # the family is declared a counter, histogram, summary...
BAD_VALUE = "bad_value"  # NaN, infinite or negative
REFUSED = "refused"  # the exposition broke the parser's bounds
CREDENTIALS = "credentials"  # the bearer token file cannot be read
FAILURE_KINDS = (*FETCH_FAILURE_KINDS, WRONG_TYPE, BAD_VALUE, REFUSED, CREDENTIALS)
_READABLE_TYPES = ("gauge", "untyped", "unknown")  # unknown: OpenMetrics' name for untyped


class DemandReadError(Exception):
    """A read that gave no value: `kind` one of FAILURE_KINDS, `reason` one line."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


@dataclass(frozen=True, slots=True)
class DemandSeries:
    """One series of the metric read: its labels (with the entry's `labels` added) and its value."""

    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class DemandReading:
    """The series of one read that pass the entry's matchers; `family` the name read (None: the endpoint serves none
    of the names, so nothing waits); `read_at` the Unix time the read started."""

    series: tuple[DemandSeries, ...]
    family: str | None
    read_at: float


def demand_in(body: str, definition: DemandDefinition, read_at: float) -> DemandReading:
    """The reading `body` gives for `definition`; DemandReadError when it cannot be one."""
    names = definition.metric_names
    try:
        exposition = parse_wanted(body, {name: name for name in names})
    except ExpositionRefusedError as error:
        raise DemandReadError(REFUSED, str(error)) from None
    for name in names:  # the first name served wins: llm-d serves the old name too, mirroring the new one
        declared = exposition.types.get(name)
        samples = exposition.of(name)
        if declared is None and not samples:
            continue
        if declared is not None and declared.lower() not in _READABLE_TYPES:
            raise DemandReadError(WRONG_TYPE, f"{name} is declared a {declared[:40]}, not a gauge")
        series = []
        for sample in samples:
            labels = dict(sample.labels)
            if any(labels.get(key) != value for key, value in definition.matchers.items()):
                continue
            if math.isnan(sample.value) or math.isinf(sample.value) or sample.value < 0:
                raise DemandReadError(BAD_VALUE, f"{name} reads {sample.value}: not a count of waiting requests")
            series.append(DemandSeries({**labels, **definition.labels}, sample.value))
        return DemandReading(tuple(series), name, read_at)
    return DemandReading((), None, read_at)


class DemandReader:
    """Reads one entry's endpoint on demand, at most once per `refresh_seconds`; use inside one event loop, between
    `start` and `close`."""

    def __init__(
        self,
        definition: DemandDefinition,
        fetcher: BoundedFetcher,
        *,
        headers: Callable[[], Mapping[str, str]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.definition = definition
        self._fetcher = fetcher
        self._headers = headers
        self._clock = clock
        self._last: DemandReading | DemandReadError | None = None
        self._last_started = -math.inf
        self._reading: asyncio.Future[None] | None = None
        self.reads = 0
        self.failures: dict[str, int] = dict.fromkeys(FAILURE_KINDS, 0)
        self.last_success: DemandReading | None = None  # for the age self-metric only, never served

    async def start(self) -> None:
        await self._fetcher.__aenter__()

    async def close(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
        await self._fetcher.__aexit__()

    @property
    def last_error(self) -> DemandReadError | None:
        return self._last if isinstance(self._last, DemandReadError) else None

    async def reading(self) -> DemandReading:
        """The latest reading, read afresh when older than `refresh_seconds`; DemandReadError when that read failed."""
        if self._clock() - self._last_started >= self.definition.refresh_seconds:
            if self._reading is None:
                self._reading = asyncio.ensure_future(self._read())
                self._reading.add_done_callback(self._done)
            await asyncio.shield(self._reading)
        last = self._last
        assert last is not None
        if isinstance(last, DemandReadError):
            raise last
        return last

    def _done(self, _: asyncio.Future[None]) -> None:
        self._reading = None

    async def _read(self) -> None:
        started = self._clock()
        self.reads += 1
        try:
            try:
                headers = self._headers() if self._headers is not None else None
            except InputFileError as error:
                raise DemandReadError(CREDENTIALS, str(error)) from None
            try:
                body = await self._fetcher.get(self.definition.url, headers)
            except FetchError as error:
                raise DemandReadError(error.kind, error.reason) from None
            # off the event loop: a body of a few megabytes takes a few tens of milliseconds to scan
            reading = await asyncio.to_thread(demand_in, body.text, self.definition, started)
        except DemandReadError as error:
            self.failures[error.kind] += 1
            self._last = error
        else:
            self._last = self.last_success = reading
        self._last_started = started
