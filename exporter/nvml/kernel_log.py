"""XIDs that reach only the kernel log: the NVIDIA driver's `NVRM: Xid` lines, read from /dev/kmsg (opt-in).

Some XIDs are printed and never posted to NVML: Xid 119 (a GSP RPC timeout) on every R535 to R560 driver, from R570
only as the GPU-unavailable event, whose eventData is 0 (open-gpu-kernel-modules kernel_gsp.c `_kgspLogXid119`;
nvml.h nvmlEventData_t); Xid 79 for an idle GPU before R555 (osinit.c `osHandleGpuLost`). DCGM reads them from
/dev/kmsg, by default 79, 119 and 120 (NVIDIA/DCGM dcgmlib/src/DcgmKmsgReader.cpp, `m_xidsToParse`), and so does
this reader: the other XIDs come as NVML events, and reading them here too would count them twice.

A record is "<priority>,<sequence>,<microseconds>,<flags>;<text>" (the kernel's Documentation/ABI/testing/dev-kmsg),
the text "NVRM: Xid (PCI:0000:18:00): 119, pid=..., name=..., ..." with " GPU-I:nn" and " GPU-CI:nn" inside the
parentheses for an error of a MIG instance (kernel_rc.c `krcReportXid`); the PCI address names the GPU. The reader
starts at the end of the log (the ledger counts since the exporter started) and reads one record per read on
/dev/kmsg, or lines of a regular file (a test's, or a copy). Xid 79 counts as the GPU's loss does (XidLedger.lost:
once per loss, with the events and the GPU_IS_LOST answers); a GSP timeout is noted per GPU with the collector's
clock, so that the collector stops calling that GPU for a while (DCGM stops calling every GPU until it is restarted:
DcgmCacheManager.cpp, "fatalXids", `m_skipDriverCalls`).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from exporter.nvml.xid import XID_FALLEN_OFF_THE_BUS, XidLedger
from toolkit.logs import fields

log = logging.getLogger("exporter.nvml")

GSP_RPC_TIMEOUT = 119
KERNEL_LOG_XIDS = frozenset({XID_FALLEN_OFF_THE_BUS, GSP_RPC_TIMEOUT, 120})  # DcgmKmsgReader.cpp's default set
_RECORD_BYTES = 8192  # a read of /dev/kmsg returns one record, or EINVAL when the buffer is too small for it
_XID_LINE = re.compile(
    r"^\d+,\d+,\d+,[^;]*;NVRM: Xid \(PCI:(?P<address>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
    r"(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?\): (?P<xid>\d+),"
)


@dataclass(frozen=True, slots=True)
class KernelXid:
    address: str  # "0000:18:00": the GPU's PCI domain, bus and device, as kernel_address() writes them
    xid: int
    gpu_instance: int | None  # the MIG GPU instance it is attributed to, if any


def kernel_address(pci_bus_id: str) -> str:
    """A PCI address as the kernel log's Xid lines and NVML's bus ids can both be compared: "0000:18:00" from
    "00000000:18:00.0" (NVML) or "0000:18:00" (the driver's line)."""
    parts = pci_bus_id.strip().lower().split(":")
    if len(parts) != 3:
        raise ValueError(f"not a PCI address: {pci_bus_id!r}")
    domain, bus, rest = parts
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(rest.split('.')[0], 16):02x}"


def parse_xid_record(record: str) -> KernelXid | None:
    """The XID of one kernel log record, or None when it is not an NVRM Xid line."""
    found = _XID_LINE.match(record)
    if found is None:
        return None
    gi = found["gi"]
    return KernelXid(kernel_address(found["address"]), int(found["xid"]), int(gi) if gi is not None else None)


