"""The report's window in time: its length, the step figures are sampled at, and the time slices queries are cut into.

The step is the smallest of `STEPS` that gives at most `MAX_STEPS` steps over the window (7 days: 5 minutes, 2,016
steps), so a week or a month costs about the same per series. Every step is a whole number of seconds and the window's
end is on the step grid, so two runs over the same window ask Prometheus the same questions.
"""

from __future__ import annotations

from dataclasses import dataclass

STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MAX_STEPS = 2016
MAX_WINDOW_SECONDS = 400 * 86400


def choose_step(window_seconds: int) -> int:
    for step in STEPS:
        if window_seconds / step <= MAX_STEPS:
            return step
    return STEPS[-1]


@dataclass(frozen=True, slots=True)
class Window:
    """Steps ending at `end - k * step`: step k covers (end - (steps - k) * step, end - (steps - k - 1) * step]."""

    end: int  # Unix seconds, a multiple of step
    step: int
    steps: int

    @classmethod
    def ending(cls, end: float, seconds: int) -> Window:
        step = choose_step(seconds)
        aligned = int(end) - int(end) % step
        return cls(aligned, step, max(1, seconds // step))

    @property
    def start(self) -> int:
        """The start of the first step's range (exclusive)."""
        return self.end - self.steps * self.step

    @property
    def seconds(self) -> int:
        return self.steps * self.step

    def time_of(self, index: int) -> int:
        """The evaluation time of step `index` (its range's end)."""
        return self.start + (index + 1) * self.step

    def index_of(self, t: float) -> int:
        return round((t - self.start) / self.step) - 1

    def slices(self, steps_per_slice: int) -> list[tuple[int, int]]:
        """(first, last) step indices of consecutive slices of at most `steps_per_slice` steps."""
        size = max(1, steps_per_slice)
        return [(first, min(first + size, self.steps) - 1) for first in range(0, self.steps, size)]
