"""NVML device calls about processes: the running compute processes and their utilization samples."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from simulation.load import SAMPLE_BUFFER_TICKS, TICK_S, ProcessLoad, whole_percents
from simulation.machine import MPS_SERVER_MEMORY, Node, SimGpu, SimMig
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
            "nvmlDeviceGetMPSComputeRunningProcesses_v3": self.mps_processes,
            "nvmlDeviceGetProcessUtilization": self.process_utilization,
        }

    MIG_HANDLE_CALLS = frozenset(
        {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v3"}
    )

    def _processes(self, gpu: SimGpu, mig: SimMig | None) -> list[tuple[ProcessLoad, int, int]]:
        """(process, GPU instance id, compute instance id) on a device; a MIG-enabled GPU lists all its MIG devices'.
        Host PIDs: the lists translate them on the way out (`_fill`)."""
        if mig is not None:
            return [(p, mig.gpu_instance_id, mig.compute_instance_id) for p in mig.domain.processes]
        if gpu.migs is not None:
            return [
                (p, m.gpu_instance_id, m.compute_instance_id) for m in gpu.migs.values() for p in m.domain.processes
            ]
        assert gpu.domain is not None
        return [(p, NOT_AVAILABLE, NOT_AVAILABLE) for p in gpu.domain.processes]

    def running_processes(self, t: float, gpu: SimGpu, mig: SimMig | None, count_ref: Any, infos: Any) -> int:
        if self.node.mig_aggregate_refused(gpu, mig):
            return cabi.NO_PERMISSION
        return self._compute_list(gpu, mig, count_ref, infos)

    def _compute_list(self, gpu: SimGpu, mig: SimMig | None, count_ref: Any, infos: Any) -> int:
        """Two-call protocol: with no array (or one too small) the count is set and INSUFFICIENT_SIZE returned.

        Under MPS the compute list holds the MPS server alone (the kernel modules list its `MpsApi` client); the
        clients come from nvmlDeviceGetMPSComputeRunningProcesses.
        """
        if gpu.spec.mps_server_pid is not None:
            server = ProcessLoad(gpu.spec.mps_server_pid, 1.0, None, MPS_SERVER_MEMORY, "nvidia-cuda-mps")
            return self._fill([(server, NOT_AVAILABLE, NOT_AVAILABLE)], count_ref, infos)
        return self._fill(self._processes(gpu, mig), count_ref, infos)

    def mps_processes(self, t: float, gpu: SimGpu, mig: SimMig | None, count_ref: Any, infos: Any) -> int:
        """nvml.h (nvmlDeviceGetMPSComputeRunningProcesses_v3): the processes "utilizing MPS"; none without MPS."""
        if self.node.mig_aggregate_refused(gpu, mig):
            return cabi.NO_PERMISSION
        procs = self._processes(gpu, mig) if gpu.spec.mps_server_pid is not None else []
        return self._fill(procs, count_ref, infos)

    def _fill(self, procs: list[tuple[ProcessLoad, int, int]], count_ref: Any, infos: Any) -> int:
        """Write the list in the caller's PIDs: open-gpu-kernel-modules gpu_rmapi.c `_gpuConvertPid` turns each PID
        into the caller's namespace, and a process with none there is left out (see simulation/driver.py)."""
        shown = self.node.caller_pids.listed
        procs = [(replace(p, pid=pid), gi, ci) for p, gi, ci in procs if (pid := shown(p.pid)) is not None]
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
        """Per-process samples newer than `last_seen` (microseconds since the epoch): per tick, one sample for each
        process that had non-zero utilization in it; a process idle in a tick has no sample there.

        nvml.h (nvmlDeviceGetProcessUtilization): "One utilization sample structure is returned per process running,
        that had some non-zero utilization during the last sample period"; NOT_FOUND "if no valid sample entries are
        found since the lastSeenTimeStamp" -- so a device whose processes were all idle answers NOT_FOUND as well.
        With no array the count is set and INSUFFICIENT_SIZE returned; an array too small for the samples that
        appeared since gets the oldest whole ticks (the caller's next last-seen picks up the rest).

        Unkind on purpose, as the driver is:
        - The buffer holds the newest ticks in the order they were taken, each stamped with the host's wall clock of
          that moment (simulation/machine.py `tick_time_us`): after a wall-clock step back, new ticks are stamped
          before old ones, and a caller asking with the old newest stamp gets NOT_FOUND.
        - PIDs are host PIDs whatever the caller's namespace: open-gpu-kernel-modules kern_perf_ctrl.c
          (`subdeviceCtrlCmdPerfGetGpumonPerfmonUtilSamplesV2_KERNEL`) translates nothing up to 570.86.10, and later
          only samples carrying the kernel's PID record, which those relayed from the GSP firmware do not.
        - Under MPS the samples name the MPS server, which runs its clients' work in its own context (NVIDIA's MPS
          documentation: nvidia-cuda-mps-server "will appear as the active CUDA process rather than any of the client
          processes"): one sample per tick with the clients' summed utilization.
        """
        domain = gpu.domain
        if domain is None:  # MIG enabled
            return cabi.NOT_SUPPORTED
        last = as_int(last_seen)
        node = self.node
        newest = node.tick(t)
        ticks = [k for k in range(max(0, newest - SAMPLE_BUFFER_TICKS + 1), newest + 1) if node.tick_time_us(k) > last]
        ratio = gpu.spec.memory_copy_ratio
        found: list[tuple[int, list[tuple[int, int, int]]]] = []  # (stamp, [(pid, sm, mem)]) per tick
        for k in ticks:
            total, parts = domain.split(k * TICK_S)
            _, sm = whole_percents(total, parts)
            _, mem = whole_percents(total * ratio, {pid: v * ratio for pid, v in parts.items()})
            busy = [(p.pid, sm[p.pid], mem[p.pid]) for p in domain.processes if sm[p.pid] or mem[p.pid]]
            server = gpu.spec.mps_server_pid
            if server is not None and busy:
                busy = [(server, sum(b[1] for b in busy), sum(b[2] for b in busy))]
            if busy:
                found.append((node.tick_time_us(k), busy))
        n = sum(len(busy) for _, busy in found)
        if n == 0:
            return cabi.NOT_FOUND
        count = target(count_ref)
        if samples is None:
            count.value = n
            return cabi.INSUFFICIENT_SIZE
        capacity = min(count.value, len(samples))
        written = 0
        for stamp, busy in found:
            if written + len(busy) > capacity:
                break
            for pid, sm_util, mem_util in busy:
                s = samples[written]
                s.pid = pid
                s.timeStamp = stamp
                s.smUtil = sm_util
                s.memUtil = mem_util
                s.encUtil = 0
                s.decUtil = 0
                written += 1
        if written == 0:
            count.value = n
            return cabi.INSUFFICIENT_SIZE
        count.value = written
        return cabi.SUCCESS