class KernelLogReader:
    """Reads `path` on its own thread until `stop()`, records the XIDs of KERNEL_LOG_XIDS in `ledger` for the GPU
    `gpus()` maps their address to (kernel_address -> uuid), and notes each GSP timeout at `clock()`.

    The file is opened without blocking: nothing to read is polled again every `poll_seconds`; records overwritten
    before they were read (EPIPE on /dev/kmsg) are skipped. It may be /dev/kmsg itself (which needs a privileged
    container: the device cgroup admits /dev/kmsg to no other), a pipe a privileged relay writes its records to (the
    chart's kernelLog), or a file. A log that cannot be opened is said once and tried again every `retry_seconds`.
    """

    def __init__(
        self,
        path: str,
        ledger: XidLedger,
        gpus: Callable[[], Mapping[str, str]],
        clock: Callable[[], float],
        *,
        poll_seconds: float = 0.25,
        retry_seconds: float = 5.0,
    ) -> None:
        self._path = path
        self._retry_seconds = retry_seconds
        self._said = False
        self._ledger = ledger
        self._gpus = gpus
        self._clock = clock
        self._poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._gsp_timeouts: dict[str, float] = {}  # uuid -> clock() of its last GSP timeout
        self.failures = 0  # read errors other than "nothing yet" and "overwritten", since start
        self.opened = False

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start reading on the reader's thread: it opens the log at its end, and keeps trying every
        `retry_seconds` while it cannot (said once): a pipe a relay has not made yet, a log not readable."""
        self._thread = threading.Thread(target=self._run, name="gpu-pulse-kmsg", daemon=True)
        self._thread.start()

    def _open(self) -> int | None:
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            if not self._said:
                self._said = True
                log.warning(
                    "the kernel log %s cannot be read (%s): XIDs that only the kernel logs (119, and 79 of an idle GPU "
                    "on older drivers) are not counted until it can; trying again every %.0f s (docs/security.md, "
                    '"The kernel log")',
                    self._path,
                    exc.strerror or exc,
                    self._retry_seconds,
                    extra=fields(reason="kernel_log_unreadable"),
                )
            return None
        try:
            os.lseek(fd, 0, os.SEEK_END)  # /dev/kmsg: the next record to come; a file: its end; a pipe: no seek
        except OSError:
            pass
        self.opened = True
        return fd

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def gsp_timed_out(self, uuid: str) -> float | None:
        """When (by the collector's clock) the GPU's GSP last timed out, or None."""
        with self._lock:
            return self._gsp_timeouts.get(uuid)

    def _run(self) -> None:
        fd = self._open()
        while fd is None:
            if self._stop.wait(self._retry_seconds):
                return
            fd = self._open()
        pending = b""
        try:
            while not self._stop.is_set():
                try:
                    chunk = os.read(fd, _RECORD_BYTES)
                except BlockingIOError:
                    chunk = b""
                except OSError as exc:
                    if exc.errno == errno.EPIPE:  # overwritten before it was read: the next one is there
                        continue
                    self.failures += 1
                    log.warning("reading the kernel log failed: %s; stopped reading it", exc)
                    return
                if not chunk:  # nothing new (or a pipe's writer gone: it may come back)
                    self._stop.wait(self._poll_seconds)
                    continue
                pending += chunk
                *records, pending = pending.split(b"\n")
                for record in records:
                    self._heard(record.decode("utf-8", "replace"))
        finally:
            os.close(fd)

    def _heard(self, record: str) -> None:
        found = parse_xid_record(record)
        if found is None or found.xid not in KERNEL_LOG_XIDS:
            return
        uuid = self._gpus().get(found.address)
        if uuid is None:
            log.debug("kernel log: XID %d of %s, a GPU this exporter does not read", found.xid, found.address)
            return
        if found.xid == XID_FALLEN_OFF_THE_BUS:
            counted = self._ledger.lost(uuid)
        else:
            self._ledger.record(uuid, found.xid)
            counted = True
        if found.xid == GSP_RPC_TIMEOUT:
            with self._lock:
                self._gsp_timeouts[uuid] = self._clock()
        if counted:
            log.warning(
                "%s: XID %d in the kernel log%s",
                uuid,
                found.xid,
                ": a GSP RPC timed out, calls on this GPU may block for seconds"
                if found.xid == GSP_RPC_TIMEOUT
                else "",
                extra=fields(gpu_uuid=uuid, xid=found.xid, reason="kernel_log"),
            )
