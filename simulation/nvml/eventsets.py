"""NVML event sets: registrations per device and queues of pending events, with a blocking wait."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

EVENT_TYPE_XID = 0x8  # nvmlEventTypeXidCriticalError
EVENT_TYPE_GPU_UNAVAILABLE = 0x4000  # nvmlEventTypeGpuUnavailableError (nvml.h, NVML 12.8 / R570)
NO_INSTANCE = 0xFFFFFFFF
MAX_QUEUED = 1024  # events a set keeps before the oldest are dropped
_POLL_S = 0.02  # how often a waiter re-reads the (possibly simulated) clock for timeline events


class RegisteredGpuLostError(Exception):
    """A GPU registered in the set is lost and no event is pending: the wait fails with GPU_IS_LOST."""


@dataclass(frozen=True, slots=True)
class Event:
    gpu: int
    event_type: int
    data: int
    at: float  # scenario time
    instance: tuple[int, int] | None = None  # (GPU instance id, compute instance id) of a MIG instance's event


@dataclass(slots=True)
class _EventSet:
    masks: dict[int, int] = field(default_factory=dict)  # gpu index -> registered event types
    queue: deque[Event] = field(default_factory=lambda: deque(maxlen=MAX_QUEUED))


class EventSets:
    """All event sets of one simulated library. `lock` is shared with the node so delivery and waits line up."""

    def __init__(self, lock: threading.RLock) -> None:
        self._changed = threading.Condition(lock)
        self._sets: dict[int, _EventSet] = {}
        self._next = 1

    def create(self) -> int:
        with self._changed:
            n = self._next
            self._next += 1
            self._sets[n] = _EventSet()
            return n

    def free(self, n: int) -> bool:
        with self._changed:
            found = self._sets.pop(n, None) is not None
            self._changed.notify_all()
            return found

    def exists(self, n: int) -> bool:
        return n in self._sets

    def register(self, n: int, gpu: int, mask: int) -> bool:
        with self._changed:
            s = self._sets.get(n)
            if s is None:
                return False
            s.masks[gpu] = s.masks.get(gpu, 0) | mask
            return True

    def deliver(self, event: Event) -> None:
        with self._changed:
            for s in self._sets.values():
                if s.masks.get(event.gpu, 0) & event.event_type:
                    s.queue.append(event)
            self._changed.notify_all()

    def pending(self) -> int:
        """Events delivered and not yet taken by a wait, over all sets."""
        with self._changed:
            return sum(len(s.queue) for s in self._sets.values())

    def wait(
        self,
        n: int,
        timeout_s: float,
        advance: Callable[[], None],
        lost: Callable[[], Collection[int]] = tuple,
        quiet: Callable[[float], float] = lambda longest: min(longest, _POLL_S),
    ) -> Event | None:
        """The oldest pending event of set n, waiting up to timeout_s (real time); None on timeout or a freed set.

        `advance` is called while waiting so that events due on the scenario timeline are delivered even when the
        clock is simulated; `quiet(longest)` is how long to sleep before calling it again. Raises
        RegisteredGpuLostError when nothing is pending and a GPU registered in the set is among `lost()`.
        """
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                advance()
                s = self._sets.get(n)
                if s is None:
                    return None
                if s.queue:
                    return s.queue.popleft()
                if any(gpu in s.masks for gpu in lost()):
                    raise RegisteredGpuLostError
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._changed.wait(quiet(remaining))
