"""Processes on one GPU or MIG instance: NVML's running-compute list joined with its per-process utilization samples."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from exporter.nvml.errors import Disposition
from exporter.nvml.faults import DeviceFaults
from exporter.nvml.sample_cursor import PROBE_SECONDS, SampleCursor
from exporter.snapshot import ProcessUsage

_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE for unsigned long long

RUNNING = "running_processes"
MPS = "mps_processes"
UTILIZATION = "process_utilization"


def _optional_id(value: Any) -> int | None:
    # GI/CI ids are 0xFFFFFFFF outside MIG mode
    if value is None:
        return None
    number = int(value)
    return None if number >= 0xFFFFFFFF else number


class ProcessSampler:
    """Joins one device's process lists with the utilization samples that are new since the last cycle.

    NVML gives a sample only for a process with non-zero utilization in the period (nvml.h,
    nvmlDeviceGetProcessUtilization), so when a cycle brings new samples, a running process without one was idle:
    0 %, not unknown. NVML samples on its own period, so a cycle may bring no new sample at all (NOT_FOUND): each
    process's last figure is then kept for up to `hold_seconds` (on the injected monotonic `clock`) instead of
    flickering to "unknown"; after that it is unknown, and attribution decides from the device's own utilization.
    Per-process utilization is NOT_SUPPORTED on MIG-enabled GPUs and instances: it then stops being asked, and the
    processes come without utilization. Which samples are new is the `SampleCursor`'s business (clock steps included).

    Two cases leave utilization unknown for good, never 0 %:
    - MPS clients (`mps_client`): the MPS server runs their work in its own context, so samples name the server
      (NVIDIA's MPS documentation, "nvidia-cuda-mps-server": "when querying active processes via nvidia-smi (or any
      NVML-based application) nvidia-cuda-mps-server will appear as the active CUDA process rather than any of the
      client processes"); their memory is real ("all of the memory used by the application", nvml.h,
      nvmlDeviceGetMPSComputeRunningProcesses_v3).
    - `samples_match=False`: samples and lists are in different PID namespaces (see pidspace.py); samples are then not
      asked for.
    """

    __slots__ = ("_clock", "_cursor", "_held", "_hold_seconds", "_samples_match")

    def __init__(
        self,
        clock: Callable[[], float],
        hold_seconds: float = 3.0,
        *,
        samples_match: bool = True,
        probe_seconds: float = PROBE_SECONDS,
    ) -> None:
        self._clock = clock
        self._hold_seconds = hold_seconds
        self._samples_match = samples_match
        self._cursor = SampleCursor(clock, probe_seconds, watch_seconds=hold_seconds)  # found before the hold lapses
        self._held: dict[int, tuple[float, float, float]] = {}  # pid -> (sm %, memory %, when)

    @property
    def cursor(self) -> SampleCursor:
        return self._cursor

    def read(self, nvml: Any, handle: Any, faults: DeviceFaults) -> tuple[ProcessUsage, ...] | None:
        """This cycle's processes; None when the list cannot be read. A lost GPU raises NVMLError."""
        if RUNNING in faults.unsupported:
            return None
        try:
            running = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        except nvml.NVMLError as exc:
            if faults.record(RUNNING, exc) is Disposition.LOST:
                raise
            return None
        clients = self._mps_clients(nvml, handle, faults, {int(p.pid) for p in running})
        # also when idle: old samples must not pile up
        means = self._sample_means(nvml, handle, faults, bool(running or clients)) if self._samples_match else {}
        if not running and not clients:
            self._held.clear()
            return ()
        now = self._clock()
        held = self._held
        if means:  # the period is covered: a listed process without a sample was idle in it (MPS clients aside)
            for proc in running:
                sm_mean, mem_mean = means.get(int(proc.pid), (0.0, 0.0))
                held[int(proc.pid)] = (sm_mean, mem_mean, now)
        found = [self._usage(proc, now, mps_client=False) for proc in running]
        found += [self._usage(proc, now, mps_client=True) for proc in clients]
        if len(held) > len(found):  # forget processes that ended
            running_pids = {usage.pid for usage in found}
            for pid in [pid for pid in held if pid not in running_pids]:
                del held[pid]
        return tuple(found)

    def _usage(self, proc: Any, now: float, *, mps_client: bool) -> ProcessUsage:
        pid = int(proc.pid)
        used = getattr(proc, "usedGpuMemory", None)
        sm: float | None = None
        mem: float | None = None
        last = None if mps_client else self._held.get(pid)
        if last is not None:
            if now - last[2] <= self._hold_seconds:
                sm, mem = last[0], last[1]
            else:
                del self._held[pid]
        return ProcessUsage(
            pid=pid,
            used_memory_bytes=None if used is None or int(used) == _NOT_AVAILABLE else int(used),
            sm_util_percent=sm,
            memory_util_percent=mem,
            gpu_instance_id=_optional_id(getattr(proc, "gpuInstanceId", None)),
            compute_instance_id=_optional_id(getattr(proc, "computeInstanceId", None)),
            mps_client=mps_client,
        )

    @staticmethod
    def _mps_clients(nvml: Any, handle: Any, faults: DeviceFaults, listed: set[int]) -> list[Any]:
        """The processes with an MPS compute context (nvml.h: nvmlDeviceGetMPSComputeRunningProcesses_v3): under MPS
        the compute list shows only the MPS server, the clients (the pods' processes) only here."""
        if MPS in faults.unsupported:
            return []
        try:
            clients = nvml.nvmlDeviceGetMPSComputeRunningProcesses_v3(handle)
        except nvml.NVMLError as exc:  # NOT_SUPPORTED (before Volta) or FUNCTION_NOT_FOUND: not asked again
            if faults.record(MPS, exc) is Disposition.LOST:
                raise
            return []
        return [c for c in clients if int(c.pid) not in listed]

    def _samples(self, nvml: Any, handle: Any, faults: DeviceFaults, since_us: int) -> list[Any]:
        try:
            return list(nvml.nvmlDeviceGetProcessUtilization(handle, since_us))
        except nvml.NVMLError as exc:
            if faults.record(UTILIZATION, exc) is Disposition.LOST:
                raise
            return []  # NOT_FOUND: nothing newer than the last timestamp

    def _sample_means(
        self, nvml: Any, handle: Any, faults: DeviceFaults, running: bool
    ) -> dict[int, tuple[float, float]]:
        """Mean smUtil / memUtil per pid over the samples that are new since the last cycle."""
        if UTILIZATION in faults.unsupported:
            return {}
        cursor = self._cursor
        fresh = cursor.take(self._samples(nvml, handle, faults, cursor.last_seen_us))
        if not fresh and cursor.probe_due(running) and UTILIZATION not in faults.unsupported:
            fresh = cursor.rewound(self._samples(nvml, handle, faults, 0), faults.label)
        sums: dict[int, list[float]] = {}
        for sample in fresh:
            acc = sums.get(int(sample.pid))
            if acc is None:
                sums[int(sample.pid)] = [float(sample.smUtil), float(sample.memUtil), 1.0]
            else:
                acc[0] += float(sample.smUtil)
                acc[1] += float(sample.memUtil)
                acc[2] += 1.0
        return {pid: (acc[0] / acc[2], acc[1] / acc[2]) for pid, acc in sums.items()}
