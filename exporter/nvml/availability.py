"""Whether NVML can be used at all, why not, and when to try again.

The exporter never exits for want of NVML. On a real node the driver is often not usable for a while and then is:
its container has not finished installing it (GPU Operator), or it was upgraded without its kernel modules being
reloaded, so that NVML refuses to start with LIB_RM_VERSION_MISMATCH (nvidia-smi's "Driver/library version
mismatch", the most common failure of a GPU node after a driver upgrade). Both clear without restarting the
exporter, and users ask exporters to wait rather than crash-loop (dcgm-exporter issue 523: an exporter that started
before the driver and never recovered). So the collector keeps serving its own health, reports not ready with a
sentence naming the real fix, and calls nvmlInit again with backoff.

The sentence names the versions where the node says them: the kernel module's in /proc/driver/nvidia/version, the
library's in the file name of the libnvidia-ml this process mapped (/proc/self/maps), as the driver installs it
(libnvidia-ml.so.<version>).
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from exporter.nvml.errors import (
    DRIVER_NOT_LOADED,
    LIB_RM_VERSION_MISMATCH,
    LIBRARY_NOT_FOUND,
    NO_PERMISSION,
    SIMULATE_HINT,
    ErrorNames,
)
from exporter.snapshot import NvmlState
from toolkit.backoff import Backoff, Draw, RetrySchedule
from toolkit.logs import fields

log = logging.getLogger("exporter.nvml")

# at most 30 s between nvmlInit attempts: after a driver upgrade the exporter serves within 30 s of the new driver
# being loaded (docs/install.md, "Back after a driver upgrade"); an attempt without a driver costs next to nothing
DRIVER_BACKOFF = Backoff(initial=1.0, maximum=30.0)
UP = NvmlState(up=True)

_MODULE_VERSION = re.compile(r"Kernel Module(?: for [A-Za-z0-9_]+)?\s+(\d+\.\d+(?:\.\d+)?)\b")
_LIBRARY_VERSION = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)\s*$", re.MULTILINE)
_READ_LIMIT = 1 << 20  # /proc/self/maps of a busy process is a few hundred KiB at most


def module_version(text: str) -> str | None:
    """The kernel module's version in /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module
    550.54.15  Tue Mar 5 ..." or "... Open Kernel Module for x86_64  570.86.15 ...")."""
    found = _MODULE_VERSION.search(text)
    return found.group(1) if found else None


def library_version(maps: str) -> str | None:
    """The version in the file name of the libnvidia-ml mapped into this process, from /proc/self/maps."""
    found = _LIBRARY_VERSION.search(maps)
    return found.group(1) if found else None


@dataclass(frozen=True, slots=True)
class DriverFiles:
    """Where the node says which driver versions are in play (injected: tests point them at files of their own)."""

    module_version: Path = Path("/proc/driver/nvidia/version")
    process_maps: Path = Path("/proc/self/maps")

    def versions(self) -> tuple[str | None, str | None]:
        """(kernel module version, NVML library version), each None where it cannot be read."""
        return _read(self.module_version, module_version), _read(self.process_maps, library_version)


def _read(path: Path, parse: Callable[[str], str | None]) -> str | None:
    try:
        with path.open("r", encoding="utf-8", errors="replace") as f:
            return parse(f.read(_READ_LIMIT))
    except OSError:
        return None


def reason_for(code: int, detail: str, names: ErrorNames, files: DriverFiles) -> str:
    """One sentence (no line break): what NVML said, what it means on a node, and what fixes it."""
    name = names(code)
    if code == DRIVER_NOT_LOADED:
        return (
            f"the NVIDIA kernel module is not loaded ({name}): on a GPU Operator node its driver container has not "
            "finished installing it yet; elsewhere the driver is not installed or failed to load (dmesg | grep NVRM)"
        )
    if code == LIB_RM_VERSION_MISMATCH:
        module, library = files.versions()
        versions = ""
        if module or library:
            versions = f" (kernel module {module or 'unknown'}, NVML library {library or 'unknown'})"
        return (
            f"the NVIDIA kernel module loaded on this node is not the version of the NVML library this container "
            f"has{versions}, {name}: the driver was upgraded without reloading its kernel modules. Reload them once "
            "no process uses the GPUs (the GPU Operator's driver pod does it) or reboot the node; if the node already "
            "runs the new modules, restart this pod so that the container runtime mounts the matching library"
        )
    if code == LIBRARY_NOT_FOUND:
        return (
            f"libnvidia-ml.so.1 is not in this container ({name}): the NVIDIA container runtime did not inject the "
            "driver. Run the pod with runtimeClassName: nvidia (chart: exporter.runtimeClassName) or make nvidia the "
            f"node's default runtime, with NVIDIA_VISIBLE_DEVICES=all; {SIMULATE_HINT}"
        )
    if code == NO_PERMISSION:
        return (
            f"NVML may not talk to the driver ({name}): /dev/nvidiactl and /dev/nvidia<N> are not accessible in this "
            "container; the NVIDIA container runtime provides them with NVIDIA_VISIBLE_DEVICES=all"
        )
    return f"NVML is not usable ({name}: {detail})"


class NvmlAvailability:
    """The collector's view of NVML as a whole: up, or down with a reason and a retry schedule (on the collector's
    monotonic clock). Only the collector's thread touches it."""

    def __init__(
        self,
        names: ErrorNames,
        *,
        backoff: Backoff | None = None,
        draw: Draw = random.random,
        files: DriverFiles | None = None,
    ) -> None:
        self._names = names
        self._files = files if files is not None else DriverFiles()
        self._retry = RetrySchedule(backoff if backoff is not None else DRIVER_BACKOFF, draw)
        self._state = NvmlState(up=False, error="", reason="NVML has not been initialized yet")
        self._logged = ""  # the error last logged at warning level

    @property
    def state(self) -> NvmlState:
        return self._state

    @property
    def up(self) -> bool:
        return self._state.up

    def due(self, now: float) -> bool:
        return self._retry.due(now)

    def failed(self, code: int, detail: str, now: float) -> NvmlState:
        """NVML could not be started (or could not list the GPUs): down, retried later."""
        reason = reason_for(code, detail, self._names, self._files)
        self._state = NvmlState(up=False, error=self._names(code), reason=reason)
        retry_at = self._retry.failed(now)
        if self._logged != self._state.error:
            self._logged = self._state.error
            log.warning(
                "NVML is not available: %s. Serving without GPUs (not ready); trying again in %.0f s, and with "
                "backoff up to %.0f s",
                reason,
                retry_at - now,
                self._retry.backoff.maximum,
                extra=fields(reason=self._state.error),
            )
        else:
            log.debug("NVML still not available (%s); trying again in %.1f s", self._state.error, retry_at - now)
        return self._state

    def succeeded(self) -> None:
        if self._retry.failures:
            log.warning("NVML answers again after %d failed attempt(s)", self._retry.failures)
        self._retry.reset()
        self._logged = ""
        self._state = UP
