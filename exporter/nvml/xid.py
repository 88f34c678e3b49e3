"""XID critical-error events, heard on their own thread: a count per (GPU, XID) and the last XID per GPU.

A GPU that falls off the bus is XID 79 on every driver, but not every driver says so through NVML
(simulation/driver.py has the releases, from open-gpu-kernel-modules `osHandleGpuLost`): each logs Xid 79 to the
kernel log and marks the GPU lost (from then on NVML answers GPU_IS_LOST), R535 before 535.216.01 and R550 before
550.120 post no event at all, R555 and R560 one XID 79 event per GPU, later ones XID 79 only to channels running on
the GPU (none on an idle GPU). So the ledger takes a GPU's loss, learnt from GPU_IS_LOST (a call's answer, or the
kernel log's Xid 79 line: kernel_log.py), as the XID 79 the kernel logged for it, unless an XID 79 event for this
loss came already; an XID 79 event that comes after it stands in for the counted one. So a loss counts XID 79 once,
or once per channel that reported it, and the lost-GPU alert fires on every driver branch.

The GPU-unavailable event (R570 and later) is not a loss: the driver posts it for a GPU that fell off the bus, and
also for every GSP RPC timeout (kernel_gsp.c `_kgspLogXid119`, which logs XID 119), after which the GPU may well
answer again; its eventData is 0 either way (nvml.h, nvmlEventData_t). It is logged as what it is, and counts
nothing: a lost GPU answers GPU_IS_LOST to the next call, and the XID 119 is in the kernel log.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from exporter.nvml.discovery import handle_address
from exporter.nvml.errors import Disposition, disposition, status_code
from toolkit.logs import fields

log = logging.getLogger("exporter.nvml")

XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
GPU_UNAVAILABLE = 0x4000  # nvmlEventTypeGpuUnavailableError (nvml.h, NVML 12.8: R570 and later)
XID_FALLEN_OFF_THE_BUS = 79

EMPTY_COUNTS: Mapping[str, float] = MappingProxyType({})


class XidLedger:
    """XID counts since the exporter started, by GPU UUID. Kept across rediscoveries; safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, dict[str, float]] = {}
        self._last: dict[str, int] = {}
        self._views: dict[str, Mapping[str, float]] = {}
        self._fallen: dict[str, bool] = {}  # GPUs with an XID 79 for their current loss -> counted without an event

    def record(self, uuid: str, xid: int) -> None:
        with self._lock:
            self._record(uuid, xid)

    def _record(self, uuid: str, xid: int, *, derived: bool = False) -> None:
        self._last[uuid] = xid
        if xid == XID_FALLEN_OFF_THE_BUS:
            if self._fallen.get(uuid):  # the event for a loss counted already: it takes the derived one's place
                self._fallen[uuid] = False
                return
            self._fallen[uuid] = derived
        counts = self._counts.setdefault(uuid, {})
        key = str(xid)
        counts[key] = counts.get(key, 0.0) + 1.0
        self._views.pop(uuid, None)

    def lost(self, uuid: str) -> bool:
        """The GPU fell off the bus: count the XID 79 the kernel logged for it, unless an XID 79 event for this
        loss came already. True when it was counted here."""
        with self._lock:
            if uuid in self._fallen:
                return False
            self._record(uuid, XID_FALLEN_OFF_THE_BUS, derived=True)
            return True

    def answered(self, uuid: str) -> None:
        """The GPU answers again: a later loss is a new one."""
        with self._lock:
            self._fallen.pop(uuid, None)

    def read(self, uuid: str) -> tuple[Mapping[str, float], int]:
        """({xid: count}, last xid or 0) of one GPU."""
        with self._lock:
            view = self._views.get(uuid)
            if view is None:
                counts = self._counts.get(uuid)
                view = MappingProxyType(dict(counts)) if counts else EMPTY_COUNTS
                self._views[uuid] = view
            return view, self._last.get(uuid, 0)


