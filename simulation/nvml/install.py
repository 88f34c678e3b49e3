"""Put a Simulator where pynvml looks for libnvidia-ml, and take it away again.

pynvml keeps the loaded library in the module global `pynvml.nvmlLib` and caches every function it resolved in
`pynvml._nvmlGetFunctionPointer_cache`. So there is one library per process: one simulator can be installed at a time,
and everything in the process that uses pynvml then talks to it.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

import pynvml

from simulation.nvml.library import Simulator

_lock = threading.Lock()
_installed: Simulator | None = None
_previous: Any = None


class Installation:
    """Returned by install(); as a context manager it uninstalls on exit."""

    def __init__(self, sim: Simulator) -> None:
        self.simulator = sim

    def __enter__(self) -> Simulator:
        return self.simulator

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        uninstall()


def install(sim: Simulator) -> Installation:
    """Make pynvml call `sim` instead of libnvidia-ml (call before nvmlInit). Raises if another one is installed."""
    global _installed, _previous
    with _lock:
        if _installed is not None and _installed is not sim:
            raise RuntimeError(
                f"a simulated NVML library is already installed ({_installed!r}): pynvml holds one library per "
                "process; uninstall it first"
            )
        if _installed is None:
            _previous = pynvml.nvmlLib
        with pynvml.libLoadLock:
            pynvml.nvmlLib = sim
            pynvml._nvmlGetFunctionPointer_cache.clear()
            pynvml._nvmlLib_refcount = 0
        _installed = sim
        return Installation(sim)


def uninstall() -> None:
    """Restore what pynvml had before install() (usually nothing, so the real library loads on the next nvmlInit)."""
    global _installed, _previous
    with _lock:
        if _installed is None:
            return
        with pynvml.libLoadLock:
            pynvml.nvmlLib = _previous
            pynvml._nvmlGetFunctionPointer_cache.clear()
            pynvml._nvmlLib_refcount = 0
        _installed = None
        _previous = None


def installed() -> Simulator | None:
    """The simulator pynvml currently talks to, if any."""
    return _installed
