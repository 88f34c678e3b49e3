"""Memory that connections held, returned to the system once they close.

What a connection holds while it waits (a request head under its bound, aiohttp's parser state, TLS buffers) is freed
when it closes, but glibc's malloc keeps freed pages inside its heap for the next allocation: only the top of the heap
shrinks by itself, and `malloc_trim` hands back the free pages below it (malloc_trim(3)). 512 connections holding
heads under the bound took the exporter from 76 to 122-143 MiB and kept it after they had closed (issue 42).

`MemoryReturn` counts the connections that close and calls `malloc_trim(0)` once `after_closed` have closed since the
last call, at most every `min_interval` seconds (a trim walks the heap: a few milliseconds on the event loop). Where
the C library has no malloc_trim (musl), it does nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

AFTER_CLOSED = 64
MIN_INTERVAL = 5.0


def glibc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's `int malloc_trim(size_t pad)`, or None where the C library has none."""
    try:  # the symbols the process has loaded (ctypes.util.find_library would run ldconfig)
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


class MemoryReturn:
    def __init__(
        self,
        *,
        after_closed: int = AFTER_CLOSED,
        min_interval: float = MIN_INTERVAL,
        trim: Callable[[int], int] | None = None,
    ) -> None:
        self._after_closed = after_closed
        self._min_interval = min_interval
        self._trim = trim if trim is not None else glibc_malloc_trim()
        self._closed = 0
        self._last: float | None = None
        self.trims = 0

    def closed(self) -> None:
        """A connection closed."""
        self._closed += 1

    def maybe_return(self, now: float) -> bool:
        """Trim the heap if enough connections closed since the last trim and it was long enough ago."""
        if self._trim is None or self._closed < self._after_closed:
            return False
        if self._last is not None and now - self._last < self._min_interval:
            return False
        self._trim(0)
        self._closed, self._last = 0, now
        self.trims += 1
        return True
