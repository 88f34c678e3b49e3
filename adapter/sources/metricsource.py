"""What a number source hands the API: per-pod samples with their device figures, sample times and windows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

import msgspec

from adapter.metrics_config import MetricDefinition
from adapter.selectors import Selector
from toolkit.pods import Pod

PodKey = tuple[str, str]  # (namespace, name)


class SourceUnavailableError(Exception):
    """The source could not answer at all (Prometheus down, no exporter answered): the API says 503."""


class SourceError(Exception):
    """The source answered that the question is wrong (e.g. a configured query Prometheus rejects): the API says 500."""


@dataclass(frozen=True, slots=True)
class DeviceValue:
    """One figure of one device a pod uses, in the unit of the `/pods` figure (before the metric's scale).

    `labels` are what `metricLabelSelector` matches: node, container, gpu, uuid (of the physical GPU), gpu_instance
    and mig_profile (MIG only), share.
    """

    value: Decimal
    labels: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class PodSample:
    """A pod's figures for one metric: one value per device (or a single per-pod value), with the sample time."""

    namespace: str
    name: str
    devices: tuple[DeviceValue, ...]
    sampled_at: float  # Unix seconds of the newest sample behind the figures
    window_seconds: float | None  # what the figures average over; None: the source cannot say
    uid: str | None = None  # the pod's uid when the source knows it (a re-created pod of the same name differs)


class ServedValue(msgspec.Struct, frozen=True, gc=False):
    """A metric's value for one object (a pod, a workload, a selection of pods), as the API serves it.

    One is made per pod of every document that arrives, and lives until the next. A struct with `gc=False` is never
    tracked by the garbage collector (it holds numbers only, so it takes part in no cycle), where a NamedTuple would
    live into the oldest generation and lengthen every full pass (docs/decisions/2026-11-28-adapter-hot-path.md).
    """

    value: Decimal  # in the served unit (scale applied)
    sampled_at: float  # Unix seconds of the oldest figure behind the value
    window_seconds: int


class ListedValue(msgspec.Struct, frozen=True, gc=False):
    """A pod's value of one metric as its node's document lists it, and the pod's uid there (a re-created pod of the
    same name has another). Made per pod of every document, and never tracked for the reason ServedValue is not: a dict
    of these by pod name (strings) is not tracked either."""

    value: ServedValue
    uid: str | None


ListedValues = Mapping[str, Mapping[str, ListedValue]]  # a document's values of one metric: by namespace, by pod name


class PodDirectory(Protocol):
    """The read side of the pod cache that the API and the sources use."""

    @property
    def synced(self) -> bool: ...

    @property
    def size(self) -> int: ...

    def pods_in_namespace(self, namespace: str, selector: Selector = ...) -> Sequence[Pod]:
        """The namespace's pods that `selector` picks (all of them by default), by name."""
        ...

    def all_pods(self) -> Sequence[Pod]: ...

    def get(self, namespace: str, name: str) -> Pod | None: ...

    def get_many(self, keys: Sequence[PodKey]) -> list[Pod | None]:
        """`get` for each (namespace, name), in order, read at one moment."""
        ...

    def pods_on_node(self, node: str) -> Sequence[Pod]: ...

    def pods_owned_by(self, namespace: str, kind: str, name: str) -> Sequence[Pod]: ...


class MetricSource(Protocol):
    """Where numbers come from. `samples` returns figures only for pods it has fresh figures for."""

    name: str

    async def start(self) -> None:
        """Open connections and start background work; called once the event loop runs."""

    async def close(self) -> None:
        """Stop background work and close connections."""

    async def samples(self, metric: MetricDefinition, pods: Sequence[Pod]) -> Mapping[PodKey, PodSample]:
        """Fresh figures of `metric` for those of `pods` that have them. Raises SourceUnavailableError when the source
        cannot answer at all; a partial answer (some nodes down) is not an error."""
        ...

    async def pod_values(self, metric: MetricDefinition, pods: Sequence[Pod]) -> list[ServedValue | None]:
        """Each pod's value of `metric` over all its devices (the HPA's question: `pod_value` of the pod's sample), in
        the order of `pods`; None for a pod `samples` would leave out."""
        ...

    def serves(self, metric: MetricDefinition) -> bool:
        """Whether this source can compute `metric` at all (the prometheus source needs a query)."""
        ...

    def ready(self) -> bool:
        """Whether the source answers as well as it will (the direct source: its node feeds are warm); /readyz waits
        for it, so that a replica starting or restarting is sent no question it would answer worse than its peer."""
        ...
