"""Per-device sample buffers: a bounded ring of HistoryPoint per GPU or MIG instance, safe across threads."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

from exporter.collection import HistoryPoint


class SampleHistory:
    """The last `capacity` points of every device, by UUID. Writers (the poll thread) and readers (the HTTP page,
    per-pod window means) may run at once; readers get copies."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"history capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._rings: dict[str, deque[HistoryPoint]] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_span(cls, seconds: float, interval: float) -> SampleHistory:
        """Room for `seconds` of points taken every `interval` seconds (e.g. 15 minutes at 1 s: 900 points)."""
        if seconds <= 0 or interval <= 0:
            raise ValueError(f"history span and interval must be positive, got {seconds} and {interval}")
        return cls(max(1, round(seconds / interval)))

    def record(self, uuid: str, point: HistoryPoint) -> None:
        with self._lock:
            ring = self._rings.get(uuid)
            if ring is None:
                ring = self._rings[uuid] = deque(maxlen=self.capacity)
            ring.append(point)

    def window(self, uuid: str, since: float) -> tuple[HistoryPoint, ...]:
        """The points of `uuid` taken at or after `since`, oldest first (empty for an unknown device)."""
        with self._lock:
            ring = self._rings.get(uuid)
            if not ring:
                return ()
            if ring[0].at >= since:
                return tuple(ring)
            newer: list[HistoryPoint] = []
            for point in reversed(ring):
                if point.at < since:
                    break
                newer.append(point)
        newer.reverse()
        return tuple(newer)

    def retain(self, uuids: Iterable[str]) -> None:
        """Forget the devices not in `uuids` (after a rediscovery found them gone)."""
        keep = set(uuids)
        with self._lock:
            for uuid in [u for u in self._rings if u not in keep]:
                del self._rings[uuid]
