"""What the NVML collector is told at start: which measurements and labels to read, and on what cadence.

The outside world (the pynvml module, clocks, the PID namespace, the driver's files) is injected into the collector
beside this, not held here: these are plain values a test or the CLI writes down.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from toolkit.backoff import Backoff

LOST_GPU_BACKOFF = Backoff(initial=1.0, maximum=60.0)


@dataclass(frozen=True, slots=True)
class CollectorSettings:
    """`enabled` is the set of catalogue keys to read (see `coverage.enabled_measurements`); None reads the default
    set. `labels` are the dcgm label fields asked for (catalogue keys of `exporter.catalogue.identity`): a GPU with
    no value for one says so in its `unavailable`, as it does for `unserved` (field name -> reason: fields gpu-pulse
    never serves that were asked for). A lost GPU is probed again after `lost_backoff` delays; without a usable NVML,
    nvmlInit is tried again after `driver_backoff` delays (`availability.py`)."""

    enabled: Collection[str] | None = None
    labels: Collection[str] = ()
    unserved: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    processes: bool = True
    interval_seconds: float = 1.0
    history_seconds: float = 900.0
    pcie_period_seconds: float = 5.0  # PCIe throughput blocks 20 ms per call in the driver (pcie.py)
    constant_period_seconds: float = 60.0  # the vGPU license
    layout_check_seconds: float = 10.0  # MIG mode, empty MIG slots and the GPU count
    # how long a cycle waits for a GPU's reads (real time) before it reports that GPU stalled; None: one interval
    slow_call_seconds: float | None = None
    xid_wait_ms: int = 250
    # /dev/kmsg (or a file of its records) to read the XIDs only the kernel logs from (kernel_log.py); None: not read
    kernel_log: str | None = None
    # how long a GPU whose GSP timed out (Xid 119 in the kernel log) is not called after its last timeout
    gsp_pause_seconds: float = 60.0
    lost_backoff: Backoff = LOST_GPU_BACKOFF
    driver_backoff: Backoff | None = None

    def __post_init__(self) -> None:
        if self.interval_seconds <= 0:
            raise ValueError(f"interval must be positive, got {self.interval_seconds}")

    @property
    def slow_call_deadline(self) -> float:
        return self.interval_seconds if self.slow_call_seconds is None else self.slow_call_seconds

    @property
    def pcie_every(self) -> int:
        """PCIe throughput is read every this many cycles."""
        return max(1, math.ceil(self.pcie_period_seconds / self.interval_seconds))

    @property
    def constant_every(self) -> int:
        """Slowly changing board figures are read every this many cycles."""
        return max(1, math.ceil(self.constant_period_seconds / self.interval_seconds))

    @property
    def process_hold_seconds(self) -> float:
        """How long a process keeps its last utilization figure when NVML brings no new sample (processes.py)."""
        return max(2.0, 3 * self.interval_seconds)
