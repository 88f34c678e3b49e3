"""Exponential backoff with jitter, for everything that retries: the pod watches, the kubelet client, lost GPUs.

The n-th consecutive failure waits between half and all of `min(maximum, initial * factor**(n-1))` seconds ("equal
jitter"): at least half the exponential delay, so retries do slow down, and a random rest, so many clients that failed
together do not retry together. The random draw is injected, so a test can pin every delay.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

Draw = Callable[[], float]  # a uniform draw from [0, 1], like random.random

_EXPONENT_CAP = 1024  # any factor > 1 reaches any maximum long before this


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between attempts: `initial`, then `factor` times longer per failure, at most `maximum` seconds."""

    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not (0 < self.initial <= self.maximum) or not self.factor >= 1:
            raise ValueError(
                f"backoff needs 0 < initial <= maximum and factor >= 1, got {self.initial}, {self.maximum}, "
                f"{self.factor}"
            )

    def ceiling(self, failures: int) -> float:
        """The longest wait after `failures` consecutive failures (0 before any)."""
        if failures <= 0:
            return 0.0
        try:
            grown = self.initial * self.factor ** min(failures - 1, _EXPONENT_CAP)
        except OverflowError:
            return self.maximum
        return min(self.maximum, grown)

    def delay(self, failures: int, draw: Draw = random.random) -> float:
        """The wait after `failures` consecutive failures: between half the ceiling and the ceiling."""
        ceiling = self.ceiling(failures)
        return ceiling / 2 + min(1.0, max(0.0, draw())) * ceiling / 2


class RetrySchedule:
    """When to try again, on the caller's clock: `due(now)` says whether an attempt may run, `failed(now)` schedules
    the next one after a failure, `reset()` (after a success) starts over. Not thread-safe: one owner."""

    __slots__ = ("_delay", "_draw", "_failures", "_next_at", "backoff")

    def __init__(self, backoff: Backoff, draw: Draw = random.random) -> None:
        self.backoff = backoff
        self._draw = draw
        self._failures = 0
        self._delay = 0.0
        self._next_at: float | None = None

    @property
    def delay(self) -> float:
        """The wait scheduled by the last failure (0 before any)."""
        return self._delay

    @property
    def failures(self) -> int:
        return self._failures

    def due(self, now: float) -> bool:
        return self._next_at is None or now >= self._next_at

    def failed(self, now: float) -> float:
        """Record a failed attempt at `now`; returns when the next one is due."""
        self._failures += 1
        self._delay = self.backoff.delay(self._failures, self._draw)
        self._next_at = now + self._delay
        return self._next_at

    def reset(self) -> None:
        self._failures = 0
        self._delay = 0.0
        self._next_at = None
