"""Processes on one GPU or MIG instance: NVML's running-compute list joined with its per-process utilization samples."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from exporter.nvml.errors import Disposition
from exporter.nvml.faults import DeviceFaults
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
    """Keeps the last-seen sample timestamp of one device, so each cycle averages only the samples that are new.

    NVML gives a sample only for a process with non-zero utilization in the period (nvml.h,
    nvmlDeviceGetProcessUtilization), so when a cycle brings new samples, a running process without one was idle:
    0 %, not unknown. NVML samples on its own period, so a cycle may bring no new sample at all (NOT_FOUND): each
    process's last figure is then kept for up to `hold_seconds` (on the injected monotonic `clock`) instead of
    flickering to "unknown"; after that it is unknown, and attribution decides from the device's own utilization.
    Per-process utilization is NOT_SUPPORTED on MIG-enabled GPUs and instances: it then stops being asked, and the
    processes come without utilization.
    """

    __slots__ = ("_clock", "_held", "_hold_seconds", "_last_seen_us")

    def __init__(self, clock: Callable[[], float], hold_seconds: float = 3.0) -> None:
        self._last_seen_us = 0
        self._clock = clock
        self._hold_seconds = hold_seconds
        self._held: dict[int, tuple[float, float, float]] = {}  # pid -> (sm %, memory %, when)

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
        running += self._mps_clients(nvml, handle, faults, {int(p.pid) for p in running})
        means = self._sample_means(nvml, handle, faults)  # also when idle: old samples must not pile up
        if not running:
            self._held.clear()
            return ()
        now = self._clock()
        held = self._held
        if means:  # the period is covered: a running process without a sample was idle in it
            for proc in running:
                sm_mean, mem_mean = means.get(int(proc.pid), (0.0, 0.0))
                held[int(proc.pid)] = (sm_mean, mem_mean, now)
        found: list[ProcessUsage] = []
        for proc in running:
            pid = int(proc.pid)
            used = getattr(proc, "usedGpuMemory", None)
            sm: float | None = None
            mem: float | None = None
            last = held.get(pid)
            if last is not None:
                if now - last[2] <= self._hold_seconds:
                    sm, mem = last[0], last[1]
                else:
                    del held[pid]
            found.append(
                ProcessUsage(
                    pid=pid,
                    used_memory_bytes=None if used is None or int(used) == _NOT_AVAILABLE else int(used),
                    sm_util_percent=sm,
                    memory_util_percent=mem,
                    gpu_instance_id=_optional_id(getattr(proc, "gpuInstanceId", None)),
                    compute_instance_id=_optional_id(getattr(proc, "computeInstanceId", None)),
                )
            )
        if len(held) > len(found):  # forget processes that ended
            running_pids = {usage.pid for usage in found}
            for pid in [pid for pid in held if pid not in running_pids]:
                del held[pid]
        return tuple(found)

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

    def _sample_means(self, nvml: Any, handle: Any, faults: DeviceFaults) -> dict[int, tuple[float, float]]:
        """Mean smUtil / memUtil per pid over the samples newer than the last cycle's newest."""
        if UTILIZATION in faults.unsupported:
            return {}
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, self._last_seen_us)
        except nvml.NVMLError as exc:
            if faults.record(UTILIZATION, exc) is Disposition.LOST:
                raise
            return {}  # NOT_FOUND: nothing newer than the last timestamp
        sums: dict[int, list[float]] = {}
        newest = self._last_seen_us
        for sample in samples:
            stamp = int(sample.timeStamp)
            if stamp <= self._last_seen_us:
                continue
            newest = max(newest, stamp)
            acc = sums.get(int(sample.pid))
            if acc is None:
                sums[int(sample.pid)] = [float(sample.smUtil), float(sample.memUtil), 1.0]
            else:
                acc[0] += float(sample.smUtil)
                acc[1] += float(sample.memUtil)
                acc[2] += 1.0
        self._last_seen_us = newest
        return {pid: (acc[0] / acc[2], acc[1] / acc[2]) for pid, acc in sums.items()}
