"""The render plan of one dialect: which metric families, in which order, built from which measurements.

Built once per (dialect, selection) from the catalogue. Several measurements may share a family name (with constant
labels telling them apart): they become one family with one HELP and TYPE. Everything the renderer would otherwise
recompute per sample (HELP/TYPE lines, constant-label fragments, unit conversions) is fixed here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from exporter.catalogue import MEASUREMENTS, DcgmFamily, Dialect, Measurement, MetricType, Rendering
from exporter.exposition.textformat import counter_value_is_valid, escape_label_value, family_headers, format_value


@dataclass(frozen=True, slots=True)
class FamilyHeader:
    """The `# HELP`/`# TYPE` lines of one family in both formats."""

    name: str
    text: str
    openmetrics: str

    @classmethod
    def of(cls, name: str, type_: MetricType, help_: str) -> FamilyHeader:
        text, om = family_headers(name, type_, help_)
        return cls(name, text, om)


@dataclass(frozen=True, slots=True)
class MemberPlan:
    """One measurement inside a family: how its native value becomes the published one."""

    index: int  # position among all members of the plan (the renderer caches label prefixes by it)
    key: str
    name: str  # the family name (sample name)
    counter: bool
    const: str  # `,type="correctable"`: constant labels, appended after the device labels ("" when none)
    bits: tuple[tuple[str, int], ...]  # for a bitmask: (`,reason="x"` fragment, bit value) per named bit
    vector_label: str | None  # for a vector measurement: the label its keys go under
    divisor: int  # published = native / divisor (exact where 1/scale is an integer, e.g. mW -> W)
    scale: float  # else published = native * scale
    integer: bool  # floor the published value
    plain: bool  # published exactly as measured (no conversion)
    gauge_as_is: bool  # plain and not a counter: any value is publishable as it is
    xid_labels: bool = False  # also `err_code`/`err_msg` labels from the value (dcgm's XID series)

    def publish(self, native: float) -> str | None:
        """The published value as sample text, or None when it cannot be published (a counter that is NaN or < 0)."""
        if self.plain:  # the common case: published as measured
            if self.counter and not counter_value_is_valid(native):
                return None
            return format_value(native)
        value: float = native
        if self.divisor != 1:
            value = native / self.divisor
        elif self.scale != 1.0:
            value = native * self.scale
        if self.integer and math.isfinite(value):
            value = math.floor(value)
        if self.counter and not counter_value_is_valid(value):
            return None
        return format_value(value)


@dataclass(frozen=True, slots=True)
class FamilyPlan:
    header: FamilyHeader
    type: MetricType
    members: tuple[MemberPlan, ...]


def _divisor(scale: float) -> int:
    if scale >= 1.0 or scale <= 0.0:
        return 1
    inverse = 1.0 / scale
    nearest = round(inverse)
    return nearest if abs(inverse - nearest) < 1e-9 * inverse else 1


def _member(index: int, measurement: Measurement, rendering: Rendering) -> MemberPlan:
    if rendering.xid_labels:  # the labels depend on the value: rendered one by one, never "as is"
        return replace(_plain_member(index, measurement, rendering), xid_labels=True, gauge_as_is=False)
    return _plain_member(index, measurement, rendering)


def _plain_member(index: int, measurement: Measurement, rendering: Rendering) -> MemberPlan:
    const = "".join(f',{k}="{escape_label_value(v)}"' for k, v in rendering.const_labels.items())
    bits: tuple[tuple[str, int], ...] = ()
    if rendering.bits is not None:
        bits = tuple((f',{rendering.bit_label}="{escape_label_value(n)}"', b) for n, b in rendering.bits.items())
    divisor = _divisor(rendering.scale)
    plain = divisor == 1 and rendering.scale == 1.0 and not rendering.integer
    return MemberPlan(
        index=index,
        key=measurement.key,
        name=rendering.name,
        counter=rendering.type is MetricType.COUNTER,
        const=const,
        bits=bits,
        vector_label=rendering.vector_label if measurement.vector else None,
        divisor=divisor,
        scale=1.0 if divisor != 1 else rendering.scale,
        integer=rendering.integer,
        plain=plain,
        gauge_as_is=plain and rendering.type is not MetricType.COUNTER,
    )


def _renderings(
    measurement: Measurement,
    dialect: Dialect,
    named: Mapping[str, DcgmFamily],
    canonical_too: frozenset[str],
) -> list[Rendering]:
    """The families one measurement is published in: in the dcgm dialect under the name, type and help a counters CSV
    gives it (and also under the catalogue's own name when `canonical_too` holds it), else the catalogue's."""
    rendering = measurement.rendering(dialect)
    if rendering is None or (measurement.vector and rendering.vector_label is None):
        return []
    if dialect is not Dialect.DCGM:
        return [rendering]
    family = named.get(measurement.key)
    if family is None:
        return [rendering]
    renamed = replace(rendering, name=family.name, type=family.type, help=family.help)
    if family.name != rendering.name and measurement.key in canonical_too:
        return [renamed, rendering]
    return [renamed]


def plan_families(
    dialect: Dialect,
    selection: Iterable[str] | None = None,
    measurements: tuple[Measurement, ...] = MEASUREMENTS,
    families: Iterable[DcgmFamily] = (),
    canonical_too: Iterable[str] = (),
) -> tuple[FamilyPlan, ...]:
    """Families of the catalogue measurements this dialect renders, in catalogue order.

    `selection` (catalogue keys) restricts the measurements; None means all. `families` are a counters CSV's names,
    types and help texts of dcgm families (dcgm dialect only); a measurement in `canonical_too` is published under the
    catalogue's dcgm name as well when the CSV names it otherwise (the series the shipped alerts read). Raises
    ValueError if two measurements share a family name but disagree on its type or help: that is a catalogue defect,
    found at start.
    """
    chosen = None if selection is None else frozenset(selection)
    named = {family.key: family for family in families}
    also = frozenset(canonical_too)
    grouped: dict[str, tuple[Rendering, list[MemberPlan]]] = {}
    index = 0
    for measurement in measurements:
        if chosen is not None and measurement.key not in chosen:
            continue
        for rendering in _renderings(measurement, dialect, named, also):
            first = grouped.get(rendering.name)
            if first is None:
                grouped[rendering.name] = (rendering, [_member(index, measurement, rendering)])
            else:
                if (first[0].type, first[0].help) != (rendering.type, rendering.help):
                    raise ValueError(
                        f"catalogue: family {rendering.name} is declared with different types or help texts"
                    )
                first[1].append(_member(index, measurement, rendering))
            index += 1
    return tuple(
        FamilyPlan(FamilyHeader.of(name, rendering.type, rendering.help), rendering.type, tuple(members))
        for name, (rendering, members) in grouped.items()
    )
