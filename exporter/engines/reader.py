"""Reading the engines of this node's GPU pods every `interval` seconds, on a thread of its own, off the GPU path.

Each cycle takes the GPU pods the exporter knows (their pod objects, from the pod watch), locates each one's endpoint
(exporter.engines.endpoint), reads them concurrently (at most `concurrency` at once, each within `timeout` and the
size cap: toolkit.boundedfetch), parses only the families an engine mapping reads, and publishes one immutable
`EngineReadings` by swapping a reference: the poll loop picks up the newest when it builds a snapshot and never
waits for an engine. A pod's state follows toolkit.pods_contract.EngineState:

- warming: the pod is not Ready, has no IP yet, or its engine has not answered yet (left out of combined figures);
- ready: the engine answered and its families were read (a missing figure is None, with the reason);
- unreachable: it answered before and does not now (no connection, an HTTP error);
- unrecognised: it answers with no family of a known engine (a renamed metric, an unknown engine);
- refused: the answer broke a bound (time, size, series, a redirect) or the annotations name something other than a
  port and path on the pod's own IP.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType

from exporter.engines.endpoint import Endpoint, Refusal, locate, serves_engine
from exporter.engines.mappings import MARK_PREFIXES, WANTED
from exporter.engines.normalise import DEFAULT_WINDOW_SECONDS, EngineFigures, bounded_reason
from exporter.engines.schedule import PollTicks, lead, next_start
from exporter.snapshot import EngineReadStats, PodInference
from toolkit.boundedfetch import (
    CONNECT,
    DEFAULT_MAX_BYTES,
    HTTP_STATUS,
    Body,
    BoundedFetcher,
    FetchError,
)
from toolkit.pods import Pod
from toolkit.pods_contract import EngineState, InferenceFigures
from toolkit.textparse import ExpositionRefusedError, parse_wanted

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 1.0
DEFAULT_CONCURRENCY = 16
# figures of a cycle this many intervals old (and at least this many seconds) are not served as current
STALE_INTERVALS = 3
STALE_MIN_SECONDS = 5.0
RECENT_CYCLES = 8  # the cycles whose durations set how far ahead of a poll cycle a read starts
# failure kinds beyond the fetcher's (toolkit.boundedfetch.FAILURE_KINDS)
ANNOTATION = "annotation"  # the annotations name no port and path on the pod's IP
SERIES = "series"  # more lines or samples than the parser reads
UNRECOGNISED = "unrecognised"  # no family of a known engine

PodKey = tuple[str, str]


def read_timeout(interval: float) -> float:
    """Each read's deadline: most of an interval, at most 2 s (a slow engine must not hold a cycle long)."""
    return max(0.1, min(2.0, 0.8 * interval))


@dataclass(frozen=True, slots=True)
class EngineReadings:
    """One cycle's outcome: each GPU pod's engine figures (pods with no endpoint are absent) and the reader's stats."""

    pods: Mapping[PodKey, PodInference] = field(default_factory=dict)
    stats: EngineReadStats = field(default_factory=EngineReadStats)
    taken_at: float = 0.0


@dataclass(slots=True)
class _PodEngine:
    uid: str
    figures: EngineFigures
    answered: bool = False  # it answered once: a failure now is "unreachable", not "warming"
    path: str | None = None  # of a well-known port's paths, the one that answered


