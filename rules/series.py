"""Synthetic input series for promtool tests, written once in NVML's native units and rendered in either dialect.

A test describes a device (node, index, UUID, MIG instance, the pods holding it) and the native readings of a
measurement over time; this module renders them under the dialect's names, labels and units, exactly as the exporter
would publish them, so one test body exercises both dialects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from exporter.catalogue import (
    CLOCK_EVENT_REASONS,
    DCGM_DEVICE_LABELS,
    DCGM_MIG_LABELS,
    DCGM_POD_LABELS,
    DCGM_TRAILING_LABELS,
    POD_LABELS,
    Dialect,
)
from rules.dialect import Vocabulary
from rules.model import InputSeries
from rules.units import number


@dataclass(frozen=True, slots=True)
class Run:
    """`samples` values starting at `start`, each `step` more than the last (promtool: `start+stepx(samples-1)`)."""

    start: Decimal
    step: Decimal
    samples: int


@dataclass(frozen=True, slots=True)
class Values:
    """A sequence of runs; None stands for `_` (no sample)."""

    runs: tuple[Run | None, ...]

    def then(self, other: Values) -> Values:
        return Values(self.runs + other.runs)

    def render(self, scale: Decimal = Decimal(1)) -> str:
        parts: list[str] = []
        for run in self.runs:
            if run is None:
                parts.append("_")
                continue
            start, step = number(run.start * scale), number(run.step * scale)
            sign = "" if step.startswith("-") else "+"
            parts.append(f"{start}{sign}{step}x{run.samples - 1}")
        return " ".join(parts)

    def constant_runs(self) -> tuple[tuple[Decimal, int], ...]:
        """(value, samples) per run; every run must be constant (bitmasks are not ramps)."""
        out: list[tuple[Decimal, int]] = []
        for run in self.runs:
            if run is None or run.step != 0:
                raise ValueError("a bitmask series must be made of constant runs")
            out.append((run.start, run.samples))
        return tuple(out)


def steady(value: float | str, samples: int) -> Values:
    return Values((Run(Decimal(str(value)), Decimal(0), samples),))


def ramp(start: float | str, step: float | str, samples: int) -> Values:
    return Values((Run(Decimal(str(start)), Decimal(str(step)), samples),))


def gap(samples: int = 1) -> Values:
    return Values((None,) * samples)


@dataclass(frozen=True, slots=True)
class PodKey:
    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class TestDevice:
    """A GPU, or a MIG instance of one, as a test sees it."""

    node: str = "gpu-node-1"
    gpu: int = 0
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    model: str = "NVIDIA H100 80GB HBM3"
    pci_bus_id: str = "00000000:3B:00.0"
    driver: str = "550.54.15"
    mig: tuple[int, str] | None = None  # (GPU instance id, profile)
    pods: tuple[PodKey, ...] = ()  # the pods holding it (the dcgm dialect repeats device series per pod)

    def labels(self, vocab: Vocabulary, pod: PodKey | None = None) -> dict[str, str]:
        """The device labels in the dialect's order, with the pod labels appended in the dcgm dialect."""
        if vocab.dialect is Dialect.DCGM:
            values = [str(self.gpu), self.uuid, self.pci_bus_id, f"nvidia{self.gpu}", self.model]
            names = list(DCGM_DEVICE_LABELS)
            if self.mig is not None:
                names += DCGM_MIG_LABELS
                values += [self.mig[1], str(self.mig[0])]
            names += DCGM_TRAILING_LABELS
            values += [self.node, self.driver]
            if pod is not None:
                names += DCGM_POD_LABELS
                values += [pod.container, pod.namespace, pod.pod]
            return dict(zip(names, values, strict=True))
        labels = {"gpu": str(self.gpu), "uuid": self.uuid, "model": self.model, "node": self.node}
        if self.mig is not None:
            labels |= {"gpu_instance": str(self.mig[0]), "mig_profile": self.mig[1]}
        return labels

    def normalized(self) -> dict[str, str]:
        """The labels of this device's `node_gpu:*` series (empty labels left out, as Prometheus does)."""
        labels = {"node": self.node, "gpu": str(self.gpu), "uuid": self.uuid, "model": self.model}
        if self.mig is not None:
            labels |= {"gpu_instance": str(self.mig[0]), "mig_profile": self.mig[1]}
        return labels

    def copies(self, vocab: Vocabulary) -> tuple[dict[str, str], ...]:
        """One label set per series the exporter publishes for a measurement of this device."""
        if vocab.pod_labels_on_devices and self.pods:
            return tuple(self.labels(vocab, pod) for pod in self.pods)
        return (self.labels(vocab),)


