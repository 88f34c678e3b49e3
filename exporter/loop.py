"""The poll loop: collect, attribute, render, publish, every `interval` seconds in a worker thread.

Each cycle builds one immutable Snapshot, renders it once into everything a request may ask for (the exposition in text
format and OpenMetrics, the `/pods` JSON per namespace), and swaps a single reference to the new `Published`. A request
reads that reference once and only hands out its bytes, so it is O(1), never touches NVML or the kubelet, and every
byte it sends comes from one cycle.

Gzip is not done here: compressing every cycle costs more than the rest of the render and is wasted when scrapes are
rarer than polls (Prometheus scrapes every 15-60 s; we poll every second). `Published.gzipped()` compresses on first
request and keeps the result with that snapshot; the server calls it in a worker thread, never on the event loop.
"""

from __future__ import annotations

import gzip
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from exporter.collection import Attribution, DeviceCollection, DeviceCollector, PodAttributor
from exporter.engines.schedule import PollTicks
from exporter.exposition import ExpositionRenderer
from exporter.pods_answers import SerializedPods
from exporter.snapshot import CollectorStatus, EngineReadStats, PodInference, Snapshot
from toolkit.connections import ConnectionStats
from toolkit.pods_contract import NodePods
from toolkit.process import ProcessFigures

log = logging.getLogger("exporter.loop")

GZIP_LEVEL = 6
PodsView = Callable[[Snapshot], NodePods]
# the newest figures of the pods' serving engines and the reader's stats (exporter.engines.EngineReader.view)
InferenceView = Callable[[], tuple[Mapping[tuple[str, str], PodInference], EngineReadStats]]


@dataclass(frozen=True, slots=True)
class Published:
    """Everything requests are served from, for one snapshot. Only `gzipped()` memoizes, and only what it computes."""

    snapshot: Snapshot
    cycle: int
    collected_at: float  # monotonic time the snapshot's data was collected (readiness measures age from it)
    text: bytes
    openmetrics: bytes
    pods: SerializedPods | None
    _gzip: dict[bool, bytes] = field(default_factory=dict, repr=False, compare=False)

    def body(self, openmetrics: bool) -> bytes:
        return self.openmetrics if openmetrics else self.text

    def gzipped_if_ready(self, openmetrics: bool) -> bytes | None:
        """The compressed body if some request already compressed it."""
        return self._gzip.get(openmetrics)

    def gzipped(self, openmetrics: bool) -> bytes:
        """Compress once (blocking: call it off the event loop); later calls return the same bytes."""
        done = self._gzip.get(openmetrics)
        if done is None:
            done = gzip.compress(self.body(openmetrics), compresslevel=GZIP_LEVEL, mtime=0)
            done = self._gzip.setdefault(openmetrics, done)
        return done


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reason: str


