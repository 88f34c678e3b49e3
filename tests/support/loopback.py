"""Loopback networking for tests: free ports, plain HTTP GETs, and waiting for a condition with a deadline."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Callable


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body


def wait_for(condition: Callable[[], bool], what: str, timeout: float, period: float = 0.25) -> None:
    """Wait until `condition()` holds (OSError and ValueError count as "not yet"); AssertionError naming `what` after
    `timeout` seconds. A deadline, not a speed assertion."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (OSError, ValueError):
            pass
        time.sleep(period)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
