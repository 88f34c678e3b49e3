"""The C side of the seam: NVML status codes, opaque handles, and writing through what ctypes passes.

pynvml calls each C function with ctypes objects: scalars (`c_uint(3)`), `byref(obj)` for out-parameters (the object
is `._obj`), arrays, string buffers, and opaque pointers (device handles, event sets, GPM samples) that it got from an
earlier call. Handles the simulator gives out are pointer values it can decode again; they are never dereferenced.
"""

from __future__ import annotations

import ctypes
from typing import Any

SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
IN_USE = 19
ARGUMENT_VERSION_MISMATCH = 25
UNKNOWN = 999

ERROR_STRINGS: dict[int, bytes] = {
    SUCCESS: b"Success",
    UNINITIALIZED: b"Uninitialized",
    INVALID_ARGUMENT: b"Invalid Argument",
    NOT_SUPPORTED: b"Not Supported",
    NO_PERMISSION: b"Insufficient Permissions",
    NOT_FOUND: b"Not Found",
    INSUFFICIENT_SIZE: b"Insufficient Size",
    DRIVER_NOT_LOADED: b"Driver Not Loaded",
    TIMEOUT: b"Timeout",
    GPU_IS_LOST: b"GPU is lost",
    LIB_RM_VERSION_MISMATCH: b"RM has detected an NVML/RM version mismatch",
    IN_USE: b"In use by another client",
    ARGUMENT_VERSION_MISMATCH: b"Argument version mismatch",
    UNKNOWN: b"Unknown Error",
}

# Opaque handle values: device handles (a GPU, or one MIG device of it), event sets, GPM samples.
_DEVICE_BASE = 0x5EED_0000_0000
_EVENT_SET_BASE = 0x5EED_1000_0000
_GPM_SAMPLE_BASE = 0x5EED_2000_0000
_SPAN = 0x1000_0000


def device_handle(gpu: int, mig: int | None = None, epoch: int = 0) -> int:
    """A device handle: the GPU (scenario index), its MIG device, and the GPU's enumeration epoch (a handle from
    before the GPU's NVML index moved stops working)."""
    return _DEVICE_BASE + (epoch << 16) + ((gpu + 1) << 8) + (0 if mig is None else mig + 1)


def decode_device(value: int) -> tuple[int, int | None] | None:
    """(gpu index, MIG device index or None) of a handle value, or None for a value that is no device handle."""
    offset = value - _DEVICE_BASE
    if not 0 < offset < _SPAN:
        return None
    gpu, low = ((offset >> 8) & 0xFF) - 1, offset & 0xFF
    if gpu < 0:
        return None
    return gpu, (None if low == 0 else low - 1)


def handle_epoch(value: int) -> int:
    """The enumeration epoch a device handle was given out in."""
    return (value - _DEVICE_BASE) >> 16


def event_set_handle(n: int) -> int:
    return _EVENT_SET_BASE + n


def decode_event_set(value: int) -> int | None:
    n = value - _EVENT_SET_BASE
    return n if 0 < n < _SPAN else None


def gpm_sample_handle(n: int) -> int:
    return _GPM_SAMPLE_BASE + n


def decode_gpm_sample(value: int) -> int | None:
    n = value - _GPM_SAMPLE_BASE
    return n if 0 < n < _SPAN else None


def pointer_value(p: Any) -> int:
    """The address held by a ctypes pointer object (a handle pynvml passes back), 0 for None or NULL."""
    if p is None:
        return 0
    if isinstance(p, int):
        return p
    try:
        return ctypes.c_void_p.from_buffer(p).value or 0
    except TypeError:  # something that is not a pointer-sized ctypes object
        return 0


def target(ref: Any) -> Any:
    """The object behind a byref() out-parameter (or the object itself when passed directly)."""
    return getattr(ref, "_obj", ref)


def set_pointer(ref: Any, value: int) -> None:
    """Write a handle value into the pointer object behind byref(handle)."""
    ctypes.c_void_p.from_buffer(target(ref)).value = value


def as_int(x: Any) -> int:
    """An integer argument, whether passed as a Python int or as a ctypes scalar (c_uint(3))."""
    if isinstance(x, int):
        return x
    return int(x.value)


def write_string(buf: Any, length: Any, text: str) -> int:
    """Copy text (NUL-terminated) into a char buffer of `length` bytes: INSUFFICIENT_SIZE when it does not fit."""
    data = text.encode()
    if buf is None:
        return INVALID_ARGUMENT
    if len(data) + 1 > as_int(length):
        return INSUFFICIENT_SIZE
    buf.value = data
    return SUCCESS
