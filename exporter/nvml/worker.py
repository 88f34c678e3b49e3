"""One daemon thread per GPU for its NVML reads, so that a call that hangs in the driver holds up only its own GPU.

A hung driver call is a known failure (dcgm-exporter issue 164: one GPU's NVML call blocked and every GPU went stale).
NVML is thread-safe, and ctypes releases the GIL during a call, so the GPUs' reads run side by side. The thread is a
daemon: a call that never returns must not keep the process from exiting (a ThreadPoolExecutor's threads would).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

_STOP = None


class DeviceWorker:
    """Runs submitted calls one at a time, in order, on its own daemon thread."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, call: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self._jobs.put((call, future))
        return future

    def stop(self) -> None:
        """Stop after the call in progress (never waits for it: it may be hung in the driver)."""
        self._jobs.put(_STOP)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            call, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = call()
            except BaseException as error:  # handed to the collector, which decides
                future.set_exception(error)
            else:
                future.set_result(result)
