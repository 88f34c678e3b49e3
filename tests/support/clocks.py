"""A clock the test moves by hand: usable as a wall clock, a monotonic clock, or both at once."""

from __future__ import annotations

START = 1_760_000_000.0  # a fixed wall-clock start (2025-10-09) keeps runs reproducible


class ManualClock:
    """Seconds that move only when the test says so. Call it, or use `.time()`/`.monotonic()`."""

    def __init__(self, start: float = START) -> None:
        self.start = start
        self.now = start

    def __call__(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def at(self, scenario_seconds: float) -> None:
        """Jump to this many seconds after the start (the simulator's scenario time, for one created at the start)."""
        self.now = self.start + scenario_seconds
