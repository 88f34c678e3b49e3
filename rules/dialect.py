"""What the rules need to know about a metric dialect: series names, label names and units, read from the catalogue.

Device-level recording rules turn either dialect into the same normalized series (`node_gpu:*`, base units, labels
`node`, `gpu`, `uuid`, `gpu_instance`, `mig_profile`, `model`); every rule above them is dialect-independent.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from exporter.catalogue import BY_KEY, DCGM_UP, PROM_UP, Dialect, Rendering
from rules.units import BASE, number

# The labels of a normalized device series, in `by (...)` order. `cluster` is kept when the series carry one (an
# external or relabelled label in multi-cluster setups) and is simply absent otherwise.
DEVICE_LEVEL = ("cluster", "node", "gpu", "uuid", "gpu_instance", "mig_profile", "model")


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Names of one dialect. Metric names come from exporter/catalogue.py, so rules cannot drift from the exporter."""

    dialect: Dialect
    node: str
    uuid: str
    model: str
    gpu_instance: str
    mig_profile: str
    up: str
    pod_labels_on_devices: bool  # dcgm: device series carry container/namespace/pod, one copy per pod

    @classmethod
    def of(cls, dialect: Dialect) -> Vocabulary:
        if dialect is Dialect.DCGM:
            return cls(dialect, "Hostname", "UUID", "modelName", "GPU_I_ID", "GPU_I_PROFILE", DCGM_UP, True)
        return cls(dialect, "node", "uuid", "model", "gpu_instance", "mig_profile", PROM_UP, False)

    def rendering(self, key: str) -> Rendering:
        rendering = BY_KEY[key].rendering(self.dialect)
        if rendering is None:
            raise ValueError(f"the {self.dialect} dialect does not publish the measurement {key!r}")
        return rendering

    def name(self, key: str) -> str:
        return self.rendering(key).name

    def base_unit_factor(self, key: str) -> Decimal:
        """What this dialect's published value of `key` is multiplied by to get its base unit (rules/units.py)."""
        return BASE[BY_KEY[key].unit].factor / Decimal(repr(self.rendering(key).scale))

    def to_base_unit(self, key: str, expr: str) -> str:
        """`expr` (a value of measurement `key` in this dialect) converted to base units, exactly where possible."""
        factor = self.base_unit_factor(key)
        if factor == 1:
            return expr
        inverse = 1 / factor
        if inverse == inverse.to_integral_value():
            return f"{expr} / {number(inverse)}"
        return f"{expr} * {number(factor)}"

    def device_max(self, expr: str, level: tuple[str, ...] = DEVICE_LEVEL) -> str:
        """`max by (level)` of `expr`, `level` named in the normalized labels.

        The dcgm dialect aggregates under its own label names first and renames after, so each `label_replace` runs
        once per device over a handful of labels instead of over every per-pod copy of a device series with all its
        labels. The result is the same as renaming first: each normalized label is a copy of one dialect label, and the
        outer `max` only drops the dialect's names again (one series per group already).

        A label is copied only where its source has a value (`(.+)`): `label_replace` builds a new label set for every
        series its regex matches, and `(.*)` also matches the empty value of a whole GPU's `GPU_I_ID` and
        `GPU_I_PROFILE`, only to delete a target label the inner aggregation has already dropped. The result is the
        same; the two MIG renames of a whole GPU's series cost a lookup instead of a new label set.
        """
        by = ", ".join(level)
        if self.dialect is Dialect.PROMETHEUS:
            return f"max by ({by}) ({expr})"
        sources = {
            "node": self.node,
            "uuid": self.uuid,
            "model": self.model,
            "gpu_instance": self.gpu_instance,
            "mig_profile": self.mig_profile,
        }
        inner = f"max by ({', '.join(sources.get(label, label) for label in level)}) ({expr})"
        targets = [label for label in level if label in sources]
        return f"max by ({by}) ({self.normalize_labels(inner, targets, only_set=True)})"

    def normalize_labels(self, expr: str, targets: list[str] | None = None, *, only_set: bool = False) -> str:
        """`expr` with this dialect's device labels (those of `targets`, default all) copied to the normalized names
        (identity for prometheus). `only_set`: copy only non-empty values, for an `expr` that has none of the target
        labels (with them, an empty source would leave the target as it was instead of deleting it)."""
        if self.dialect is Dialect.PROMETHEUS:
            return expr
        pairs = (
            ("node", self.node),
            ("uuid", self.uuid),
            ("model", self.model),
            ("gpu_instance", self.gpu_instance),
            ("mig_profile", self.mig_profile),
        )
        regex = "(.+)" if only_set else "(.*)"
        for target, source in pairs:
            if targets is not None and target not in targets:
                continue
            expr = f'label_replace({expr}, "{target}", "$1", "{source}", "{regex}")'
        return expr
