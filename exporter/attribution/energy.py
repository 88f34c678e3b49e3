"""Per-pod energy: each cycle, a device's energy-counter increase is charged to its pods by their share.

NVML's total-energy counter (mJ since the driver loaded) belongs to the physical GPU. Each cycle the increase since the
previous cycle is split by the fractions `attribute` computed (exclusive 1, process shares by utilization) and added
to a running total per (pod, container, device), which therefore starts at 0 when the exporter first sees the pod on
the device and only grows: a counter. A counter reset (driver reload) or a missing reading adds nothing that cycle.
Rows that leave (the pod is gone) are forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from exporter.attribution.attribute import PodShare
from exporter.snapshot import DeviceReading, PodDeviceUse

TOTAL_ENERGY = "total_energy"  # catalogue key, mJ

_RowKey = tuple[str, str, str, str]  # namespace, pod, container, device uuid


class EnergyLedger:
    """Running per-pod energy totals. Not thread-safe: one poll loop feeds it."""

    def __init__(self) -> None:
        self._last_counter: dict[str, float] = {}  # physical GPU uuid -> mJ at the previous cycle
        self._totals: dict[_RowKey, float] = {}

    def charge(self, shares: Sequence[PodShare], devices: Iterable[DeviceReading]) -> tuple[PodDeviceUse, ...]:
        """The uses of `shares` with `energy_millijoules` filled in (None where the row has no share)."""
        increase: dict[str, float | None] = {}
        seen_counters: dict[str, float] = {}
        for device in devices:
            counter = device.values.get(TOTAL_ENERGY)
            if device.is_mig or counter is None:
                continue
            previous = self._last_counter.get(device.uuid)
            seen_counters[device.uuid] = counter
            increase[device.uuid] = counter - previous if previous is not None and counter >= previous else None
        self._last_counter = seen_counters

        totals: dict[_RowKey, float] = {}
        uses: list[PodDeviceUse] = []
        for share in shares:
            use = share.use
            if share.fraction is None or use.device_uuid not in increase:
                uses.append(use)
                continue
            key = (use.pod.namespace, use.pod.name, use.pod.container, use.device_uuid)
            delta = increase[use.device_uuid]
            total = self._totals.get(key, 0.0) + (delta * share.fraction if delta is not None else 0.0)
            totals[key] = total
            uses.append(replace(use, energy_millijoules=total))
        self._totals = totals
        return tuple(uses)
