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

The cursor notices at once. It remembers which samples it counted (pid and stamp) for `REMEMBER_SECONDS`, longer
than any of them stays in the buffer, and while processes run but no new sample arrives it looks at the whole buffer
(asked with 0): on the first such cycle, then up to three times more within `watch_seconds` (the caller's hold on
the last figures), then every `probe_seconds`. A sample there that it has not counted is new, whatever its stamp:
one older than the last seen means the stamps went back; the cursor counts it and carries on from it (the samples it
counted before, still in the buffer with later stamps, are then skipped by their pid and stamp). So a step back
costs no unknown figure: the new samples are found on the first cycle without one, within the hold. Nothing is
counted twice; a new sample that carries exactly the pid and stamp (to the microsecond) of one counted in the last
`REMEMBER_SECONDS` is missed, not counted twice.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("exporter.nvml")

PROBE_SECONDS = 5.0  # how often a device whose processes send no new samples has its whole buffer looked at
# how long a counted sample is remembered: the buffer's 10 s (ctrl2080perf.h, above), from the sample's stamp, which is
# no later than the cycle that counted it, plus a margin for the monotonic and the wall clock running apart
REMEMBER_SECONDS = 12.0


class SampleCursor:
    """The last-seen sample timestamp of one device, and the samples counted lately (`clock`: monotonic seconds); one
    thread uses it."""

    __slots__ = (
        "_clock",
        "_counted",
        "_counted_order",
        "_last_probe",
        "_probe_seconds",
        "_quiet_since",
        "_watch_seconds",
        "last_seen_us",
        "rewinds",
    )

    def __init__(
        self, clock: Callable[[], float], probe_seconds: float = PROBE_SECONDS, watch_seconds: float = 0.0
    ) -> None:
        self._clock = clock
        self._probe_seconds = probe_seconds
        self._watch_seconds = watch_seconds
        self.last_seen_us = 0  # microseconds, as NVML stamps samples; 0: the whole buffer
        self._quiet_since: float | None = None  # since when processes run without a new sample
        self._last_probe = float("-inf")
        self._counted: set[tuple[int, int]] = set()  # (pid, stamp) of the samples counted in the last REMEMBER_SECONDS
        self._counted_order: deque[tuple[float, tuple[int, int]]] = deque()  # (when counted, key), oldest first
        self.rewinds = 0  # how often the stamps were found to have gone back

    def take(self, samples: Iterable[Any]) -> list[Any]:
        """The samples newer than the last seen and not counted yet, which then moves to the newest of them."""
        last = self.last_seen_us
        fresh = self._uncounted(s for s in samples if int(s.timeStamp) > last)
        if fresh:
            self.last_seen_us = max(int(s.timeStamp) for s in fresh)
            self._quiet_since = None
        return fresh

    def probe_due(self, running: bool) -> bool:
        """Whether to look at the whole buffer now: processes run and no new sample came; on the first such cycle, then
        every `watch_seconds / 3` within `watch_seconds`, then every `probe_seconds`. Call once per cycle that brought
        no new sample."""
        if not running or self.last_seen_us == 0:
            self._quiet_since = None
            return False
        now = self._clock()
        if self._quiet_since is None:
            self._quiet_since = now
        quiet = now - self._quiet_since
        # within the watch, at most three looks (a cycle shorter than NVML's sampling period is often without a new
        # sample, and each look reads the whole buffer); after it, one every probe_seconds
        gap = self._watch_seconds / 3 if quiet <= self._watch_seconds else self._probe_seconds
        if quiet > 0 and now - self._last_probe < gap:
            return False
        self._last_probe = now
        return True

    def rewound(self, buffer: Iterable[Any], device: str) -> list[Any]:
        """Given the whole buffer: the samples in it not counted yet, which are new whatever their stamps. When they
        are older than the last seen, the stamps went back, and the last seen follows them."""
        last = self.last_seen_us
        fresh = self._uncounted(buffer)
        if not fresh:
            return []
        newest = max(int(s.timeStamp) for s in fresh)
        if newest < last:
            self.rewinds += 1
            log.warning(
                "%s: per-process utilization samples are stamped %.1f s before the newest one seen: the clock the "
                "driver stamps them with went back (a wall-clock step, or a GPU reset or driver reload since); "
                "counting from the new stamps",
                device,
                (last - newest) / 1e6,
            )
        self.last_seen_us = newest
        self._quiet_since = None
        return fresh

    def _uncounted(self, samples: Iterable[Any]) -> list[Any]:
        """The samples not counted in the last REMEMBER_SECONDS, now remembered as counted."""
        now = self._clock()
        counted, order = self._counted, self._counted_order
        while order and now - order[0][0] > REMEMBER_SECONDS:
            counted.discard(order.popleft()[1])
        fresh = []
        for sample in samples:
            key = (int(sample.pid), int(sample.timeStamp))
            if key not in counted:
                counted.add(key)
                order.append((now, key))
                fresh.append(sample)
        return fresh
