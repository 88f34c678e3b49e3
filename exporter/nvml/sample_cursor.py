"""Which per-process utilization samples are new: NVML's `lastSeenTimeStamp`, kept from cycle to cycle, and put right
when the clock the samples are stamped with steps back.

nvml.h (nvmlDeviceGetProcessUtilization): samples are stamped with "the CPU timestamp in microseconds", and a call
returns "only samples with timestamp greater than lastSeenTimeStamp" (0: the whole buffer the driver keeps). The
driver keeps the last 10 s of samples in a ring buffer (open-gpu-kernel-modules, ctrl2080perf.h,
`NV2080_CTRL_PERF_GET_GPUMON_PERFMON_UTIL_SAMPLES_V2_PARAMS`: "This circular queue wraps around after 10 seconds of
sampling"). The stamps follow the host's wall clock: the kernel reads it with `osGetSystemTime`
(kernel-open/nvidia/os-interface.c `os_get_system_time`: `ktime_get_real_ts64`), and on GSP GPUs the GPU timer is set
from it when the driver starts the GPU (src/nvidia/src/kernel/gpu/timer/arch/hopper/timer_gh100.c,
`tmrSetCurrentTime_GH100`). So a wall-clock step back, or a GPU reset or driver reload after one, makes new samples
older than the newest one already seen: asked with that timestamp, NVML answers NOT_FOUND until the clock catches up,
which may be hours.

The cursor notices: while processes run but no new sample arrives, it asks for the whole buffer every `probe_seconds`
(on the injected monotonic clock). If even the newest sample there is older than the last one seen, the samples seen
before have all left the buffer (it drops the oldest first, and the newest of them was stamped last), so everything
there is new: the cursor counts it and carries on from its stamps. Nothing is counted twice, nothing waits for the
clock; until the old samples leave the buffer (at most its 10 s) the processes' figures are held, then unknown.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("exporter.nvml")

PROBE_SECONDS = 5.0  # how often a device whose processes send no new samples has its whole buffer looked at


class SampleCursor:
    """The last-seen sample timestamp of one device (`clock`: monotonic seconds); one thread uses it."""

    __slots__ = ("_clock", "_last_probe", "_probe_seconds", "_quiet_since", "last_seen_us", "rewinds")

    def __init__(self, clock: Callable[[], float], probe_seconds: float = PROBE_SECONDS) -> None:
        self._clock = clock
        self._probe_seconds = probe_seconds
        self.last_seen_us = 0  # microseconds, as NVML stamps samples; 0: the whole buffer
        self._quiet_since: float | None = None  # since when processes run without a new sample
        self._last_probe = float("-inf")
        self.rewinds = 0  # how often the stamps were found to have gone back

    def take(self, samples: Iterable[Any]) -> list[Any]:
        """The samples newer than the last seen, which then moves to the newest of them."""
        last = self.last_seen_us
        fresh = [s for s in samples if int(s.timeStamp) > last]
        if fresh:
            self.last_seen_us = max(int(s.timeStamp) for s in fresh)
            self._quiet_since = None
        return fresh

    def probe_due(self, running: bool) -> bool:
        """Whether to look at the whole buffer now: processes run, no new sample came for `probe_seconds`, and the
        last look is that long ago. Call once per cycle that brought no new sample."""
        if not running or self.last_seen_us == 0:
            self._quiet_since = None
            return False
        now = self._clock()
        if self._quiet_since is None:
            self._quiet_since = now
        if now - self._quiet_since < self._probe_seconds or now - self._last_probe < self._probe_seconds:
            return False
        self._last_probe = now
        return True

    def rewound(self, buffer: Iterable[Any], device: str) -> list[Any]:
        """Given the whole buffer: when its newest sample is older than the last seen, all of it is new (the stamps
        went back); otherwise nothing is."""
        samples = list(buffer)
        if not samples:
            return []
        newest = max(int(s.timeStamp) for s in samples)
        if newest >= self.last_seen_us:
            return []
        self.rewinds += 1
        log.warning(
            "%s: per-process utilization samples are stamped %.1f s before the newest one seen: the clock the driver "
            "stamps them with went back (a wall-clock step, or a GPU reset or driver reload since); counting from "
            "the new stamps",
            device,
            (self.last_seen_us - newest) / 1e6,
        )
        self.last_seen_us = newest
        self._quiet_since = None
        return samples
