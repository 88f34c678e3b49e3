"""Whose PIDs NVML's answers carry, and whether a utilization sample can be matched to a listed process.

Two facts of the driver decide it (read in NVIDIA/open-gpu-kernel-modules at the tags named):

- Process *lists* (`nvmlDeviceGetComputeRunningProcesses`, `nvmlDeviceGetMPSComputeRunningProcesses`) come in the
  caller's PID namespace, leaving out processes that have no PID there, from 535.113.01 on the R535 branch (535.43.24
  on its 535.43 branch) and in every release from 545.23.06 (src/nvidia/src/kernel/gpu/gpu_rmapi.c `_gpuConvertPid`,
  absent up to 535.104.12). Older drivers list host PIDs.
- Utilization *samples* (`nvmlDeviceGetProcessUtilization`) name the process that was on the engine by its host PID:
  up to 570.86.10 the samples control (src/nvidia/src/kernel/gpu/perf/kern_perf_ctrl.c,
  `subdeviceCtrlCmdPerfGetGpumonPerfmonUtilSamplesV2_KERNEL`) translates nothing; from 570.86.15 it translates only a
  sample that carries the kernel's PID record (`pOsPidInfo`), which samples relayed from the GSP firmware do not, and a
  process without a PID in the caller's namespace keeps its host PID either way.

So in the host's PID namespace (`hostPID: true`) lists and samples agree. In a container's own PID namespace, a
driver that translates lists gives namespace PIDs beside host-PID samples: a sample's PID can name a different process
than the listed one with the same number, so samples are not matched at all (utilization stays unknown, attribution
says `unattributed`); a driver that does not translate lists host PIDs, which match the samples.

Whether the exporter runs in the host's PID namespace is read from `/proc/self/ns/pid`: the initial PID namespace has
the fixed inode number PROC_PID_INIT_INO, 0xEFFFFFFC (Linux include/linux/proc_ns.h).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

PROC_PID_INIT_INO = 0xEFFFFFFC
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def lists_translated(driver_version: str) -> bool | None:
    """Whether this driver gives process lists in the caller's PID namespace; None for a version it cannot read."""
    found = _VERSION.match(driver_version.strip())
    if found is None:
        return None
    major, minor, patch = (int(part or 0) for part in found.groups())
    if major != 535:
        return major >= 545
    return minor >= 113 or (minor == 43 and patch >= 24)


@dataclass(frozen=True, slots=True)
class PidNamespace:
    """The PID namespace the exporter (the NVML caller) runs in: the host's, a container's own, or unknown (None)."""

    host: bool | None

    def samples_match_lists(self, driver_version: str) -> bool:
        """Whether a sample's PID and a listed process's PID name the same process under this driver.

        Unknown (namespace or driver version) counts as no: a figure left unknown is better than one credited to the
        wrong pod.
        """
        if self.host:
            return True
        return self.host is False and lists_translated(driver_version) is False

    def describe(self) -> str:
        if self.host is None:
            return "an unknown PID namespace"
        return "the host's PID namespace" if self.host else "a PID namespace of its own (no hostPID)"


def own_pid_namespace(link: str = "/proc/self/ns/pid") -> PidNamespace:
    """The namespace of this process, from the inode of its namespace link (no privilege needed for its own)."""
    try:
        return PidNamespace(os.stat(link).st_ino == PROC_PID_INIT_INO)
    except OSError:
        return PidNamespace(None)
