"""Build the `/pods` document (toolkit.pods_contract) from snapshots, with per-pod utilization averaged over a window.

The poll loop hands every snapshot to one `PodsDocumentBuilder`. For each (pod, container, device) row it keeps the
utilization samples of the last `window_seconds`; the document reports their mean, the span they really cover (never
more than the samples there are: a pod seen for 5 s at a 1 s interval covers 5 s, not the full window), and the time
of the newest sample. Memory, power and energy are the newest values. Rows whose pod left are forgotten. With engines
read (exporter.engines), each pod carries its engine's figures as the snapshot has them (`PodView.inference`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

from exporter.snapshot import DeviceReading, MigIdentity, PodDeviceUse, PodInference, Snapshot
from toolkit.pods_contract import ContainerView, DeviceFigures, NodePods, PodView

DEFAULT_WINDOW_SECONDS = 60.0
MEMORY_TOTAL = "fb_total"  # catalogue key, bytes

_RowKey = tuple[str, str, str, str]  # namespace, pod, container, device uuid


@dataclass(slots=True)
class _Samples:
    points: deque[tuple[float, float | None]] = field(default_factory=deque)  # (taken_at, utilization %)

    def add(self, at: float, utilization: float | None, horizon: float) -> None:
        if not self.points or self.points[-1][0] < at:
            self.points.append((at, utilization))
        while self.points and self.points[0][0] <= at - horizon:
            self.points.popleft()

    def mean(self) -> float | None:
        values = [u for _, u in self.points if u is not None]
        return sum(values) / len(values) if values else None

    def span(self, interval: float, window: float) -> float:
        """Seconds of load these samples describe: each stands for the interval before it."""
        return min(window, self.points[-1][0] - self.points[0][0] + interval)


class PodsDocumentBuilder:
    """Callable `Snapshot -> NodePods` for the loop; keeps the window buffers between calls (one caller at a time)."""

    def __init__(self, *, interval_seconds: float, window_seconds: float = DEFAULT_WINDOW_SECONDS) -> None:
        if interval_seconds <= 0 or window_seconds <= 0:
            raise ValueError("the /pods interval and window must be positive")
        self.interval = float(interval_seconds)  # JSON `1.0` for 1, as the document's type says
        self.window = float(max(window_seconds, interval_seconds))
        # bounded even if snapshots come faster than the interval (each sample then covers less than one interval)
        self._max_points = math.ceil(self.window / self.interval) + 1
        self._rows: dict[_RowKey, _Samples] = {}

    def __call__(self, snapshot: Snapshot) -> NodePods:
        devices = {d.uuid: d for d in snapshot.devices}
        rows: dict[_RowKey, _Samples] = {}
        pods: dict[tuple[str, str], list[tuple[PodDeviceUse, DeviceReading, _Samples]]] = {}
        for use in snapshot.pods:
            device = devices.get(use.device_uuid)
            if device is None:
                continue
            key = (use.pod.namespace, use.pod.name, use.pod.container, use.device_uuid)
            samples = rows.get(key) or self._rows.get(key) or _Samples(deque(maxlen=self._max_points))
            samples.add(snapshot.taken_at, use.utilization_percent, self.window)
            rows[key] = samples
            pods.setdefault((use.pod.namespace, use.pod.name), []).append((use, device, samples))
        self._rows = rows
        sampled_at = datetime.fromtimestamp(snapshot.taken_at, UTC)
        return NodePods(
            node=snapshot.node,
            generated_at=sampled_at,
            interval_seconds=self.interval,
            kubelet_up=snapshot.kubelet_up,
            pods=tuple(
                self._pod(
                    entries, sampled_at, snapshot.inference.get(key) if snapshot.engine_reads is not None else None
                )
                for key, entries in sorted(pods.items())
            ),
        )

    def _pod(
        self,
        entries: list[tuple[PodDeviceUse, DeviceReading, _Samples]],
        sampled_at: datetime,
        inference: PodInference | None,
    ) -> PodView:
        first = entries[0][0].pod
        by_container: dict[str, list[DeviceFigures]] = {}
        for use, device, samples in sorted(entries, key=lambda e: (e[0].pod.container, e[1].gpu.index, e[1].uuid)):
            by_container.setdefault(use.pod.container, []).append(self._figures(use, device, samples))
        window = min(samples.span(self.interval, self.window) for _, _, samples in entries)
        return PodView(
            namespace=first.namespace,
            name=first.name,
            uid=next((use.pod.uid for use, _, _ in entries if use.pod.uid), None),
            containers=tuple(
                ContainerView(name=name, devices=tuple(figures)) for name, figures in by_container.items()
            ),
            sampled_at=sampled_at,
            window_seconds=max(0.001, round(window, 3)),  # 15, not 14.999888896942139
            inference=None if inference is None else inference.figures,
        )

    @staticmethod
    def _figures(use: PodDeviceUse, device: DeviceReading, samples: _Samples) -> DeviceFigures:
        gpu = device.gpu
        mig = device.identity if isinstance(device.identity, MigIdentity) else None
        total = device.values.get(MEMORY_TOTAL)
        return DeviceFigures(
            uuid=device.uuid,
            gpu=gpu.index,
            gpu_uuid=gpu.uuid,
            model=gpu.model,
            gpu_instance=mig.gpu_instance_id if mig is not None else None,
            mig_profile=mig.profile if mig is not None else None,
            share=use.share.value,
            sharing_pods=max(1, use.sharing_pods),
            utilization_percent=_thousandths(samples.mean()),
            memory_used_bytes=use.memory_used_bytes,
            memory_total_bytes=None if total is None else int(total),
            power_watts=None if use.power_milliwatts is None else _thousandths(use.power_milliwatts / 1000.0),
            energy_joules=None if use.energy_millijoules is None else _thousandths(use.energy_millijoules / 1000.0),
        )


def _thousandths(value: float | None) -> float | None:
    """Figures to a thousandth: a mean of floats is 20.999999999999996 otherwise, and no reader needs more."""
    return None if value is None else round(value, 3)
