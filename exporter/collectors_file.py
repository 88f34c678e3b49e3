"""`--collectors FILE`: which measurements are exported, and in the dcgm dialect under which names.

Two formats, line by line, mixable in one file:
- dcgm-exporter's counters CSV, read as dcgm-exporter 4.5.3-4.8.2 reads it (internal/pkg/counters/counter_config.go):
  `FIELD, type, help`; `#` starts a comment line. FIELD is any name DCGM knows, current or former
  (`DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`, or 1.x's `dcgm_gpu_temp`): the dcgm dialect publishes the field under the name
  as the line spells it, with the line's type and help, as dcgm-exporter does. A field listed twice is published once,
  under its first line (dcgm-exporter finds a value's counter by field id, first match). Fields of type `label` go on
  every series of the GPU as labels named like the field.
- ours: one catalogue key (`gpu_util`) or metric name of either dialect (`DCGM_FI_DEV_GPU_UTIL`,
  `nvidia_gpu_utilization_ratio`, or a counter's family name without `_total`) per line; `#` starts a comment.

A name that is no DCGM field and no name of ours is an error naming it and the nearest known spelling, as dcgm-exporter
refuses it ("could not find DCGM field"). A DCGM field gpu-pulse never serves is collected in `Selection.unserved`
with the reason; the exporter names those, and the fields a GPU cannot give, once at start-up.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from exporter.catalogue import (
    LABEL_FIELDS,
    MEASUREMENTS,
    NEVER_SERVED,
    NOT_PROVIDED,
    DcgmFamily,
    Measurement,
    MetricType,
)
from exporter.catalogue.dcgm_fields import EXPORTER_FIELDS, field_id, nearest
from toolkit.inputfiles import InputFileError, read_input_text

CSV_TYPES = frozenset({"gauge", "counter", "label"})
MAX_COLLECTORS_BYTES = 1024 * 1024  # dcgm-exporter's default counters file is about 6 KB
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SelectionError(ValueError):
    """A `--collectors` file that cannot be used, as one line."""


@dataclass(frozen=True, slots=True)
class Selection:
    keys: frozenset[str]  # catalogue keys to collect and export
    # dcgm families the file names, one per DCGM field, in file order (empty when it names none)
    families: tuple[DcgmFamily, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()  # label fields asked for: (catalogue key, label name as spelled)
    unserved: tuple[tuple[str, str], ...] = ()  # (name as listed, reason) of fields gpu-pulse never serves

    @property
    def unsupported(self) -> tuple[str, ...]:
        """The names of `unserved`, in file order."""
        return tuple(name for name, _ in self.unserved)


def _names(measurement: Measurement) -> list[str]:
    names = [measurement.key]
    for rendering in (measurement.dcgm, measurement.prometheus):
        if rendering is not None:
            names.append(rendering.name)
            if rendering.name.endswith("_total"):
                names.append(rendering.name.removesuffix("_total"))
    return names


def _index() -> Mapping[str, frozenset[str]]:
    found: dict[str, set[str]] = {}
    for measurement in MEASUREMENTS:
        for name in _names(measurement):
            found.setdefault(name, set()).add(measurement.key)
    return MappingProxyType({name: frozenset(keys) for name, keys in found.items()})


NAME_INDEX: Mapping[str, frozenset[str]] = _index()  # a catalogue key or metric name -> the catalogue keys it selects
# DCGM field id -> the catalogue keys it selects, and the one its dcgm family publishes
BY_FIELD: Mapping[int, frozenset[str]] = MappingProxyType(
    {
        fid: frozenset(m.key for m in MEASUREMENTS if fid in m.dcgm_fields)
        for fid in {fid for m in MEASUREMENTS for fid in m.dcgm_fields}
    }
)
_FAMILY_OF_FIELD: Mapping[int, Measurement] = MappingProxyType(
    # the first measurement of a field id names its family (DCGM_FI_DEV_XID_ERRORS is the last XID, not the count)
    {m.dcgm_fields[0]: m for m in reversed(MEASUREMENTS) if m.dcgm is not None and m.dcgm_fields}
)
_LABEL_OF_FIELD: Mapping[int, str] = MappingProxyType({f.dcgm_field: f.key for f in LABEL_FIELDS})


class _Parse:
    """What the lines selected so far."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.families: dict[int, DcgmFamily] = {}
        self.labels: dict[str, str] = {}
        self.unserved: dict[str, str] = {}

    def dcgm_field(self, name: str, fid: int, kind: str, help_: str, where: str) -> None:
        """A DCGM field by a name DCGM knows; `kind` and `help_` empty when our format named it."""
        label = _LABEL_OF_FIELD.get(fid)
        if label is not None:  # a string: always a label, whatever type the line gives (a sample cannot hold it)
            self.labels.setdefault(label, name)
            return
        if kind == "label":
            raise SelectionError(f"{where}: {name} is a measurement, not a label field: give it type gauge or counter")
        family = _FAMILY_OF_FIELD.get(fid)
        keys = BY_FIELD.get(fid)
        if keys is None:
            self.unserved.setdefault(name, NOT_PROVIDED)
            return
        self.keys.update(keys)
        if family is not None and family.dcgm is not None and fid not in self.families:
            self.families[fid] = DcgmFamily(
                family.key,
                name,
                MetricType(kind) if kind else family.dcgm.type,
                help_ or family.dcgm.help,
            )

    def selection(self, origin: str) -> Selection:
        if not self.keys and not self.labels:
            missing = f" (cannot provide: {', '.join(self.unserved)})" if self.unserved else ""
            raise SelectionError(f"{origin}: selects no measurement we can export{missing}")
        return Selection(
            frozenset(self.keys),
            tuple(self.families.values()),
            tuple(self.labels.items()),
            tuple(self.unserved.items()),
        )


