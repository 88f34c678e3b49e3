"""A client of the kubelet's pod-resources API that lists pods on its own timer and keeps the last answer.

The poll loop and the scrapes never call the kubelet: they read `PodResourcesClient.state`, the last mapping with its
age and whether the kubelet answered last time. A background thread calls `List` every `interval` seconds, with a
per-call deadline; after a failure (UNAVAILABLE, RESOURCE_EXHAUSTED from the kubelet's rate limit, a deadline) it waits
an exponentially growing, jittered delay instead. It watches the socket path: a socket that vanishes (kubelet restart)
drops the channel, and a socket that appears or is replaced gets a fresh channel and an immediate `List`.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import grpc

from exporter.kubelet.podresources import PodResources, pods_from_message
from exporter.kubelet.proto import api_pb2, api_pb2_grpc
from toolkit.backoff import Backoff
from toolkit.logs import fields

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
# gRPC's default 4 MiB receive limit is too small for busy nodes (dcgm-exporter #509).
MAX_RECEIVE_BYTES = 32 * 1024 * 1024
_SocketIdentity = tuple[int, int]  # (st_dev, st_ino) of the socket file: a recreated socket has a new inode


class KubeletCallError(RuntimeError):
    """One List call failed; `code` is the gRPC status code name ("UNAVAILABLE", "RESOURCE_EXHAUSTED", ...)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"kubelet pod-resources List failed: {code}: {detail}")
        self.code = code


@dataclass(frozen=True, slots=True)
class KubeletState:
    """What the client knows right now. Times are on the client's (monotonic) clock."""

    pods: tuple[PodResources, ...] | None = None  # the last successful List; None before the first
    listed_at: float | None = None  # when that List returned
    up: bool = False  # whether the most recent List succeeded
    calls_total: int = 0
    errors_total: int = 0
    last_error: str | None = None
    last_duration_seconds: float = 0.0

    def age(self, now: float) -> float | None:
        """Seconds since the mapping in `pods` was listed, or None without one."""
        return None if self.listed_at is None else max(0.0, now - self.listed_at)


