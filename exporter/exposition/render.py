"""Render a Snapshot into the bytes `/metrics` serves: text format 0.0.4 and OpenMetrics 1.0, from one pass.

Both formats share every sample line; only the family headers and the closing `# EOF` differ. So one pass builds the
sample lines per family, and two joins produce the two documents: OpenMetrics costs a memcpy, not a second render.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from exporter.catalogue import DCGM_HOSTNAME_LABELS, DcgmFamily, Dialect
from exporter.exposition.devices import DeviceSeries, Families
from exporter.exposition.families import plan_families
from exporter.exposition.health import HealthSeries
from exporter.exposition.inference import InferenceSeries
from exporter.exposition.labels import DEFAULT_LABEL_FIELDS
from exporter.exposition.pods import PodSeries
from exporter.exposition.textformat import OPENMETRICS_EOF
from exporter.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Rendered:
    """One snapshot's exposition in both formats (uncompressed)."""

    text: bytes  # text format 0.0.4
    openmetrics: bytes  # OpenMetrics 1.0, ending in `# EOF`
    samples: int


class ExpositionRenderer:
    """Renders snapshots of one node in one dialect. Keeps label caches between calls: use from one thread at a time.

    `selection` holds the catalogue keys to export (None: all). Up, identity, per-pod and self series are always
    rendered. `version` and `interval_seconds` feed the build-info and poll-interval self-metrics. In the dcgm dialect,
    `families` are the names, types and help texts a counters CSV gives (`canonical_too`: measurements also published
    under the catalogue's name), `label_fields` the label fields on every series ((attribute, label name); the driver
    version by default) and `hostname_label` spells the node-name label.
    """

    def __init__(
        self,
        dialect: Dialect = Dialect.DCGM,
        *,
        selection: Iterable[str] | None = None,
        interval_seconds: float = 1.0,
        version: str = "unknown",
        families: Iterable[DcgmFamily] = (),
        canonical_too: Iterable[str] = (),
        label_fields: tuple[tuple[str, str], ...] = DEFAULT_LABEL_FIELDS,
        hostname_label: str = DCGM_HOSTNAME_LABELS[0],
    ) -> None:
        if hostname_label not in DCGM_HOSTNAME_LABELS:
            raise ValueError(f"the dcgm node-name label is one of {', '.join(DCGM_HOSTNAME_LABELS)}")
        self.dialect = dialect
        plan = plan_families(dialect, selection, families=families, canonical_too=canonical_too)
        self._devices = DeviceSeries(dialect, plan, hostname_label, label_fields)
        self._pods = PodSeries()
        self._inference = InferenceSeries()
        self._health = HealthSeries(dialect, version, interval_seconds)

    def render(self, snapshot: Snapshot) -> Rendered:
        families: Families = []
        samples = self._devices.render(snapshot, families)
        samples += self._pods.render(snapshot, families)
        samples += self._inference.render(snapshot, families)
        samples += self._health.render(snapshot, families)
        text: list[str] = []
        om: list[str] = []
        for header, lines in families:
            body = "".join(lines)
            text.append(header.text)
            text.append(body)
            om.append(header.openmetrics)
            om.append(body)
        om.append(OPENMETRICS_EOF)
        # "replace": a label value that is not valid Unicode (a lone surrogate) must not fail the whole exposition
        return Rendered("".join(text).encode("utf-8", "replace"), "".join(om).encode("utf-8", "replace"), samples)


def render_exposition(
    snapshot: Snapshot,
    dialect: Dialect = Dialect.DCGM,
    selection: Iterable[str] | None = None,
    openmetrics: bool = False,
    *,
    interval_seconds: float = 1.0,
    version: str = "unknown",
) -> bytes:
    """One-off rendering of one snapshot (the poll loop keeps an ExpositionRenderer instead, for its caches)."""
    renderer = ExpositionRenderer(dialect, selection=selection, interval_seconds=interval_seconds, version=version)
    rendered = renderer.render(snapshot)
    return rendered.openmetrics if openmetrics else rendered.text