class PollLoop:
    """Runs one DeviceCollector (and optionally a PodAttributor and a `/pods` builder) on a fixed schedule.

    The caller starts and closes the collector and the attributor; the loop only calls `collect()`/`attribute()`.
    Scheduling is drift-free: cycle k starts at start + k * interval; a cycle that overruns skips the ticks it missed
    instead of running late ones back to back. An exception in any stage is logged and counted (self-metrics with the
    stage as `collector`: `poll`, `attribution`, `pods`, and `render`, which reports the previous cycle's rendering)
    and the loop carries on.
    """

    def __init__(
        self,
        collector: DeviceCollector,
        renderer: ExpositionRenderer,
        *,
        interval: float,
        node: str,
        attributor: PodAttributor | None = None,
        pods_view: PodsView | None = None,
        connection_stats: Callable[[], ConnectionStats] | None = None,
        process_figures: Callable[[], ProcessFigures] | None = None,
        inference: InferenceView | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval > 0 or not math.isfinite(interval):
            raise ValueError(f"interval must be a positive number of seconds, got {interval}")
        self.interval = interval
        self.node = node
        self._collector = collector
        self._renderer = renderer
        self._attributor = attributor
        self._pods_view = pods_view
        self._monotonic = monotonic
        self._published: Published | None = None
        self._cycle = 0
        self._errors: dict[str, int] = {}
        self._stage: dict[str, CollectorStatus] = {}  # last outcome of the render and pods stages
        self._last_attribution: Attribution | None = None
        self._last_error: str | None = None
        self._cycle_failed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.overruns = 0  # ticks skipped because a cycle took longer than the interval
        # the HTTP server's connection counts (its guard's `stats`) and the process's own figures
        # (toolkit.process.process_reader), read each cycle into the snapshot with everything else it serves
        self._connection_stats = connection_stats
        self._process_figures = process_figures
        self._inference = (
            inference  # read once per cycle: never waits for an engine (they are read on their own thread)
        )
        self._listeners: list[Callable[[], None]] = []
        self._next_cycle: float | None = None  # the monotonic start of the next cycle, while running

    def on_publish(self, listener: Callable[[], None]) -> None:
        """Call `listener` (in the polling thread, so it must only hand over, e.g. `call_soon_threadsafe`) after each
        snapshot is published: the `/pods` streams wait on it."""
        self._listeners.append(listener)

    # ---- what the server reads -------------------------------------------------------------------------------------
    @property
    def published(self) -> Published | None:
        """The newest published snapshot (one reference read: atomic), or None before the first cycle."""
        return self._published

    @property
    def collector(self) -> DeviceCollector:
        return self._collector

    def readiness(self) -> Readiness:
        """Ready once a snapshot exists and its data is younger than 3 intervals.

        A kubelet that cannot be asked (its socket missing, a List failing) leaves the exporter ready, the reason in
        the body: the GPUs' own series (health, XIDs, temperatures) are still right and wanted, a kubelet restart
        removes the socket for a moment (a readiness that followed it would flap with every restart), and a DaemonSet
        rollout waits on readiness, so a wrong kubelet path on one flavour would stall it fleet-wide. The state is a
        metric (`gpu_pulse_kubelet_up 0`) with its alert (docs/runbooks.md, GPUKubeletMappingUnavailable)."""
        published = self._published
        if published is None:
            reason = "no snapshot yet"
            if self._last_error:
                reason += f"; last poll failed: {self._last_error}"
            return Readiness(False, reason)
        age = self._monotonic() - published.collected_at
        limit = 3 * self.interval
        if age >= limit:
            reason = f"snapshot is {age:.1f} s old (limit: 3 intervals = {limit:g} s)"
            if self._last_error:
                reason += f"; last poll failed: {self._last_error}"
            return Readiness(False, reason)
        nvml = published.snapshot.nvml
        if nvml is not None and not nvml.up:  # serving its own health only: no GPU can be read
            return Readiness(False, f"NVML is not usable: {nvml.reason}")
        reason = f"snapshot {published.cycle} is {age:.2f} s old"
        visibility = published.snapshot.process_visibility
        if visibility is not None and visibility.visible is False:  # serving, but per-pod shares cannot be known
            reason += f"; other pods' GPU processes are not visible: {visibility.reason}"
        snapshot = published.snapshot
        if snapshot.kubelet_up is False:  # serving, but pods are (or will soon be) missing from the series
            mapped = snapshot.kubelet_mapping_age_seconds
            kept = (
                "no pod mapping yet" if mapped is None else f"keeping the last pod mapping ({mapped:.0f} s old) for now"
            )
            reason += (
                f"; kubelet pod-resources unavailable ({snapshot.kubelet_error or 'List failed'}): {kept}; GPUs are "
                "reported without pods once it is too old (gpu_pulse_kubelet_up 0)"
            )
        return Readiness(True, reason)

    # ---- one cycle ---------------------------------------------------------------------------------------------------
    def _status(self, name: str, ok: bool, started: float) -> CollectorStatus:
        if not ok:
            self._errors[name] = self._errors.get(name, 0) + 1
        return CollectorStatus(name, ok, self._monotonic() - started, float(self._errors.get(name, 0)))

    def _failed(self, stage: str, error: BaseException) -> None:
        self._cycle_failed = True
        kind = f"{stage}: {type(error).__name__}"
        if self._last_error is None or not self._last_error.startswith(kind + ":"):
            log.error("poll cycle failed in %s", stage, exc_info=error)
        else:  # the same failure again: once at error level is enough
            log.debug("poll cycle failed again in %s: %s", stage, error)
        self._last_error = f"{kind}: {error}"

    def _attribute(self, collection: DeviceCollection) -> tuple[Attribution | None, CollectorStatus | None]:
        if self._attributor is None:
            return None, None
        started = self._monotonic()
        try:
            attribution = self._attributor.attribute(collection)
        except Exception as error:
            self._failed("attribution", error)
            return self._last_attribution, self._status("attribution", False, started)
        self._last_attribution = attribution
        return attribution, self._status("attribution", True, started)

    def _snapshot(self) -> tuple[Snapshot, float] | None:
        """Collect and attribute; on failure, the previous snapshot's data with this cycle's statuses."""
        started = self._monotonic()
        try:
            collection = self._collector.collect()
        except Exception as error:
            self._failed("collect", error)
            poll = self._status("poll", False, started)
            previous = self._published
            if previous is None:
                return None
            statuses = _merge(previous.snapshot.collectors, (poll, *self._stage.values()))
            return replace(previous.snapshot, collectors=statuses), previous.collected_at
        collected_at = self._monotonic()
        attribution, attribution_status = self._attribute(collection)
        poll = self._status("poll", True, started)
        statuses = collection.statuses
        if attribution is not None:
            statuses += attribution.statuses
        extra = (poll,) if attribution_status is None else (poll, attribution_status)
        inference, engine_reads = self._inference() if self._inference is not None else ({}, None)
        snapshot = Snapshot(
            taken_at=collection.taken_at,
            node=self.node,
            devices=collection.devices,
            pods=attribution.pods if attribution is not None else (),
            collectors=_merge(statuses, (*extra, *self._stage.values())),
            kubelet_up=attribution.kubelet_up if attribution is not None else None,
            kubelet_mapping_age_seconds=attribution.mapping_age_seconds if attribution is not None else None,
            connections=self._connection_stats() if self._connection_stats is not None else None,
            process=self._process_figures() if self._process_figures is not None else None,
            process_visibility=attribution.process_visibility if attribution is not None else None,
            kubelet_error=attribution.kubelet_error if attribution is not None else None,
            nvml=collection.nvml,
            inference=inference,
            engine_reads=engine_reads,
        )
        return snapshot, collected_at

    def _pods_document(self, snapshot: Snapshot) -> SerializedPods | None:
        started = self._monotonic()
        try:
            if self._pods_view is None:
                document = NodePods(
                    node=snapshot.node,
                    generated_at=datetime.fromtimestamp(snapshot.taken_at, UTC),
                    interval_seconds=float(self.interval),  # JSON `1.0`, as a reader reads it
                    kubelet_up=snapshot.kubelet_up,
                    pods=(),
                )
            else:
                document = self._pods_view(snapshot)
            pods = SerializedPods.of(document)
        except Exception as error:
            self._failed("pods", error)
            self._stage["pods"] = self._status("pods", False, started)
            previous = self._published
            return None if previous is None else previous.pods
        if self._pods_view is not None:
            self._stage["pods"] = self._status("pods", True, started)
        return pods

    def poll_once(self) -> Published | None:
        """Run one cycle now, in the calling thread; return what it published (None if there is nothing to publish)."""
        self._cycle_failed = False
        try:
            return self._poll()
        finally:
            if not self._cycle_failed and self._last_error is not None:
                log.info("poll cycle succeeded again after: %s", self._last_error)
                self._last_error = None

    def _poll(self) -> Published | None:
        built = self._snapshot()
        if built is None:
            return None
        snapshot, collected_at = built
        pods = self._pods_document(snapshot)
        pods_status = self._stage.get("pods")
        if pods_status is not None:  # this cycle's /pods outcome (the render's is known only after rendering)
            snapshot = replace(snapshot, collectors=_merge(snapshot.collectors, (pods_status,)))
        started = self._monotonic()
        try:
            rendered = self._renderer.render(snapshot)
        except Exception as error:
            self._failed("render", error)
            self._stage["render"] = self._status("render", False, started)
            return self._published
        self._stage["render"] = self._status("render", True, started)
        self._cycle += 1
        published = Published(snapshot, self._cycle, collected_at, rendered.text, rendered.openmetrics, pods)
        self._published = published
        for listener in self._listeners:
            try:
                listener()
            except Exception as error:  # a listener's defect must not stop polling
                self._failed("publish", error)
        return published

    # ---- the worker thread -------------------------------------------------------------------------------------------
    def ticks(self) -> PollTicks | None:
        """When the next cycle starts (on the monotonic clock) and the interval after it; None while no cycle is
        scheduled. The engine reader phases its reads on it (exporter.engines.schedule)."""
        deadline = self._next_cycle
        return None if deadline is None or not self.running else PollTicks(deadline, self.interval)

    def _run(self) -> None:
        deadline = self._monotonic()
        while not self._stop.is_set():
            self._next_cycle = deadline + self.interval  # while this one runs, the next one is due on the grid
            try:
                self.poll_once()
            except Exception as error:  # a defect in the loop itself: keep polling
                self._failed("loop", error)
            now = self._monotonic()
            deadline, missed = next_tick(deadline, now, self.interval)
            self._next_cycle = deadline
            self.overruns += missed
            self._stop.wait(deadline - now)

    def start(self) -> None:
        """Start polling in a worker thread (the first cycle runs at once)."""
        if self._thread is not None:
            raise RuntimeError("the poll loop is already running")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpu-pulse-poll", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the cycle in progress; wait up to `timeout` seconds for it."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("poll loop still busy after %.1f s; leaving it (daemon thread)", timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


def next_tick(deadline: float, now: float, interval: float) -> tuple[float, int]:
    """The start of the next cycle after the one that started at `deadline`, and how many ticks were skipped.

    Ticks stay on the grid deadline + k * interval (no drift from cycle durations); a cycle that ran past one or more
    ticks skips them, so the next cycle starts on the first tick after `now` rather than immediately.
    """
    following = deadline + interval
    if now < following:
        return following, 0
    missed = math.floor((now - following) / interval) + 1
    tick = following + missed * interval
    if tick <= now:  # floating-point rounding right on a tick
        tick += interval
        missed += 1
    return tick, missed


def _merge(first: tuple[CollectorStatus, ...], then: tuple[CollectorStatus, ...]) -> tuple[CollectorStatus, ...]:
    """Statuses by collector name, later ones replacing earlier ones of the same name."""
    by_name = {s.name: s for s in first}
    for status in then:
        by_name[status.name] = status
    return tuple(by_name.values())