class PodResourcesClient:
    """Lists pod resources from the kubelet's unix socket on a background thread. Thread-safe to read `state`."""

    def __init__(
        self,
        socket_path: Path | str = DEFAULT_SOCKET,
        *,
        interval: float = 5.0,
        call_timeout: float = 3.0,
        backoff: Backoff | None = None,
        socket_poll: float = 0.25,
        max_receive_bytes: int = MAX_RECEIVE_BYTES,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if interval <= 0 or call_timeout <= 0 or socket_poll <= 0:
            raise ValueError("kubelet interval, call timeout and socket poll period must be positive")
        self.socket_path = Path(socket_path)
        self.interval = interval
        self.call_timeout = call_timeout
        self.backoff = backoff or Backoff(initial=min(1.0, interval), maximum=max(30.0, interval))
        self.socket_poll = socket_poll
        self.max_receive_bytes = max_receive_bytes
        self._clock = clock
        self._rng = rng or random.Random()
        self._state = KubeletState()
        self._lock = threading.Lock()  # guards channel replacement against close()
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None
        self._channel_identity: _SocketIdentity | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._answered = threading.Event()  # set by the first List's outcome (pods, or why not)
        self._thread: threading.Thread | None = None

    # ---- what the poll loop reads -----------------------------------------------------------------------------------
    @property
    def state(self) -> KubeletState:
        return self._state

    def now(self) -> float:
        return self._clock()

    # ---- lifecycle ---------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the List timer. Never raises for an absent kubelet: that is reported in `state`."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kubelet-pod-resources", daemon=True)
        self._thread.start()

    def wait_first_answer(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds for the timer's first List to succeed or fail (a missing socket fails at
        once); False if it has not. The exporter waits before its first poll, so that the first snapshot's device
        series already carry their pods' labels."""
        return self._answered.wait(timeout)

    def close(self) -> None:
        """Stop the timer and cancel a call in flight (closing the channel ends it at once)."""
        self._stop.set()
        self._wake.set()
        self._drop_channel()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.call_timeout + 2.0)

    def refresh(self) -> None:
        """Ask the timer for a List now, instead of at the end of the current wait."""
        self._wake.set()

    def _missing(self) -> str:
        """The socket is not there: where it was looked for, and the setting that moves it (k0s and MicroK8s keep
        the kubelet's directory elsewhere than /var/lib/kubelet)."""
        return (
            f"socket {self.socket_path} does not exist; if the kubelet keeps it elsewhere, set --kubelet-socket "
            "(the Helm chart's kubeletPath value, the host directory that holds it)"
        )

    # ---- one call ----------------------------------------------------------------------------------------------------
    def list_pods(self) -> tuple[PodResources, ...]:
        """Call List once on the current socket (blocking, at most `call_timeout`); raise KubeletCallError."""
        identity = self._socket_identity()
        if identity is None:
            raise KubeletCallError("UNAVAILABLE", self._missing())
        with self._lock:
            if self._stop.is_set():
                raise KubeletCallError("CANCELLED", "the client is closed")
            if self._stub is None or identity != self._channel_identity:
                self._replace_channel(identity)
            stub = self._stub
        assert stub is not None
        try:
            reply: api_pb2.ListPodResourcesResponse = stub.List(
                api_pb2.ListPodResourcesRequest(), timeout=self.call_timeout, wait_for_ready=False
            )
        except ValueError as error:  # grpc: "Cannot invoke RPC" on a channel close() has just closed
            raise KubeletCallError("CANCELLED", str(error)) from None
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            name = code.name if code is not None else "UNKNOWN"
            detail = (error.details() if isinstance(error, grpc.Call) else None) or str(error)
            raise KubeletCallError(name, detail) from None
        return pods_from_message(reply)

    # ---- the timer ---------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            identity = self._socket_identity()
            if identity is None:
                self._drop_channel()
                self._record_failure(self._missing(), called=False)
                self._wait(None, timeout=None)  # until the socket appears (or close())
                continue
            started = self._clock()
            try:
                pods = self.list_pods()
            except KubeletCallError as error:
                if self._stop.is_set():
                    return
                failures += 1
                self._record_failure(str(error), called=True, duration=self._clock() - started)
                delay = self.backoff.delay(failures, self._rng.random)
            else:
                failures = 0
                self._record_success(pods, duration=self._clock() - started)
                delay = self.interval
            self._wait(identity, timeout=delay)

    def _wait(self, identity: _SocketIdentity | None, timeout: float | None) -> None:
        """Sleep until `timeout` passes, the socket appears, vanishes or is replaced, or someone wakes the timer."""
        deadline = None if timeout is None else self._clock() + timeout
        while not self._stop.is_set():
            remaining = self.socket_poll if deadline is None else min(self.socket_poll, deadline - self._clock())
            if remaining <= 0:
                return
            if self._wake.wait(remaining):
                self._wake.clear()
                return
            current = self._socket_identity()
            if current != identity:
                if current is not None:
                    log.info("kubelet socket %s (re)appeared: listing pod resources now", self.socket_path)
                return

    def _record_success(self, pods: tuple[PodResources, ...], duration: float) -> None:
        old = self._state
        if not old.up:
            log.info("kubelet pod-resources List answered: %d pods", len(pods))
        self._state = replace(
            old,
            pods=pods,
            listed_at=self._clock(),
            up=True,
            calls_total=old.calls_total + 1,
            last_error=None,
            last_duration_seconds=duration,
        )
        self._answered.set()

    def _record_failure(self, message: str, *, called: bool, duration: float = 0.0) -> None:
        old = self._state
        if old.up or old.last_error is None:
            log.warning("%s; keeping the last pod mapping", message, extra=fields(reason=message))
        self._state = replace(
            old,
            up=False,
            calls_total=old.calls_total + (1 if called else 0),
            errors_total=old.errors_total + 1,
            last_error=message,
            last_duration_seconds=duration,
        )
        self._answered.set()

    # ---- the channel -------------------------------------------------------------------------------------------------
    def _socket_identity(self) -> _SocketIdentity | None:
        try:
            st = os.stat(self.socket_path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _replace_channel(self, identity: _SocketIdentity) -> None:
        """Open a channel to the socket as it is now (called with the lock held)."""
        if self._channel is not None:
            self._channel.close()
        options = [
            ("grpc.max_receive_message_length", self.max_receive_bytes),
            ("grpc.enable_retries", 0),  # retries are ours, with backoff
            ("grpc.use_local_subchannel_pool", 1),  # a new channel must not reuse the old socket's connection
            ("grpc.initial_reconnect_backoff_ms", 500),
            ("grpc.max_reconnect_backoff_ms", 5000),
        ]
        self._channel = grpc.insecure_channel(f"unix:{self.socket_path.absolute()}", options=options)
        # the stub is made here, under the lock, never beside a close(): grpc registers its method on the channel,
        # which is not thread-safe against closing it (a segfault in grpc's core when close() won the race)
        self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]
        self._channel_identity = identity

    def _drop_channel(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = None
            self._stub = None
            self._channel_identity = None
