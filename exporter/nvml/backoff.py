"""Exponential backoff for re-probing a lost GPU, on an injected clock."""

from __future__ import annotations


class Backoff:
    """Waits `initial`, then `factor` times longer after each failure, at most `maximum` seconds.

    `due(now)` says whether the next attempt may run; `failed(now)` schedules the one after; `reset()` starts over.
    """

    __slots__ = ("_delay", "_next_at", "factor", "initial", "maximum")

    def __init__(self, initial: float = 1.0, maximum: float = 60.0, factor: float = 2.0) -> None:
        if not (0 < initial <= maximum) or factor < 1:
            raise ValueError(
                f"backoff needs 0 < initial <= maximum and factor >= 1, got {initial}, {maximum}, {factor}"
            )
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self._delay = 0.0
        self._next_at: float | None = None

    @property
    def delay(self) -> float:
        """The wait scheduled by the last failure (0 before any)."""
        return self._delay

    def due(self, now: float) -> bool:
        return self._next_at is None or now >= self._next_at

    def failed(self, now: float) -> float:
        """Record a failed attempt at `now`; returns when the next one is due."""
        self._delay = self.initial if self._delay == 0 else min(self.maximum, self._delay * self.factor)
        self._next_at = now + self._delay
        return self._next_at

    def reset(self) -> None:
        self._delay = 0.0
        self._next_at = None
