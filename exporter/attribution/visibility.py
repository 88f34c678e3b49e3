"""Can this exporter see the processes of other pods at all? Judged each cycle from what NVML and /proc show.

Two set-ups hide them, and neither raises an error anywhere:
- Drivers from R535.113 / R545 on give NVML's process lists in the caller's PID namespace and leave out the processes
  outside it (open-gpu-kernel-modules, gpu_rmapi.c `_gpuConvertPid`). An exporter without `hostPID: true` then gets
  empty lists while the GPUs are busy.
- Older drivers give host PIDs, which an exporter in its own PID namespace cannot find in its /proc: every listed
  process is unreadable there.
Either way, per-process shares of shared GPUs cannot be known; attribution then reports those pods `unattributed`
(never invented figures), and this verdict says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from exporter.snapshot import DeviceReading, ProcessVisibility

MEMORY_USED = "fb_used"  # bytes
UTILIZATION = "gpu_util"  # %
# Framebuffer in use that means a CUDA context is there (one takes a few hundred MiB); below it a GPU counts as idle,
# so that driver bookkeeping on an idle GPU is not mistaken for hidden processes.
CONTEXT_BYTES = 256 * 1024 * 1024

UNJUDGED = ProcessVisibility(None, "no busy GPU to judge by")


def judge_visibility(
    devices: Sequence[DeviceReading], readable: Callable[[Iterable[int]], int] | None
) -> ProcessVisibility:
    """The verdict for one cycle. `readable(pids)` counts the PIDs the proc root has (None: no proc root)."""
    listed = {p.pid for d in devices if d.up for p in d.processes}
    if listed:
        if readable is None:
            return ProcessVisibility(False, "no proc root: NVML lists processes, but they cannot be tied to pods")
        if readable(listed) == 0:
            return ProcessVisibility(
                False,
                f"none of the {len(listed)} GPU process(es) NVML lists is in the proc root: the exporter is not in "
                "the host's PID namespace (set hostPID: true, or mount the host's /proc and point --proc-root at it)",
            )
        return ProcessVisibility(True, f"{len(listed)} GPU process(es) listed and found in the proc root")
    busy_devices = [d for d in devices if d.up and busy(d)]
    if busy_devices:
        return ProcessVisibility(
            False,
            f"{len(busy_devices)} device(s) busy but NVML lists no process: the driver (R535.113+) leaves out "
            "processes outside the exporter's PID namespace; set hostPID: true",
        )
    return UNJUDGED


def busy(device: DeviceReading) -> bool:
    """Whether a device is in use: utilization above 0, or framebuffer a CUDA context takes."""
    values = device.values
    return values.get(MEMORY_USED, 0.0) >= CONTEXT_BYTES or values.get(UTILIZATION, 0.0) > 0