def selector(name: str, labels: Mapping[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{inner}}}"


def device_series(vocab: Vocabulary, key: str, device: TestDevice, values: Values) -> tuple[InputSeries, ...]:
    """The series the exporter would publish for measurement `key` of `device`, given native readings."""
    rendering = vocab.rendering(key)
    scale = Decimal(repr(rendering.scale))
    out: list[InputSeries] = []
    for labels in device.copies(vocab):
        labels = labels | dict(rendering.const_labels)
        if rendering.bits:
            for reason, bit in rendering.bits.items():
                bit_values = Values(
                    tuple(Run(Decimal(1 if int(v) & bit else 0), Decimal(0), n) for v, n in values.constant_runs())
                )
                out.append(
                    InputSeries(selector(rendering.name, labels | {rendering.bit_label: reason}), bit_values.render())
                )
            continue
        out.append(InputSeries(selector(rendering.name, labels), values.render(scale)))
    return tuple(out)


def xid_series(vocab: Vocabulary, device: TestDevice, xid: int, count: Values) -> tuple[InputSeries, ...]:
    """An XID counter of `device` (one series per XID seen): `nvidia_gpu_xid_errors_total`, or in the dcgm dialect
    `gpu_pulse_xid_errors_total` with the dcgm device labels, per pod copy."""
    rendering = vocab.rendering("xid_errors")
    label = rendering.vector_label or "xid"
    return tuple(
        InputSeries(selector(rendering.name, labels | {label: str(xid)}), count.render())
        for labels in device.copies(vocab)
    )


def up_series(vocab: Vocabulary, device: TestDevice, values: Values) -> InputSeries:
    return InputSeries(selector(vocab.up, device.labels(vocab)), values.render())


@dataclass(frozen=True, slots=True)
class PodEdge:
    """One (pod, container, device) edge of the per-pod series."""

    pod: PodKey
    device: TestDevice
    share: str = "exclusive"
    node: str | None = None  # default: the device's node

    def labels(self) -> dict[str, str]:
        instance, profile = ("", "") if self.device.mig is None else (str(self.device.mig[0]), self.device.mig[1])
        values = (
            self.node or self.device.node,
            self.pod.namespace,
            self.pod.pod,
            self.pod.container,
            str(self.device.gpu),
            self.device.uuid,
            instance,
            profile,
            self.share,
        )
        return dict(zip(POD_LABELS, values, strict=True))


def pod_series(name: str, edge: PodEdge, values: Values) -> InputSeries:
    """A `gpu_pulse_pod_*` series (the same in both dialects); empty labels are left out, as Prometheus stores them."""
    return InputSeries(selector(name, {k: v for k, v in edge.labels().items() if v}), values.render())


def plain_series(name: str, labels: Mapping[str, str], values: Values) -> InputSeries:
    """A series of an external source (kube-state-metrics, Prometheus itself, kube-apiserver) or a self-metric."""
    return InputSeries(selector(name, labels), values.render())


def clock_reason_mask(*reasons: str) -> int:
    mask = 0
    for reason in reasons:
        mask |= CLOCK_EVENT_REASONS[reason]
    return mask