class XidListener:
    """Registers every GPU for XID events (and the GPU-unavailable event where the driver has it) in one event set
    and waits on it in a loop until `stop()`.

    The wait has a timeout (TIMEOUT is the normal answer when nothing happened), so a stop is seen within
    `wait_ms`. GPU_IS_LOST means a registered GPU fell off the bus (nvml.h, nvmlEventSetWait_v2), and every later wait
    on that set fails the same way: the set is built again without the GPUs that no longer answer, so the others keep
    their XIDs coming (the collector builds a new listener once a lost GPU answers again). Other wait errors are
    logged once and retried after a pause.
    """

    def __init__(
        self,
        nvml: Any,
        gpus: Sequence[tuple[str, Any]],  # (uuid, handle)
        ledger: XidLedger,
        *,
        wait_ms: int = 250,
    ) -> None:
        self._nvml = nvml
        self._gpus = tuple(gpus)
        self._ledger = ledger
        self._wait_ms = wait_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None
        self._by_address: dict[int, str] = {}
        self.registered: frozenset[str] = frozenset()
        self.dropped: frozenset[str] = frozenset()  # GPUs left out of the set after they were lost
        self.failures = 0  # wait errors other than TIMEOUT and GPU_IS_LOST, since start

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Create the event set and register the GPUs; start the thread when at least one GPU can give XIDs."""
        if not self._register(self._gpus):
            return
        self._thread = threading.Thread(target=self._run, name="gpu-pulse-xid", daemon=True)
        self._thread.start()

    def _register(self, gpus: Sequence[tuple[str, Any]]) -> bool:
        """A new event set with `gpus` registered; False (and no set) when none of them can give XIDs."""
        nvml = self._nvml
        try:
            self._event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            log.warning("XID events are not available: %s", exc)
            return False
        registered: set[str] = set()
        self._by_address = {}
        for uuid, handle in gpus:
            try:
                nvml.nvmlDeviceRegisterEvents(handle, _event_types(nvml, handle), self._event_set)
            except nvml.NVMLError as exc:
                level = logging.DEBUG if disposition(status_code(exc)) is Disposition.UNSUPPORTED else logging.WARNING
                log.log(level, "%s: XID events cannot be registered: %s", uuid, exc)
                continue
            registered.add(uuid)
            address = handle_address(handle)
            if address is not None:
                self._by_address[address] = uuid
        self.registered = frozenset(registered)
        if not registered:
            self._free()
            return False
        return True

    def _without_lost_gpus(self) -> bool:
        """Build the set again with the registered GPUs that still answer; False when none is left."""
        nvml = self._nvml
        answering: list[tuple[str, Any]] = []
        lost: list[str] = []
        for uuid, handle in self._gpus:
            if uuid not in self.registered:
                continue
            try:
                nvml.nvmlDeviceGetSupportedEventTypes(handle)
            except nvml.NVMLError as exc:
                if disposition(status_code(exc)) is Disposition.LOST:
                    lost.append(uuid)
                    continue
            answering.append((uuid, handle))
        self.dropped = self.dropped | frozenset(lost)
        log.warning(
            "XID events: %s lost; listening again without it (%d GPU(s) left)",
            ", ".join(lost) or "a registered GPU is",
            len(answering),
            extra=fields(gpu_uuid=",".join(lost) or None, reason="GPU_IS_LOST"),
        )
        self._free()
        self.registered = frozenset()
        return bool(answering) and self._register(answering)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("the XID listener did not stop within %.1f s", timeout)
                return  # it still uses the event set: leave it
            self._thread = None
        self._free()

    def _free(self) -> None:
        if self._event_set is None:
            return
        try:
            self._nvml.nvmlEventSetFree(self._event_set)
        except self._nvml.NVMLError as exc:
            log.debug("freeing the XID event set: %s", exc)
        self._event_set = None

    def _run(self) -> None:
        nvml = self._nvml
        logged = False
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(self._event_set, self._wait_ms)
            except nvml.NVMLError as exc:
                kind = disposition(status_code(exc))
                if kind is Disposition.TIMEOUT:
                    continue
                if kind is Disposition.LOST:
                    if not self._without_lost_gpus():
                        return  # every GPU is gone: nothing to listen to until the collector starts a new listener
                    continue
                self.failures += 1
                if not logged:
                    log.warning("waiting for XID events failed: %s; retrying", exc)
                    logged = True
                self._stop.wait(self._wait_ms / 1000)
                continue
            logged = False
            self._heard(data)

    def _heard(self, data: Any) -> None:
        event_type = int(data.eventType)
        if event_type & (XID_CRITICAL_ERROR | GPU_UNAVAILABLE) == 0:
            return
        uuid = self._by_address.get(handle_address(data.device) or 0)
        if uuid is None:
            if len(self.registered) != 1:
                log.warning("event %#x from a device that was not registered", event_type)
                return
            (uuid,) = self.registered
        if event_type & XID_CRITICAL_ERROR:
            xid = int(data.eventData)
            self._ledger.record(uuid, xid)
            log.warning("%s: XID %d", uuid, xid, extra=fields(gpu_uuid=uuid, xid=xid))
        else:
            log.warning(
                "%s: the driver reports the GPU unavailable (a GSP RPC timeout, XID 119 in the kernel log, or the GPU "
                "falling off the bus, XID 79): it is counted as lost only if it answers GPU_IS_LOST",
                uuid,
                extra=fields(gpu_uuid=uuid, reason="gpu_unavailable_event"),
            )


def _event_types(nvml: Any, handle: Any) -> int:
    """XID events, and the GPU-unavailable event where the driver offers it: registering a type the driver lacks
    fails the whole registration (nvml.h, nvmlDeviceRegisterEvents: NOT_SUPPORTED "if the platform does not support
    ... some of requested event types")."""
    try:
        supported = int(nvml.nvmlDeviceGetSupportedEventTypes(handle))
    except nvml.NVMLError:
        return XID_CRITICAL_ERROR
    return XID_CRITICAL_ERROR | (supported & GPU_UNAVAILABLE)
