"""One GPU across cycles: read, busy (a call of an earlier cycle has not returned), lost, recovered.

A GPU's reads run on a thread of its own (worker.py), so a call that hangs in the driver holds up only that GPU: it is
reported stalled, with the call and how long, and no read is queued behind it. A lost GPU (GPU_IS_LOST,
RESET_REQUIRED) is reported down and opened again with backoff. A MIG layout changed under the exporter is read
again on the GPU's thread (layout.py). The collector gathers the supervisors' outcomes into one collection.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from enum import Enum
from functools import partial

from exporter.nvml.device import DeviceReader, GpuLostError
from exporter.nvml.discovery import SystemVersions
from exporter.nvml.errors import Disposition, ErrorNames, disposition, status_code
from exporter.nvml.layout import NOT_MIG_CAPABLE, layout_change
from exporter.nvml.readers import DeviceReaders
from exporter.nvml.status import CycleStatus
from exporter.nvml.worker import DeviceWorker
from exporter.snapshot import DeviceReading, GpuIdentity, MigIdentity, StalledCall
from toolkit.backoff import RetrySchedule
from toolkit.logs import fields

log = logging.getLogger("exporter.nvml")

GSP_TIMEOUT_CALL = "gsp_rpc_timeout"  # the stalled "call" of a GPU paused after a GSP timeout
Xids = tuple[Mapping[str, float], int]  # ({xid: count}, last xid) of a GPU registered for XID events
GpuReading = tuple[DeviceReading, list[DeviceReading]]  # the GPU's, and its MIG instances'


class Verdict(Enum):
    ANSWERED = "answered"
    STALLED = "stalled"  # a call has not returned: down this cycle, the call named
    LOST = "lost"  # down, probed again with backoff
    FAILED = "failed"  # reading it raised something unexpected (a defect): nothing this cycle
    PAUSED = "paused"  # its GSP timed out (the kernel log said so): down, not called, the timeout named


@dataclass(frozen=True, slots=True)
class Outcome:
    verdict: Verdict
    readings: tuple[DeviceReading, ...] = ()
    error: BaseException | None = None  # what a FAILED read raised


class GpuSupervisor:
    """GPU `index`: its readers while it answers, its identity once known, its backoff while it does not, and the
    thread its reads run on. `on_lost(supervisor, code)` and `on_recovered(supervisor)` let the collector keep its
    XID ledger and listener in step. The collector's thread calls everything but `read`, which runs on the GPU's."""

    def __init__(
        self,
        index: int,
        backoff: RetrySchedule,
        readers: DeviceReaders,
        versions: SystemVersions,
        names: ErrorNames,
        *,
        layout_check_seconds: float,
        on_lost: Callable[[GpuSupervisor, int], None],
        on_recovered: Callable[[GpuSupervisor], None],
    ) -> None:
        self.index = index
        self.backoff = backoff
        self._readers = readers
        self._versions = versions
        self._names = names
        self._layout_check_seconds = layout_check_seconds
        self._on_lost = on_lost
        self._on_recovered = on_recovered
        self.identity: GpuIdentity | None = None
        self.reader: DeviceReader | None = None
        self.migs: tuple[DeviceReader, ...] = ()
        self.lost = False
        self.down: tuple[DeviceReading, ...] = ()  # what to report while lost
        self._worker = DeviceWorker(f"gpu-pulse-nvml-{index}")
        self.busy: Future[GpuReading] | None = None
        self.busy_since = 0.0
        self._mig_capable = True  # until nvmlDeviceGetMigMode says NOT_SUPPORTED
        self._layout_checked_at = -math.inf  # when the MIG slots were last probed for new instances
        self._pending_mig: bool | None = None  # a MIG mode waiting for the GPU to be idle (logged once)
        self.reopened = False  # its MIG layout was read again this cycle

    # ---- opening --------------------------------------------------------------------------------------------------
    def open(self, now: float) -> bool:
        """Open the GPU (handle, identity, MIG instances, readers). False when it does not answer."""
        nvml = self._readers.nvml
        try:
            opened = self._readers.open(self.index, self._versions)
        except nvml.NVMLError as exc:
            self.lost = True
            self.backoff.failed(now)
            if self.identity is None:
                log.warning(
                    "GPU %d does not answer (%s); probing again later",
                    self.index,
                    exc,
                    extra=fields(gpu=self.index, reason=exc),
                )
            return False
        self.identity, self.reader, self.migs = opened.identity, opened.reader, opened.migs
        self.lost = False
        self.backoff.reset()
        self.down = ()
        return True

    # ---- the cycle, on the collector's thread ---------------------------------------------------------------------
    def paused(self, seconds: float) -> Outcome:
        """The GPU's GSP timed out `seconds` ago: it is not called this cycle (each call would wait out the driver's
        RPC timeout, kernel_log.py), and is reported down with the timeout as its stalled call."""
        if self.identity is None or self.reader is None:
            return Outcome(Verdict.PAUSED, self.down)
        stalled = StalledCall(GSP_TIMEOUT_CALL, max(0.0, seconds))
        gpu = DeviceReading(identity=self.identity, up=False, errors=self.reader.faults.view(), stalled=stalled)
        migs = (DeviceReading(identity=mig.identity, up=False, errors=mig.faults.view()) for mig in self.migs)
        return Outcome(Verdict.PAUSED, (gpu, *migs))

    def begin(self, now: float) -> Outcome | None:
        """Where the GPU stands before this cycle's read: an outcome when it is not read this cycle (a call still
        hangs, or it is lost and not due or not back), else None: `start` its read."""
        if self.busy is not None:
            if not self.busy.done():  # still in a call from an earlier cycle: do not queue another read behind it
                return Outcome(Verdict.STALLED, self._stalled_readings(now))
            finished, self.busy = self.busy, None
            log.warning(
                "GPU %d: the hung NVML call returned after %.1f s; reading it again",
                self.index,
                now - self.busy_since,
                extra=fields(gpu=self.index, gpu_uuid=self.identity.uuid if self.identity else None),
            )
            error = finished.exception()
            if isinstance(error, GpuLostError):
                self._mark_lost(error.code, now)
        if self.lost and not (self.backoff.due(now) and self._recover(now)):
            return Outcome(Verdict.LOST, self.down)
        return None

    def start(self, status: CycleStatus, xids: Xids | None, now: float) -> Future[GpuReading] | None:
        """Start this cycle's read on the GPU's thread (None: nothing to read)."""
        if self.reader is None:
            return None
        return self._worker.submit(partial(self.read, status, xids, now))

    def settle(self, future: Future[GpuReading], now: float, deadline: float) -> Outcome:
        """This cycle's outcome of a read `start`ed, once the collector stopped waiting for it."""
        if not future.done():
            self.busy, self.busy_since = future, now
            log.warning(
                "GPU %d (%s): an NVML call (%s) has not returned within %.1f s; reporting the GPU stalled while the "
                "other GPUs keep reporting",
                self.index,
                self.identity.uuid if self.identity is not None else "?",
                self.current_call(),
                deadline,
                extra=fields(
                    gpu=self.index,
                    gpu_uuid=self.identity.uuid if self.identity is not None else None,
                    reason="nvml_call_stalled",
                ),
            )
            return Outcome(Verdict.STALLED, self._stalled_readings(now))
        error = future.exception()
        if isinstance(error, GpuLostError):
            self._mark_lost(error.code, now)
            return Outcome(Verdict.LOST, self.down)
        if error is not None:  # a defect, not a device fault: the other GPUs keep reporting
            assert self.reader is not None
            self.reader.faults.count("INTERNAL")
            return Outcome(Verdict.FAILED, error=error)
        gpu_reading, mig_readings = future.result()
        return Outcome(Verdict.ANSWERED, (gpu_reading, *mig_readings))

    def _mark_lost(self, code: int, now: float) -> None:
        assert self.reader is not None and self.identity is not None
        name = self._names(code)
        faults = self.reader.faults
        faults.count(name)
        self.lost = True
        self.backoff.failed(now)
        self.close_readers()
        self.down = (
            DeviceReading(identity=self.identity, up=False, errors=faults.view()),
            *(DeviceReading(identity=mig.identity, up=False, errors=mig.faults.view()) for mig in self.migs),
        )
        log.warning(
            "GPU %d (%s) is lost (%s): reporting it down, the other GPUs keep reporting; probing it again in %.0f s",
            self.index,
            self.identity.uuid,
            name,
            self.backoff.delay,
            extra=fields(gpu=self.index, gpu_uuid=self.identity.uuid, reason=name),
        )
        self._on_lost(self, code)

    def _recover(self, now: float) -> bool:
        if not self.open(now):
            return False
        assert self.identity is not None
        log.warning(
            "GPU %d (%s) answers again",
            self.index,
            self.identity.uuid,
            extra=fields(gpu=self.index, gpu_uuid=self.identity.uuid),
        )
        self._on_recovered(self)
        return True

    def _stalled_readings(self, now: float) -> tuple[DeviceReading, ...]:
        """A GPU whose read hangs: down this cycle (nothing it said is current), named, with the call and how long."""
        if self.identity is None or self.reader is None:
            return ()
        stalled = StalledCall(self.current_call(), max(0.0, now - self.busy_since))
        gpu = DeviceReading(identity=self.identity, up=False, errors=self.reader.faults.view(), stalled=stalled)
        migs = (DeviceReading(identity=mig.identity, up=False, errors=mig.faults.view()) for mig in self.migs)
        return (gpu, *migs)

    def current_call(self) -> str:
        for reader in (self.reader, *self.migs):
            if reader is not None and reader.current_call:
                return reader.current_call
        return "?"

    # ---- one read, on the GPU's thread ----------------------------------------------------------------------------
    def read(self, status: CycleStatus, xids: Xids | None, now: float) -> GpuReading:
        """The GPU's reading and its MIG instances'. A MIG layout that changed since discovery is read again first,
        and MIG readings taken while it changed are dropped: never one instance's figures under another's identity.
        Raises GpuLostError."""
        change = self._layout_change(now, full=True)
        if change is not None:
            self._reopen(change)
        assert self.reader is not None
        gpu_reading = self.reader.read(status, xids)
        mig_readings = [mig.read(status) for mig in self.migs]
        if mig_readings and self._layout_change(now, full=False) is not None:
            mig_readings = []  # changed while being read: read again next cycle
        return gpu_reading, mig_readings

    def _layout_change(self, now: float, *, full: bool) -> str | None:
        if not self._mig_capable or self.reader is None or self.identity is None:
            return None
        full = full and now - self._layout_checked_at >= self._layout_check_seconds
        if full:
            self._layout_checked_at = now
        elif not self.migs:
            return None  # nothing to check between full checks
        migs = [(m.identity, m.handle) for m in self.migs if isinstance(m.identity, MigIdentity)]
        change = layout_change(
            self._readers.nvml, self.identity, self.reader.handle, migs, full=full, on_pending=self._pending
        )
        if change == NOT_MIG_CAPABLE:
            self._mig_capable = False
            return None
        return change

    def _pending(self, pending: bool | None) -> None:
        if pending == self._pending_mig:
            return
        self._pending_mig = pending
        if pending is not None:
            log.warning(
                "GPU %d: a MIG mode change (to %s) is pending: it needs the GPU idle, and this exporter holds it "
                "while it runs. The GPU Operator's mig-manager (v0.15+, GPU Operator v26.7+) pauses gpu-pulse for "
                "it through the nvidia.com/gpu.deploy.client label; elsewhere stop the exporter on this node "
                '(docs/install.md, "The driver\'s life cycle")',
                self.index,
                "on" if pending else "off",
            )

    def _reopen(self, change: str) -> None:
        """Read the GPU's identity and MIG layout again and build new readers for it (no SIGHUP needed)."""
        nvml = self._readers.nvml
        old = self.identity
        assert old is not None
        try:
            opened = self._readers.open(self.index, self._versions, before=old)
        except nvml.NVMLError as exc:
            code = status_code(exc)
            if disposition(code) is Disposition.LOST:
                raise GpuLostError(code) from exc
            raise
        self.close_readers()
        self.identity, self.reader, self.migs = opened.identity, opened.reader, opened.migs
        self.reopened = True
        log.warning(
            "GPU %d (%s): %s; reading its new layout (MIG %s, %d instance(s)) without a restart",
            self.index,
            opened.identity.uuid,
            change,
            "on" if opened.identity.mig_enabled else "off",
            len(opened.migs),
        )

    # ---- the end --------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Free the readers and let the worker thread end."""
        self._worker.stop()
        self.close_readers()

    def close_readers(self) -> None:
        """Free the readers, unless a call of theirs still hangs (it may still use them)."""
        if self.busy is not None and not self.busy.done():
            return  # the hung read still uses them; the daemon thread dies with the process
        for reader in (self.reader, *self.migs):
            if reader is not None:
                reader.close()
