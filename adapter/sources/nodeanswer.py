"""A node's answer: one `/pods` document as the direct source keeps it, its pods' values worked out per metric.

An answer keeps the bytes its document came in, not the decoded document: a decoded document holds tuples per pod that
the garbage collector tracks from the moment they are made, and a fleet's current documents kept decoded made the
collector's young passes long (docs/decisions/2026-11-28-adapter-hot-path.md). The document is read again from its
bytes when a metric not worked out yet, or device by device samples, are asked for.

Times in a document are the exporter's; an answer places them on the adapter's clock by the offset between the
exporter's "now" when it answered and the adapter's when the answer arrived (`exporter_clock_offset`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from adapter.metrics_config import Figure, MetricDefinition
from adapter.sources.device_figures import listed_saturation, listed_values, pod_sample
from adapter.sources.metricsource import ListedValues, PodKey, PodSample
from toolkit.pods_contract import NodePods

Namespaces = frozenset[str] | None  # what a document carries: these namespaces' pods, or every pod (None)
RereadDocument = Callable[[bytes], NodePods]  # a document again from the bytes it came in


def covers(carried: Namespaces, namespace: str | None) -> bool:
    """Whether a document carrying `carried` answers a question about `namespace` (None: several namespaces)."""
    if carried is None:
        return True
    return namespace is not None and namespace in carried


class NodeAnswer:
    """One node's `/pods` document: the bytes it came in, what it carries, and each pod's value of a metric, worked
    out once per metric.

    The values of `worked_out` are worked out at once, from the document at hand (the metrics queries are known to
    ask about); those of any other metric on first use, from the document read again. Device by device samples (for a
    metricLabelSelector or an object's metric) are worked out on first use, and the document is kept from then on.
    """

    __slots__ = (
        "_document",
        "_drivers",
        "_generated_at",
        "_offset",
        "_reread",
        "_samples",
        "_source",
        "_values",
        "carried",
        "interval_seconds",
        "node",
    )

    def __init__(
        self,
        document: NodePods,
        source: bytes,
        reread: RereadDocument,
        *,
        clock_offset: float = 0.0,
        carried: Namespaces = None,
        worked_out: Iterable[MetricDefinition] = (),
    ) -> None:
        """`source` and `reread`: `reread(source)` is `document` again. `clock_offset`: seconds to add to the
        document's times to place them on the adapter's clock. `carried`: the namespaces the document was asked for
        (None: the whole document)."""
        self.node = document.node
        self.interval_seconds = document.interval_seconds
        self._generated_at = document.generated_at.timestamp()
        self.carried = carried
        self._source = source
        self._reread = reread
        self._document: NodePods | None = None  # kept once samples are asked for
        self._offset = clock_offset
        self._values: dict[str, ListedValues] = {}  # by metric name (a definition hashes slowly)
        self._samples: dict[str, dict[PodKey, PodSample]] = {}
        self._drivers: dict[str, Mapping[str, int]] = {}  # a saturation metric's pods by driving term
        for metric in worked_out:
            self._work_out(metric, document)

    def document(self) -> NodePods:
        """The document, decoded again unless samples were asked for (then it is kept)."""
        return self._document if self._document is not None else self._reread(self._source)

    def values(self, metric: MetricDefinition) -> ListedValues:
        """Each listed pod's value of `metric` and its uid, by namespace and pod name."""
        found = self._values.get(metric.name)
        if found is None:
            found = self._work_out(metric, self.document())
        return found

    def drivers(self, metric: MetricDefinition) -> Mapping[str, int] | None:
        """How many of the listed pods each term of the saturation figure `metric` drives, once its values are worked
        out (None before: asking here works nothing out)."""
        return self._drivers.get(metric.name)

    def _work_out(self, metric: MetricDefinition, document: NodePods) -> ListedValues:
        if metric.figure is Figure.SATURATION:
            values, self._drivers[metric.name] = listed_saturation(
                metric, document.pods, self._offset, self._generated_at
            )
        else:
            values = listed_values(metric, document.pods, self._offset, self._generated_at)
        self._values[metric.name] = values
        return values

    def samples(self, metric: MetricDefinition) -> Mapping[PodKey, PodSample]:
        """Each listed pod's sample of `metric`, device by device, by (namespace, name)."""
        found = self._samples.get(metric.name)
        if found is None:
            document = self._document = self.document()
            found = {}
            for pod in document.pods:
                sample = pod_sample(document.node, pod, metric, self._offset, self._generated_at)
                if sample is not None:
                    found[(pod.namespace, pod.name)] = sample
            self._samples[metric.name] = found
        return found


def exporter_clock_offset(document: NodePods, exporter_now: float | None, received: float) -> float:
    """Seconds to add to the document's times to place them on the adapter's clock (`received`: when the answer
    arrived, on the adapter's wall clock; `exporter_now`: when the exporter answered, on its own clock, from its
    answered-at or `Date` header).

    The exporter's "now" is taken as the later of what it said and the document's `generated_at` (the snapshot's time,
    at most one interval early; no pod in it is sampled later, see toolkit.pods_contract), so an exporter that says
    nothing of its time is taken to answer at once. A figure sampled `age` seconds before that "now" on the exporter's
    clock was sampled `age` seconds before `received` on ours, whatever the two clocks say: ages are the exporter's
    own, and no time from the exporter's clock reaches an HPA. A document dated in the future only makes its own
    figures look as fresh as it says they are, never fresher than "just now".
    """
    generated = document.generated_at.timestamp()
    return received - (generated if exporter_now is None else max(generated, exporter_now))
