"""Per-pod series (`gpu_pulse_pod_*`), identical in both dialects: one series per (pod, container, GPU or MIG instance).

The `share` label says how the figure was obtained (ShareMethod); a figure that is not known is absent, never zero.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from exporter.catalogue import (
    POD_DEVICE_INFO,
    POD_ENERGY,
    POD_MEMORY_USED,
    POD_POWER,
    POD_SHARING,
    POD_UTILIZATION,
    MetricType,
)
from exporter.exposition.devices import Families
from exporter.exposition.families import FamilyHeader
from exporter.exposition.labels import pod_series_pairs
from exporter.exposition.textformat import format_value, label_pairs
from exporter.snapshot import DeviceReading, PodDeviceUse, Snapshot


@dataclass(frozen=True, slots=True)
class _PodFamily:
    header: FamilyHeader
    value: Callable[[PodDeviceUse], float | None]


# Per-pod figures are shares worked out from sampled ones: published to the precision of their source (utilization to
# a thousandth of a percent, power to the milliwatt, energy to the millijoule), not with the digits of the arithmetic.
RATIO_DIGITS = 5
MILLI_DIGITS = 3


def _ratio(use: PodDeviceUse) -> float | None:
    return None if use.utilization_percent is None else round(use.utilization_percent / 100, RATIO_DIGITS)


def _memory(use: PodDeviceUse) -> float | None:
    return use.memory_used_bytes


def _watts(use: PodDeviceUse) -> float | None:
    return None if use.power_milliwatts is None else round(use.power_milliwatts / 1000, MILLI_DIGITS)


def _joules(use: PodDeviceUse) -> float | None:
    energy = use.energy_millijoules
    return None if energy is None or not energy >= 0 else round(energy / 1000, MILLI_DIGITS)


def _one(use: PodDeviceUse) -> float | None:
    return 1


def _sharing(use: PodDeviceUse) -> float | None:
    return use.sharing_pods


G, C = MetricType.GAUGE, MetricType.COUNTER
POD_FAMILIES: tuple[_PodFamily, ...] = (
    _PodFamily(
        FamilyHeader.of(
            POD_DEVICE_INFO, G, "Which pod and container hold which GPU or MIG instance, and how its share is measured."
        ),
        _one,
    ),
    _PodFamily(
        FamilyHeader.of(
            POD_UTILIZATION, G, "The pod's part of the device's utilization, as a fraction of the whole device."
        ),
        _ratio,
    ),
    _PodFamily(FamilyHeader.of(POD_MEMORY_USED, G, "Device memory the pod uses, in bytes."), _memory),
    _PodFamily(FamilyHeader.of(POD_POWER, G, "The pod's part of the device's power draw, in watts."), _watts),
    _PodFamily(
        FamilyHeader.of(POD_ENERGY, C, "The pod's part of the device's energy since the exporter started, in joules."),
        _joules,
    ),
    _PodFamily(FamilyHeader.of(POD_SHARING, G, "How many pods hold the device this pod uses."), _sharing),
)


class PodSeries:
    """Renders the per-pod families; caches each edge's label string while the edge persists."""

    def __init__(self) -> None:
        self._cache: dict[Hashable, str] = {}

    def _edges(self, snapshot: Snapshot) -> list[tuple[PodDeviceUse, str]]:
        devices: dict[str, DeviceReading] = {d.uuid: d for d in snapshot.devices}
        seen: set[tuple[str, str, str, str]] = set()
        new: dict[Hashable, str] = {}
        edges: list[tuple[PodDeviceUse, str]] = []
        for use in snapshot.pods:
            pod = use.pod
            edge = (pod.namespace, pod.name, pod.container, use.device_uuid)
            if edge in seen:  # one series per edge: a duplicate edge would be a duplicate series
                continue
            seen.add(edge)
            device = devices.get(use.device_uuid)
            key: Hashable = (
                edge,
                use.share,
                use.claim,
                tuple(sorted(pod.labels.items())),
                None if device is None else device.identity,
                snapshot.node,
            )
            labels = new.get(key) or self._cache.get(key)
            if labels is None:
                labels = label_pairs(pod_series_pairs(use, device, snapshot.node))
            new[key] = labels
            edges.append((use, labels))
        self._cache = new
        return edges

    def render(self, snapshot: Snapshot, out: Families) -> int:
        if not snapshot.pods:
            self._cache = {}
            return 0
        edges = self._edges(snapshot)
        count = 0
        for family in POD_FAMILIES:
            name = family.header.name
            lines: list[str] = []
            for use, labels in edges:
                value = family.value(use)
                if value is not None:
                    lines.append(f"{name}{{{labels}}} {format_value(value)}\n")
            if lines:
                out.append((family.header, lines))
                count += len(lines)
        return count
