"""NVML device calls about processes: the running compute processes and their utilization samples."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simulation.load import SAMPLE_BUFFER_TICKS, TICK_S, ProcessLoad, whole_percents
from simulation.machine import Node, SimGpu, SimMig
from simulation.nvml import cabi
from simulation.nvml.cabi import as_int, target

DeviceCall = Callable[..., int]
NOT_AVAILABLE = 0xFFFFFFFF


class ProcessCalls:
    def __init__(self, node: Node) -> None:
        self.node = node

    def calls(self) -> dict[str, DeviceCall]:
        return {
            "nvmlDeviceGetComputeRunningProcesses_v3": self.running_processes,
            "nvmlDeviceGetProcessUtilization": self.process_utilization,
        }

    MIG_HANDLE_CALLS = frozenset({"nvmlDeviceGetComputeRunningProcesses_v3"})

    @staticmethod
    def _processes(gpu: SimGpu, mig: SimMig | None) -> list[tuple[ProcessLoad, int, int]]:
        """(process, GPU instance id, compute instance id) on a device; a MIG-enabled GPU lists all its MIG devices'."""
        if mig is not None:
            return [(p, mig.gpu_instance_id, mig.compute_instance_id) for p in mig.domain.processes]
        if gpu.migs is not None:
            return [
                (p, m.gpu_instance_id, m.compute_instance_id) for m in gpu.migs.values() for p in m.domain.processes
            ]
        assert gpu.domain is not None
        return [(p, NOT_AVAILABLE, NOT_AVAILABLE) for p in gpu.domain.processes]

    def running_processes(self, t: float, gpu: SimGpu, mig: SimMig | None, count_ref: Any, infos: Any) -> int:
        """Two-call protocol: with no array (or one too small) the count is set and INSUFFICIENT_SIZE returned."""
        procs = self._processes(gpu, mig)
        count = target(count_ref)
        n = len(procs)
        if infos is None or count.value < n:
            count.value = n
            return cabi.INSUFFICIENT_SIZE if n else cabi.SUCCESS
        for i, (p, gi, ci) in enumerate(procs):
            info = infos[i]
            info.pid = p.pid
            info.usedGpuMemory = p.memory_bytes
            info.gpuInstanceId = gi
            info.computeInstanceId = ci
        count.value = n
        return cabi.SUCCESS

    def process_utilization(
        self, t: float, gpu: SimGpu, mig: SimMig | None, samples: Any, count_ref: Any, last_seen: Any
    ) -> int:
        """Per-process samples newer than `last_seen` (microseconds since the epoch), one per process and tick.

        NOT_FOUND when there is none. With no array the count is set and INSUFFICIENT_SIZE returned; an array too
        small for the samples that appeared since gets the oldest ones (the caller's next last-seen picks up the rest).
        """
        domain = gpu.domain
        if domain is None:  # MIG enabled
            return cabi.NOT_SUPPORTED
        procs = domain.processes
        last = as_int(last_seen)
        node = self.node
        newest = node.tick(t)
        ticks = [k for k in range(max(0, newest - SAMPLE_BUFFER_TICKS + 1), newest + 1) if node.tick_time_us(k) > last]
        n = len(ticks) * len(procs)
        if n == 0:
            return cabi.NOT_FOUND
        count = target(count_ref)
        if samples is None:
            count.value = n
            return cabi.INSUFFICIENT_SIZE
        capacity = min(count.value, len(samples))
        ratio = gpu.spec.memory_copy_ratio
        written = 0
        for k in ticks:
            if written + len(procs) > capacity:
                break
            total, parts = domain.split(k * TICK_S)
            _, sm = whole_percents(total, parts)
            _, mem = whole_percents(total * ratio, {pid: v * ratio for pid, v in parts.items()})
            stamp = node.tick_time_us(k)
            for p in procs:
                s = samples[written]
                s.pid = p.pid
                s.timeStamp = stamp
                s.smUtil = sm[p.pid]
                s.memUtil = mem[p.pid]
                s.encUtil = 0
                s.decUtil = 0
                written += 1
        if written == 0:
            count.value = n
            return cabi.INSUFFICIENT_SIZE
        count.value = written
        return cabi.SUCCESS
