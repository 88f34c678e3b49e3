"""PCIe throughput off the poll's path.

nvml.h: nvmlDeviceGetPcieThroughput "is querying a byte counter over a 20ms interval", so each call blocks that long in
the driver, and a GPU needs two (transmit, receive). Read in the GPU's poll they would add 40 ms to every cycle that
takes them. Here they run on a thread of the GPU's own, every few cycles; the poll hands in the values of the last run
that finished, and never waits for one in flight. The first run is done in the poll, so the first snapshot has them.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from exporter.nvml.errors import Disposition, status_code
from exporter.nvml.faults import DeviceFaults
from exporter.nvml.probes import Probe, ProbeEntry
from exporter.nvml.worker import DeviceWorker

ProbeTable = list[ProbeEntry]
# one probe's outcome: its values, or the NVML error it raised
Outcome = tuple[Probe, tuple[tuple[int, str], ...], tuple[float, ...] | BaseException]


class GpuLost(Exception):  # noqa: N818 - a signal to the reader, named for what it says
    """A PCIe read found the GPU lost (GPU_IS_LOST or RESET_REQUIRED)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class PcieSampler:
    """The PCIe throughput probes of one GPU, read every `every` cycles on a worker thread."""

    def __init__(self, nvml: Any, handle: Any, probes: ProbeTable, every: int, name: str) -> None:
        self._nvml = nvml
        self._handle = handle
        self._probes = probes
        self._every = max(1, every)
        self._name = name
        self._worker: DeviceWorker | None = None
        self._running: Future[list[Outcome]] | None = None
        self._held: dict[str, float] = {}
        self._reads = 0

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(key for _, keep in self._probes for _, key in keep)

    def _run(self) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for probe, keep in self._probes:
            try:
                outcomes.append((probe, keep, probe.read(self._nvml, self._handle)))
            except self._nvml.NVMLError as exc:
                outcomes.append((probe, keep, exc))
        return outcomes

    def read(self, faults: DeviceFaults, into: dict[str, float]) -> int:
        """Put the newest values into `into` and start a run when one is due; the number of failed reads harvested.
        Raises GpuLost when a finished run found the GPU gone."""
        cycle = self._reads
        self._reads += 1
        failures = 0
        if cycle == 0:
            failures += self._harvest(self._run(), faults)
        else:
            running = self._running
            if running is not None and running.done():
                self._running = None
                failures += self._harvest(running.result(), faults)
            if self._running is None and cycle % self._every == 0 and self._probes:
                if self._worker is None:
                    self._worker = DeviceWorker(self._name)
                self._running = self._worker.submit(self._run)
        into.update(self._held)
        return failures

    def _harvest(self, outcomes: list[Outcome], faults: DeviceFaults) -> int:
        failures = 0
        dropped: list[Probe] = []
        for probe, keep, got in outcomes:
            if isinstance(got, BaseException):
                kind = faults.record(probe.name, got)
                if kind is Disposition.LOST:
                    raise GpuLost(status_code(got))
                if kind is Disposition.UNSUPPORTED:
                    dropped.append(probe)
                    for _, key in keep:
                        self._held.pop(key, None)
                elif kind is Disposition.FAILED:
                    failures += 1
                continue
            for position, key in keep:
                self._held[key] = got[position]
        if dropped:
            self._probes = [entry for entry in self._probes if entry[0] not in dropped]
        return failures

    def close(self) -> None:
        """Let the worker thread end (a run in flight finishes on its own; it may hang in the driver)."""
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
