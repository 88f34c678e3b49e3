"""NvmlCollector: the DeviceCollector that reads GPUs through pynvml (real libnvidia-ml, or the simulator under it).

It finds the GPUs (and finds them again when NVML's count moves), keeps one `GpuSupervisor` per GPU (reads, hung
calls, losses), listens for XIDs, and gathers each cycle's outcomes into one `DeviceCollection`. What each device
reads is its reader plan (`reader_plan.py`), decided when it is opened.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from exporter.collection import DeviceCollection, HistoryPoint
from exporter.nvml.availability import UP, DriverFiles, NvmlAvailability
from exporter.nvml.collector_settings import CollectorSettings
from exporter.nvml.coverage import XID_KEYS, enabled_measurements
from exporter.nvml.device import NO_VECTORS
from exporter.nvml.discovery import SystemVersions, gpu_count, system_versions
from exporter.nvml.errors import GPU_IS_LOST, ErrorNames, status_code
from exporter.nvml.history import SampleHistory
from exporter.nvml.kernel_log import KernelLogReader, kernel_address
from exporter.nvml.pidspace import PidNamespace, own_pid_namespace
from exporter.nvml.readers import DeviceReaders
from exporter.nvml.status import CycleStatus
from exporter.nvml.supervisor import GpuReading, GpuSupervisor, Outcome, Verdict
from exporter.nvml.xid import XidLedger, XidListener
from exporter.snapshot import EMPTY, DeviceReading, NvmlState
from toolkit.backoff import Draw, RetrySchedule
from toolkit.logs import fields

log = logging.getLogger("exporter.nvml")


def _default_nvml() -> Any:
    import pynvml

    return pynvml


class NvmlCollector:
    """Reads every GPU and MIG instance once per `collect()`; XID events on their own thread.

    `nvml` is the pynvml module (or an object with its API); `settings` say what to read and how often. `clock` is
    monotonic seconds (backoff, GPM spacing, durations), `wall_clock` is epoch seconds (sample times, history
    windows); a lost GPU's backoff is jittered by `draw`. `pid_namespace` is where the exporter runs (default: read
    from /proc/self/ns/pid); it decides whether per-process samples can be matched to the listed processes (see
    pidspace.py). Without a usable NVML (no driver yet, a driver/library version mismatch) it keeps returning empty
    collections that say why, and tries nvmlInit again with backoff (`availability.py`); `driver_files` are where
    the node says its driver versions, for that message.
    """

    def __init__(
        self,
        nvml: Any = None,
        settings: CollectorSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        draw: Draw = random.random,
        pid_namespace: PidNamespace | None = None,
        driver_files: DriverFiles | None = None,
    ) -> None:
        self._settings = settings = settings if settings is not None else CollectorSettings()
        self._nvml = nvml if nvml is not None else _default_nvml()
        self._enabled = enabled_measurements(settings.enabled)
        self._pid_namespace = pid_namespace if pid_namespace is not None else own_pid_namespace()
        self._processes_hidden: str | None = None
        self._clock = clock
        self._wall = wall_clock
        self._draw = draw
        self._names = ErrorNames(self._nvml)
        self._availability = NvmlAvailability(
            self._names, backoff=settings.driver_backoff, draw=draw, files=driver_files
        )
        self._readers = DeviceReaders(
            self._nvml,
            self._names,
            clock,
            enabled=self._enabled,
            labels=settings.labels,
            unserved=settings.unserved,
            processes=settings.processes,
            process_hold_seconds=settings.process_hold_seconds,
            pcie_every=settings.pcie_every,
            constant_every=settings.constant_every,
        )
        self._history = SampleHistory.for_span(settings.history_seconds, settings.interval_seconds)
        self._status = CycleStatus()
        self._ledger = XidLedger()
        self._xid: XidListener | None = None
        self._xid_failures_seen = 0
        self._kernel_log: KernelLogReader | None = None
        self._addresses: dict[str, str] = {}  # kernel_address -> GPU uuid, for the kernel log's Xid lines
        self._gpus: list[GpuSupervisor] = []
        self._versions = SystemVersions("", "")
        self._defects_logged: set[int] = set()
        self._recovered = False  # a lost GPU answered again this cycle: listen for its XIDs again
        self._lock = threading.Lock()
        self._started = False
        self._enumerated_at = -math.inf  # when NVML's GPU count was last compared with ours

    @property
    def enabled(self) -> frozenset[str]:
        return self._enabled

    @property
    def kernel_log_open(self) -> bool:
        """Whether the kernel log is being read (opened at its end: records from then on are heard)."""
        reader = self._kernel_log
        return reader is not None and reader.opened

    @property
    def nvml_state(self) -> NvmlState:
        """Whether NVML is usable now, and if not, why."""
        return self._availability.state

    # ---- lifecycle ------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Initialize NVML and find the GPUs; without a usable NVML, say why and let `collect()` try again."""
        with self._lock:
            self._connect(self._clock())
            path = self._settings.kernel_log
            if path and self._enabled & XID_KEYS and self._kernel_log is None:
                self._kernel_log = KernelLogReader(path, self._ledger, lambda: self._addresses, self._clock)
                self._kernel_log.start()

    def _connect(self, now: float) -> bool:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self._availability.failed(status_code(exc), str(exc), now)
            return False
        self._started = True
        try:
            self._discover()
        except nvml.NVMLError as exc:
            self._shutdown()
            self._availability.failed(status_code(exc), f"NVML cannot list the GPUs: {exc}", now)
            return False
        self._availability.succeeded()
        return True

    def rediscover(self) -> None:
        with self._lock:
            if not self._started:
                return
            try:
                self._discover()
            except self._nvml.NVMLError as exc:
                log.error("rediscovering GPUs failed (%s); keeping the devices found before", exc)
                self._restart_xid()

    def close(self) -> None:
        with self._lock:
            self._stop_xid()
            if self._kernel_log is not None:
                self._kernel_log.stop()
                self._kernel_log = None
            for gpu in self._gpus:
                gpu.close()
            self._gpus = []
            self._shutdown()

    def _shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)

    # ---- discovery ------------------------------------------------------------------------------------------------
    def _discover(self) -> None:
        nvml = self._nvml
        self._versions = system_versions(nvml)
        samples_match = self._pid_namespace.samples_match_lists(self._versions.driver)
        self._readers.samples_match = samples_match
        self._processes_hidden = None
        if self._settings.processes and not samples_match:
            self._processes_hidden = (
                f"the exporter runs in {self._pid_namespace.describe()}, and driver "
                f"{self._versions.driver or '(version unknown)'} lists only the processes of that namespace, while "
                "utilization samples carry host PIDs; set hostPID: true"
            )
            log.warning(
                "%s: pods sharing a GPU stay unattributed",
                self._processes_hidden,
                extra=fields(reason="pid_namespace"),
            )
        count = gpu_count(nvml)  # raises: the caller decides
        self._stop_xid()
        for gpu in self._gpus:
            gpu.close()
        now = self._clock()
        self._gpus = []
        for index in range(count):
            supervisor = GpuSupervisor(
                index,
                RetrySchedule(self._settings.lost_backoff, self._draw),
                self._readers,
                self._versions,
                self._names,
                layout_check_seconds=self._settings.layout_check_seconds,
                on_lost=self._lost,
                on_recovered=self._answers_again,
            )
            supervisor.open(now)
            self._gpus.append(supervisor)
        self._restart_xid()
        self._enumerated_at = now
        self._addresses = {
            kernel_address(gpu.identity.pci_bus_id): gpu.identity.uuid
            for gpu in self._gpus
            if gpu.identity is not None and gpu.identity.pci_bus_id
        }
        uuids = [gpu.identity.uuid for gpu in self._gpus if gpu.identity is not None]
        uuids += [mig.identity.uuid for gpu in self._gpus for mig in gpu.migs]
        self._history.retain(uuids)
        log.info(
            "found %d GPU(s), %d MIG instance(s); driver %s, CUDA %s",
            count,
            sum(len(gpu.migs) for gpu in self._gpus),
            self._versions.driver or "?",
            self._versions.cuda or "?",
        )

    def _check_enumeration(self, now: float) -> None:
        """A GPU bound to or unbound from the driver at run time changes NVML's enumeration, and with it the indexes of
        the GPUs after it, whose old handles "must be re-established" (nvml.h, nvmlDeviceRemoveGpu_v2 and
        nvmlDeviceDiscoverGpus): compare the count every layout check, and find the GPUs again when it moved."""
        if now - self._enumerated_at < self._settings.layout_check_seconds:
            return
        self._enumerated_at = now
        nvml = self._nvml
        try:
            count = gpu_count(nvml)
        except nvml.NVMLError as exc:
            log.debug("counting the GPUs failed: %s", exc)
            return
        if count == len(self._gpus):
            return
        log.warning(
            "NVML enumerates %d GPU(s) now, not %d: a GPU was bound to or unbound from the driver; finding the GPUs "
            "again",
            count,
            len(self._gpus),
        )
        try:
            self._discover()
        except nvml.NVMLError as exc:
            log.error("finding the GPUs again failed (%s); keeping the devices found before", exc)
            self._restart_xid()

    # ---- XID ------------------------------------------------------------------------------------------------------
    def _stop_xid(self) -> None:
        if self._xid is not None:
            self._xid.stop()
            self._xid_failures_seen = 0
            self._xid = None

    def _restart_xid(self) -> None:
        self._stop_xid()
        if not self._enabled & XID_KEYS:
            return
        gpus = [
            (gpu.identity.uuid, gpu.reader.handle)
            for gpu in self._gpus
            if not gpu.lost and gpu.identity is not None and gpu.reader is not None
        ]
        if not gpus:
            return
        self._xid = XidListener(self._nvml, gpus, self._ledger, wait_ms=self._settings.xid_wait_ms)
        self._xid.start()

    def _xid_status(self) -> None:
        listener = self._xid
        if listener is None or not listener.registered:
            return
        if not listener.alive:
            self._status.failed("xid")
        new_failures = listener.failures - self._xid_failures_seen
        if new_failures > 0:
            self._xid_failures_seen = listener.failures
            self._status.failed("xid", new_failures)

    def _lost(self, gpu: GpuSupervisor, code: int) -> None:
        """A GPU was found lost: the XID 79 the driver logged for it counts, where no event said so."""
        assert gpu.identity is not None
        if code == GPU_IS_LOST and self._enabled & XID_KEYS and self._ledger.lost(gpu.identity.uuid):
            log.warning(
                "GPU %d (%s): no XID event came for it (driver %s posts none for a GPU that falls off the bus unless "
                "a process runs on it); counting the XID 79 the driver logged to the kernel log",
                gpu.index,
                gpu.identity.uuid,
                self._versions.driver or "?",
                extra=fields(gpu=gpu.index, gpu_uuid=gpu.identity.uuid, xid=79, reason=self._names(code)),
            )

    def _answers_again(self, gpu: GpuSupervisor) -> None:
        assert gpu.identity is not None
        self._ledger.answered(gpu.identity.uuid)
        self._recovered = True

    # ---- the cycle ------------------------------------------------------------------------------------------------
    def collect(self) -> DeviceCollection:
        with self._lock:
            return self._collect()

    def _collect(self) -> DeviceCollection:
        status = self._status
        status.begin()
        now = self._clock()
        taken_at = self._wall()
        if not self._started and not (self._availability.due(now) and self._connect(now)):
            status.failed("nvml")  # no GPU to read: the snapshot says why, /readyz fails with it
            return DeviceCollection(taken_at, (), status.statuses(), nvml=self._availability.state)
        self._check_enumeration(now)
        self._recovered = False
        xid = self._xid
        registered = xid.registered if xid is not None else frozenset()
        outcomes: dict[int, Outcome] = {}
        reads: dict[int, tuple[GpuSupervisor, Future[GpuReading]]] = {}
        kernel_log = self._kernel_log
        for gpu in self._gpus:
            uuid = gpu.identity.uuid if gpu.identity is not None else ""
            timed_out = kernel_log.gsp_timed_out(uuid) if kernel_log is not None else None
            if timed_out is not None and not gpu.lost and now - timed_out < self._settings.gsp_pause_seconds:
                outcomes[gpu.index] = gpu.paused(now - timed_out)
                continue
            outcome = gpu.begin(now)
            if outcome is not None:
                outcomes[gpu.index] = outcome
                continue
            heard = uuid in registered or kernel_log is not None
            future = gpu.start(status, self._ledger.read(uuid) if heard else None, now)
            if future is not None:
                reads[gpu.index] = (gpu, future)
        deadline = self._settings.slow_call_deadline
        if reads:
            wait([future for _, future in reads.values()], timeout=deadline)
        for index, (gpu, future) in reads.items():
            outcomes[index] = gpu.settle(future, now, deadline)
        readings = self._tally(outcomes, status)
        if any(gpu.reopened for gpu in self._gpus):
            for gpu in self._gpus:
                gpu.reopened = False
            self._history.retain([r.uuid for r in readings])
        if self._recovered:
            self._restart_xid()
        self._xid_status()
        self._remember(taken_at, readings)
        return DeviceCollection(
            taken_at=taken_at,
            devices=tuple(readings),
            statuses=status.statuses(),
            processes_hidden=self._processes_hidden,
            nvml=UP,
        )

    def _tally(self, outcomes: dict[int, Outcome], status: CycleStatus) -> list[DeviceReading]:
        """The cycle's readings in GPU order, and the nvml part's health: it failed only when no GPU answered at
        all; a lost or stalled GPU while others answer shows as its `up` 0 (and GPUDown), counted as an error."""
        readings: list[DeviceReading] = []
        answered = lost = 0
        for gpu in self._gpus:
            outcome = outcomes.get(gpu.index)
            if outcome is None:
                continue
            if outcome.verdict is Verdict.ANSWERED:
                answered += 1
            elif outcome.verdict is Verdict.LOST:
                lost += 1
                readings.extend(self._down_readings(outcome.readings))
                continue
            elif outcome.verdict is Verdict.PAUSED:  # down, its XIDs kept: the 119 that paused it among them
                readings.extend(self._down_readings(outcome.readings))
                continue
            elif outcome.verdict is Verdict.FAILED:
                if gpu.index not in self._defects_logged:
                    self._defects_logged.add(gpu.index)
                    log.error(
                        "GPU %d: reading it failed unexpectedly; skipping it this cycle",
                        gpu.index,
                        exc_info=outcome.error,
                    )
                status.failed("nvml")
            readings.extend(outcome.readings)
        stalled = sum(1 for gpu in self._gpus if gpu.busy is not None)
        if stalled:
            status.errors("nvml", stalled)
        if lost:
            if answered:
                status.errors("nvml", lost)
            else:
                status.failed("nvml", lost)
        return readings

    def _down_readings(self, down: tuple[DeviceReading, ...]) -> tuple[DeviceReading, ...]:
        """A lost GPU's readings: down, with the XIDs heard from it kept (XID 79 is what it said as it fell off the
        bus; without its series that alert could not fire while the GPU is gone)."""
        if not down or not self._enabled & XID_KEYS:
            return down
        counts, last = self._ledger.read(down[0].uuid)
        if not counts:
            return down
        values = MappingProxyType({"last_xid": float(last)}) if "last_xid" in self._enabled else EMPTY
        vectors = MappingProxyType({"xid_errors": counts}) if "xid_errors" in self._enabled else NO_VECTORS
        return (replace(down[0], values=values, vectors=vectors), *down[1:])

    # ---- sample buffers -------------------------------------------------------------------------------------------
    def _remember(self, taken_at: float, readings: list[DeviceReading]) -> None:
        history = self._history
        for reading in readings:
            if not reading.up:
                continue
            values = reading.values
            utilization = values.get("gr_engine_active") if reading.is_mig else values.get("gpu_util")
            history.record(reading.uuid, HistoryPoint(taken_at, utilization, values.get("fb_used")))

    def history(self, uuid: str, seconds: float) -> tuple[HistoryPoint, ...]:
        return self._history.window(uuid, self._wall() - seconds)
