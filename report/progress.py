"""Progress on a terminal: one line rewritten in place on stderr, only when stderr is a terminal (never in logs)."""

from __future__ import annotations

import time
from typing import TextIO


class TerminalProgress:
    def __init__(self, stream: TextIO, *, enabled: bool = True) -> None:
        self._stream = stream
        self._enabled = enabled and stream.isatty()
        self._started = time.monotonic()
        self._width = 0

    def __call__(self, what: str, done: int, total: int) -> None:
        if not self._enabled:
            return
        elapsed = time.monotonic() - self._started
        line = f"[{done}/{total}] {elapsed:5.0f}s {what}"[:100]
        self._stream.write("\r" + line.ljust(self._width))
        self._width = len(line)
        if done >= total:
            self._stream.write("\n")
        self._stream.flush()
