"""One GPU index as the collector keeps it: readers, identity, backoff while lost, and the thread its reads run on."""

from __future__ import annotations

import math
from concurrent.futures import Future

from exporter.nvml.device import DeviceReader
from exporter.nvml.worker import DeviceWorker
from exporter.snapshot import DeviceReading, GpuIdentity
from toolkit.backoff import RetrySchedule

SlotReading = tuple[DeviceReading, list[DeviceReading]]


class GpuSlot:
    """One GPU index: its readers while it answers, its identity once known, its backoff while it does not, and the
    thread its reads run on (a read still running from an earlier cycle is `busy`: a hung call)."""

    __slots__ = (
        "backoff",
        "busy",
        "busy_since",
        "down",
        "identity",
        "index",
        "layout_checked_at",
        "lost",
        "mig_capable",
        "migs",
        "pending_mig",
        "reader",
        "reopened",
        "worker",
    )

    def __init__(self, index: int, backoff: RetrySchedule) -> None:
        self.index = index
        self.backoff = backoff
        self.identity: GpuIdentity | None = None
        self.reader: DeviceReader | None = None
        self.migs: list[DeviceReader] = []
        self.lost = False
        self.down: tuple[DeviceReading, ...] = ()  # what to report while lost
        self.worker = DeviceWorker(f"gpu-pulse-nvml-{index}")
        self.busy: Future[SlotReading] | None = None
        self.busy_since = 0.0
        self.mig_capable = True  # until nvmlDeviceGetMigMode says NOT_SUPPORTED
        self.layout_checked_at = -math.inf  # when the MIG slots were last probed for new instances
        self.pending_mig: bool | None = None  # a MIG mode waiting for the GPU to be idle (logged once)
        self.reopened = False  # its MIG layout was read again this cycle

    def current_call(self) -> str:
        for reader in (self.reader, *self.migs):
            if reader is not None and reader.current_call:
                return reader.current_call
        return "?"

    def close(self) -> None:
        """Free the readers and let the worker thread end."""
        self.worker.stop()
        self.close_readers()

    def close_readers(self) -> None:
        """Free the readers, unless a call of theirs still hangs (it may still use them)."""
        if self.busy is not None and not self.busy.done():
            return  # the hung read still uses them; the daemon thread dies with the process
        for reader in (self.reader, *self.migs):
            if reader is not None:
                reader.close()
