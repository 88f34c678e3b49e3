"""The Kubernetes API test server on a thread of its own, for tests that are not coroutines (its control methods
are thread-safe, so a synchronous test drives it directly)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from simulation.kubeapi import KubeApiServer


@contextmanager
def kube_api_on_a_thread(*, bookmark_interval: float = 1.0) -> Iterator[KubeApiServer]:
    """A started `KubeApiServer` serving from its own event loop thread; stopped on exit."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="kube-api-test-server", daemon=True)
    thread.start()
    server = KubeApiServer(bookmark_interval=bookmark_interval)
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=10)
        yield server
    finally:
        try:
            asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()
