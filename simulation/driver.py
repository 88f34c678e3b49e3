"""Facts about driver releases that change what NVML answers, keyed by the driver version a scenario names."""

from __future__ import annotations

import re

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


def _parts(version: str) -> tuple[int, int, int]:
    found = _VERSION.match(version.strip())
    if found is None:
        raise ValueError(f"not a driver version: {version!r} (expected e.g. 550.54.15)")
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


def translates_pids(version: str) -> bool:
    """Whether this driver gives process lists in the caller's PID namespace and leaves out processes outside it.

    open-gpu-kernel-modules, src/nvidia/src/kernel/gpu/gpu_rmapi.c: `_gpuConvertPid` (through `osFindNsPid`) turns
    each client's PID into the caller's namespace, and `gpuGetProcWithObject` skips a client whose PID has none there
    (NV_ERR_OBJECT_NOT_FOUND). Checked against the tags of that repository: absent up to 535.104.12, present from
    535.113.01 on the R535 branch (and in the 535.43.24+ builds of its 535.43 branch), and in every release from
    545.23.06 on. Older drivers hand out host PIDs.
    """
    major, minor, patch = _parts(version)
    if major > 535:
        return major >= 545
    if major < 535:
        return False
    return minor >= 113 or (minor == 43 and patch >= 24)


class CallerPids:
    """The PIDs NVML's process lists give the scenario's processes, for a caller in the scenario's PID namespace.

    In the host's namespace, or under a driver that does not translate, a process is listed by its host PID. Under a
    translating driver a caller in its own container's namespace sees only the processes that have a PID there
    (`namespace_pid`: a GPU process in the exporter's own pod), listed by that PID; the rest are left out
    (`gpuGetProcWithObject` skips them). Utilization samples are not translated (simulation/nvml/calls/processes.py).
    """

    def __init__(self, *, container: bool, driver_version: str, namespace_pids: dict[int, int]) -> None:
        self.translated = container and translates_pids(driver_version)
        self._namespace_pids = dict(namespace_pids)

    def listed(self, host_pid: int) -> int | None:
        """The PID a process list shows for `host_pid`; None when the list leaves the process out."""
        if not self.translated:
            return host_pid
        return self._namespace_pids.get(host_pid)


def branch(version: str) -> int:
    """The driver branch (535, 550, 570, ...) of a version."""
    return _parts(version)[0]


def rc_notifies_channels_when_lost(version: str) -> bool:
    """Whether a GPU that falls off the bus posts XID 79 to the channels running on it (one XID event per channel).

    open-gpu-kernel-modules, src/nvidia/arch/nvalloc/unix/src/osinit.c, `osHandleGpuLost`: every release logs
    `Xid 79` to the kernel log (`nvErrorLog_va`, which only logs) and marks the GPU lost
    (`gpuSetDisconnectedProperties`, the one place that sets PDB_PROP_GPU_IS_LOST); on GSP clients the later
    releases also RC every channel (`kgspRcAndNotifyAllChannels`, which posts NV2080_NOTIFIERS_RC_ERROR, NVML's XID
    event, per channel). Checked against the tags of that repository: absent up to 535.183.06 and present from
    535.216.01 on R535, absent up to 550.107.02 and present from 550.120 on R550, absent in every 545, 555 and 560
    release, present from 565.57.01 on. (R555 and R560 post one XID 79 per GPU instead: `rc_error_once_when_lost`.)
    """
    major, minor, _ = _parts(version)
    if major == 535:
        return minor >= 216
    if major == 550:
        return minor >= 120
    return major >= 565


def rc_error_once_when_lost(version: str) -> bool:
    """Whether a GPU that falls off the bus posts one XID 79 event for the GPU, whether or not a channel runs on it.

    open-gpu-kernel-modules osinit.c `osHandleGpuLost`: `gpuNotifySubDeviceEvent(pGpu, NV2080_NOTIFIERS_RC_ERROR, NULL,
    0, ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS, 0)` right after the Xid 79 line, in every 555 and 560 release
    (checked against the tags 555.42.02 to 560.35.03; absent in every 545 and 550 release), replaced from 565.57.01 by
    the GPU-unavailable notification and the RC of every channel.
    """
    return branch(version) in (555, 560)


def gsp_timeout_posts_gpu_unavailable_event(version: str) -> bool:
    """Whether a GSP RPC timeout posts NVML's GPU-unavailable event as well as logging Xid 119.

    open-gpu-kernel-modules src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c `_kgspLogXid119`: every release logs
    `NV_ERROR_LOG(pGpu, GSP_RPC_TIMEOUT, "Timeout after %llus of waiting for RPC response from GPU%d GSP! ...")`
    (to the kernel log only: nvErrorLog_va); from 565.57.01 it also posts NV2080_NOTIFIERS_GPU_UNAVAILABLE (checked
    against the tags: absent in 535.216.01, 550.163.01, 560.35.03). NVML has the event type from R570
    (`posts_gpu_unavailable_event`), with eventData 0 ("eventData is 0 for any other event", nvml.h nvmlEventData_t).
    """
    return posts_gpu_unavailable_event(version)


def posts_gpu_unavailable_event(version: str) -> bool:
    """Whether a GPU that falls off the bus posts NVML's GPU-unavailable event (nvmlEventTypeGpuUnavailableError).

    The kernel module posts NV2080_NOTIFIERS_GPU_UNAVAILABLE from `osHandleGpuLost` from 565.57.01 on (osinit.c,
    checked against the tags: absent up to 560.35.03); nvml.h has the event type (0x4000) from NVML 12.8, the R570
    library (NVIDIA/go-nvml gen/nvml/nvml.h, commit f420a32 "Bump to NVML version 12.8"). So: R570 and later.
    """
    return branch(version) >= 570
