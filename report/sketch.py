"""Quantiles of many values in bounded memory: counts in logarithmic bins (each bin 3% wider than the last).

A quantile is the upper edge of the bin it falls in: at most 3% above the true value, never below it (memory p99s
decide whether a workload fits a profile: an estimate may err towards "does not fit", never towards "fits"). Values
at or below `low` count as `low`'s bin floor (0 for utilization under 0.1%); above `high`, in the top bin.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

GROWTH = 1.03


class LogSketch:
    __slots__ = ("_counts", "_high", "_low", "count", "peak")

    def __init__(self, low: float, high: float) -> None:
        self._low = low
        self._high = high
        self._counts = np.zeros(self.bins(low, high) + 1, dtype=np.int32)  # bin 0: at or below `low`
        self.count = 0
        self.peak = -math.inf

    @staticmethod
    def bins(low: float, high: float) -> int:
        return math.ceil(math.log(high / low) / math.log(GROWTH))

    def add(self, values: npt.NDArray[np.float64]) -> None:
        values = values[~np.isnan(values)]
        if values.size == 0:
            return
        self.peak = max(self.peak, float(values.max()))
        index = np.zeros(values.shape, dtype=np.int64)
        above = values > self._low
        index[above] = np.minimum(
            np.ceil(np.log(values[above] / self._low) / math.log(GROWTH)).astype(np.int64), self._counts.size - 1
        )
        self._counts += np.bincount(index, minlength=self._counts.size)
        self.count += int(values.size)

    def merge(self, other: LogSketch) -> None:
        self._counts += other._counts
        self.count += other.count
        self.peak = max(self.peak, other.peak)

    def quantile(self, q: float) -> float | None:
        """The value at quantile `q` (0-1), never below the true one; None without values."""
        if self.count == 0:
            return None
        rank = max(1, math.ceil(q * self.count))
        index = int(np.searchsorted(np.cumsum(self._counts), rank))
        return 0.0 if index == 0 else min(self._low * GROWTH**index, max(self.peak, self._low))

    def histogram(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int32]]:
        """(upper edge of each bin, count) for the bins that hold values: what the plots draw."""
        edges = self._low * GROWTH ** np.arange(self._counts.size, dtype=np.float64)
        edges[0] = 0.0
        held = self._counts > 0
        return edges[held], self._counts[held]


def ratio_sketch() -> LogSketch:
    """For utilization-like ratios 0-1."""
    return LogSketch(0.001, 1.0)


def bytes_sketch() -> LogSketch:
    """For framebuffer bytes, 1 MiB to 4 TiB."""
    return LogSketch(2.0**20, 2.0**42)
