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
