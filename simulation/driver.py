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
