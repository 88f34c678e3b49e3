"""NVML status codes as the collector treats them, and the exception `start()` raises when there is no NVML.

Each failed call gets one `Disposition`, which decides what the collector does next: drop the measurement for good,
count it, mark the GPU lost, or treat it as an empty answer. Codes are those of nvml.h (they never change meaning).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Any

SUCCESS = 0
UNINITIALIZED = 1
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
IN_USE = 19
UNKNOWN = 999

# The names the collector counts errors under (DeviceReading.errors keys). Codes not listed are named from the
# injected pynvml module's NVML_ERROR_* constants, or "ERROR_<code>".
_KNOWN_NAMES: Mapping[int, str] = MappingProxyType(
    {
        UNINITIALIZED: "UNINITIALIZED",
        NOT_SUPPORTED: "NOT_SUPPORTED",
        NO_PERMISSION: "NO_PERMISSION",
        NOT_FOUND: "NOT_FOUND",
        DRIVER_NOT_LOADED: "DRIVER_NOT_LOADED",
        TIMEOUT: "TIMEOUT",
        LIBRARY_NOT_FOUND: "LIBRARY_NOT_FOUND",
        FUNCTION_NOT_FOUND: "FUNCTION_NOT_FOUND",
        GPU_IS_LOST: "GPU_IS_LOST",
        RESET_REQUIRED: "RESET_REQUIRED",
        LIB_RM_VERSION_MISMATCH: "LIB_RM_VERSION_MISMATCH",
        IN_USE: "IN_USE",
        UNKNOWN: "UNKNOWN",
    }
)

# the scenarios shipped in simulation/scenarios/ (a test keeps the two lists equal; the exporter may not import them)
BUILTIN_SCENARIO_NAMES = (
    "h100x8",
    "h100-mig",
    "h200x8",
    "a100x8",
    "a100-mig",
    "a10x4",
    "l4x2",
    "v100x8",
    "shared",
    "faulty",
    "dra",
)
SIMULATE_HINT = f"to run without a GPU, pass --simulate SCENARIO ({', '.join(BUILTIN_SCENARIO_NAMES)})"


class Disposition(Enum):
    UNSUPPORTED = "unsupported"  # NOT_SUPPORTED, FUNCTION_NOT_FOUND: drop the measurement on this device for good
    NO_PERMISSION = "no_permission"  # log once per (device, measurement), count once
    LOST = "lost"  # GPU_IS_LOST, RESET_REQUIRED: the GPU is down until it answers again
    EMPTY = "empty"  # NOT_FOUND: nothing there (an empty MIG slot, no newer sample)
    TIMEOUT = "timeout"  # an event wait that saw no event
    FAILED = "failed"  # anything else: count it, drop this value for this cycle


_DISPOSITIONS: Mapping[int, Disposition] = MappingProxyType(
    {
        NOT_SUPPORTED: Disposition.UNSUPPORTED,
        FUNCTION_NOT_FOUND: Disposition.UNSUPPORTED,
        NO_PERMISSION: Disposition.NO_PERMISSION,
        GPU_IS_LOST: Disposition.LOST,
        RESET_REQUIRED: Disposition.LOST,
        NOT_FOUND: Disposition.EMPTY,
        SUCCESS: Disposition.EMPTY,  # pynvml raises NVMLError(0) when a sized query finds nothing to size
        TIMEOUT: Disposition.TIMEOUT,
    }
)


def disposition(code: int) -> Disposition:
    return _DISPOSITIONS.get(code, Disposition.FAILED)


def status_code(exc: BaseException) -> int:
    """The NVML status code of a pynvml NVMLError (its `value`); UNKNOWN for anything else."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else UNKNOWN


class ErrorNames:
    """Maps status codes to short names ("GPU_IS_LOST"), using the injected module's NVML_ERROR_* constants."""

    def __init__(self, nvml: Any) -> None:
        names = dict(_KNOWN_NAMES)
        for attr in dir(nvml):
            if attr.startswith("NVML_ERROR_"):
                code = getattr(nvml, attr)
                if isinstance(code, int):
                    names.setdefault(code, attr.removeprefix("NVML_ERROR_"))
        self._names: Mapping[int, str] = MappingProxyType(names)

    def __call__(self, code: int) -> str:
        return self._names.get(code, f"ERROR_{code}")