def _unknown(where: str, name: str) -> SelectionError:
    guess = nearest(name) or _nearest_of_ours(name)
    hint = f" (did you mean {guess}?)" if guess else ""
    return SelectionError(
        f"{where}: {name!r} is no dcgm field and no gpu-pulse measurement{hint}; use DCGM field names as dcgm-exporter "
        "does, or catalogue keys and metric names of either dialect"
    )


def _nearest_of_ours(name: str) -> str | None:
    found = difflib.get_close_matches(name, list(NAME_INDEX), n=1, cutoff=0.75)
    return found[0] if found else None


def parse_selection(text: str, origin: str = "--collectors") -> Selection:
    """Parse the file's text. Raises SelectionError("<origin> line N: ...") on the first bad line."""
    parse = _Parse()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{origin} line {number}"
        is_csv = "," in line.partition("#")[0]  # a comment in our format may hold commas; a CSV help text may hold #
        kind = help_ = ""
        if is_csv:
            name, _, rest = (part.strip() for part in line.partition(","))
            kind, _, help_ = (part.strip() for part in rest.partition(","))
            kind = kind.lower()
            if kind not in CSV_TYPES:
                raise SelectionError(
                    f"{where}: {kind!r} is not a dcgm-exporter metric type gpu-pulse publishes (expected gauge, "
                    "counter or label)"
                )
        else:
            name = line.partition("#")[0].strip()
        if _NAME.fullmatch(name) is None:
            raise SelectionError(f"{where}: {name!r} is not a measurement name")
        fid = field_id(name)
        if fid is not None:
            parse.dcgm_field(name, fid, kind, help_, where)
        elif name in EXPORTER_FIELDS:
            parse.unserved.setdefault(name, NEVER_SERVED[name][0])
        elif name in NAME_INDEX and kind != "label":
            parse.keys.update(NAME_INDEX[name])
        else:
            raise _unknown(where, name)
    return parse.selection(origin)


def load_selection(path: Path) -> Selection:
    """Read and parse a `--collectors` file. Raises SelectionError with one line when unreadable or malformed."""
    origin = f"--collectors {path}"
    try:  # a regular file of bounded size: never a FIFO that blocks start-up or /dev/zero that fills memory
        text = read_input_text(path, "--collectors", max_bytes=MAX_COLLECTORS_BYTES)
    except InputFileError as error:
        raise SelectionError(str(error)) from None
    return parse_selection(text, origin)