class EngineReader:
    """Reads the engines of `targets()` (the GPU pods, as pod objects) every `interval` seconds.

    `start()` runs it on its own thread with its own event loop; `cycle()` runs one cycle in the caller's loop (tests,
    benchmarks). `readings` is the newest published outcome (one reference read).
    """

    def __init__(
        self,
        targets: Callable[[], Iterable[Pod]],
        *,
        interval: float = DEFAULT_INTERVAL,
        window: float = DEFAULT_WINDOW_SECONDS,
        timeout: float | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.time,
        ticks: Callable[[], PollTicks | None] | None = None,
    ) -> None:
        """`ticks`, when given, says when the poll loop's next cycle starts (exporter.loop.PollLoop.ticks): each read
        then ends just before a cycle takes it (exporter.engines.schedule)."""
        if not interval > 0 or not math.isfinite(interval):
            raise ValueError(f"the engine interval must be a positive number of seconds, got {interval}")
        self.interval = interval
        self.window = window
        self.timeout = timeout if timeout is not None else read_timeout(interval)
        self.max_bytes = max_bytes
        self._targets = targets
        self._clock = clock
        self._ticks = ticks
        self.concurrency = concurrency
        self._engines: dict[PodKey, _PodEngine] = {}
        self._failures: dict[str, int] = {}
        self._reads = 0
        self._bytes = 0
        self._seconds = 0.0
        self._readings = EngineReadings()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def readings(self) -> EngineReadings:
        return self._readings

    def view(self) -> tuple[Mapping[PodKey, PodInference], EngineReadStats]:
        """The newest figures and stats, as the poll loop takes them (exporter.loop.InferenceView). Figures of a cycle
        older than STALE_INTERVALS intervals (a reader that stopped or hangs) are served as `unreachable` with the
        reason, never as current."""
        readings = self._readings
        if not readings.pods:
            return readings.pods, readings.stats
        behind = self._clock() - readings.taken_at
        limit = max(STALE_INTERVALS * self.interval, STALE_MIN_SECONDS)
        if behind <= limit:
            return readings.pods, readings.stats
        reason = f"the engine reader's last cycle is {behind:.0f} s old"
        stale = {
            key: self._state(readings.taken_at, "unreachable", reason) if p.figures.state == "ready" else p
            for key, p in readings.pods.items()
        }
        return MappingProxyType(stale), readings.stats

    # ---- one cycle -------------------------------------------------------------------------------------------------
    async def cycle(self, fetcher: BoundedFetcher) -> EngineReadings:
        started = time.perf_counter()
        pods = {pod.key: pod for pod in self._targets()}
        engines: dict[PodKey, _PodEngine] = {}
        results: dict[PodKey, PodInference] = {}
        reads: list[tuple[PodKey, Endpoint, _PodEngine]] = []
        now = self._clock()
        for key, pod in sorted(pods.items()):
            endpoint = locate(pod)
            if endpoint is None and not serves_engine(pod):
                continue  # not a serving pod, as far as its object says: nothing to read
            engine = self._engines.get(key)
            if engine is None or engine.uid != pod.uid:
                engine = _PodEngine(pod.uid, EngineFigures(interval=self.interval, window=self.window))
            engines[key] = engine
            if isinstance(endpoint, Refusal):
                self._count(ANNOTATION)
                results[key] = self._state(now, "refused", endpoint.reason)
            elif pod.ready is False:
                engine.answered = False
                results[key] = self._state(now, "warming", "the pod is not Ready")
            elif endpoint is None:
                results[key] = self._state(now, "warming", "the pod has no IP yet")
            else:
                reads.append((key, endpoint, engine))
        self._engines = engines
        limit = asyncio.Semaphore(self.concurrency)
        outcomes = await asyncio.gather(*(self._read(fetcher, limit, e, engine) for _, e, engine in reads))
        for (key, _, _), outcome in zip(reads, outcomes, strict=True):
            results[key] = outcome
        stats = EngineReadStats(
            reads_total=self._reads,
            failures_total=MappingProxyType(dict(self._failures)),
            bytes_total=self._bytes,
            seconds_total=round(self._seconds, 6),
            endpoints=len(reads),
            cycle_seconds=round(time.perf_counter() - started, 6),
        )
        self._readings = EngineReadings(MappingProxyType(results), stats, now)
        return self._readings

    def _state(self, now: float, state: EngineState, reason: str | None) -> PodInference:
        return PodInference(
            InferenceFigures(
                state=state,
                reason=bounded_reason([reason or ""]),
                sampled_at=datetime.fromtimestamp(now, UTC),
                window_seconds=self.interval,
            )
        )

    def _count(self, kind: str) -> None:
        self._failures[kind] = self._failures.get(kind, 0) + 1

    async def _read(
        self, fetcher: BoundedFetcher, limit: asyncio.Semaphore, endpoint: Endpoint, engine: _PodEngine
    ) -> PodInference:
        async with limit:
            paths = (engine.path,) if engine.path is not None else endpoint.paths
            body: Body | None = None
            failure: FetchError | None = None
            for path in paths:
                self._reads += 1
                try:
                    body = await fetcher.get(endpoint.url(path))
                except FetchError as error:
                    failure = error
                    if error.kind == HTTP_STATUS and path != paths[-1]:
                        continue  # a well-known port's other path
                    break
                engine.path = path if len(endpoint.paths) > 1 else None
                break
        now = self._clock()
        if body is None:
            assert failure is not None
            self._count(failure.kind)
            if failure.kind in (CONNECT, HTTP_STATUS):
                if engine.answered:
                    return self._state(now, "unreachable", f"{endpoint.source}: {failure.reason}")
                return self._state(now, "warming", f"the engine does not answer yet: {failure.reason}")
            return self._state(now, "refused", f"{endpoint.source}: {failure.reason}")
        self._bytes += body.wire_bytes
        self._seconds += body.seconds
        try:
            exposition = parse_wanted(body.text, WANTED, MARK_PREFIXES)
        except ExpositionRefusedError as error:
            self._count(SERIES)
            return self._state(now, "refused", str(error))
        engine.answered = True
        inference = engine.figures.read(now, exposition)
        if inference.figures.state == "unrecognised":
            self._count(UNRECOGNISED)
        return inference

    # ---- the thread ------------------------------------------------------------------------------------------------
    async def _run(self) -> None:
        async with BoundedFetcher(timeout=self.timeout, max_bytes=self.max_bytes) as fetcher:
            loop = asyncio.get_running_loop()  # its clock is time.monotonic, the poll loop's
            started = loop.time()
            durations: deque[float] = deque(maxlen=RECENT_CYCLES)
            while not self._stop.is_set():
                try:
                    await self.cycle(fetcher)
                except Exception:  # a defect must not stop the reading: logged, and the next cycle runs
                    log.exception("reading the engines failed")
                now = loop.time()
                durations.append(now - started)
                ticks = self._ticks() if self._ticks is not None else None
                started = next_start(started, self.interval, now, ticks, lead(durations, self.timeout))
                await asyncio.sleep(started - now)

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the engine reader is already running")
        self._stop.clear()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="gpu-pulse-engines", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
