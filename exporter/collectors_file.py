"""`--collectors FILE`: which measurements are exported.

Two formats, line by line, mixable in one file:
- ours: one catalogue key (`gpu_util`) or metric name of either dialect (`DCGM_FI_DEV_GPU_UTIL`,
  `nvidia_gpu_utilization_ratio`, or a counter's family name without `_total`) per line; `#` starts a comment;
- dcgm-exporter's counters CSV: `DCGM_FI_DEV_GPU_UTIL, gauge, help text`; lines starting with `#` are comments.
  Its type column is honoured in the dcgm dialect (a field listed as `counter` is published as a counter, as
  dcgm-exporter does), and former field names (`DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`) select what their current name
  (`DCGM_FI_DEV_CLOCKS_EVENT_REASONS`) does.
So a user migrating from dcgm-exporter keeps the file they maintain. DCGM fields we cannot provide are collected in
`Selection.unsupported` (the CLI names them once in the log); anything else we do not know is an error, on one line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from exporter.catalogue import DCGM_FORMER_NAMES, MEASUREMENTS, Measurement, MetricType
from toolkit.inputfiles import InputFileError, read_input_text

CSV_TYPES = frozenset({"gauge", "counter", "label"})
MAX_COLLECTORS_BYTES = 1024 * 1024  # dcgm-exporter's default counters file is about 6 KB
# dcgm-exporter fields of type `label` that we always put on dcgm series anyway
PROVIDED_LABEL_FIELDS = frozenset({"DCGM_FI_DRIVER_VERSION"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SelectionError(ValueError):
    """A `--collectors` file that cannot be used, as one line."""


@dataclass(frozen=True, slots=True)
class Selection:
    keys: frozenset[str]  # catalogue keys to export
    unsupported: tuple[str, ...]  # names in the file we cannot provide, in file order, each once
    # catalogue key -> the type the CSV gives it (dcgm dialect); empty without a CSV
    types: Mapping[str, MetricType] = field(default_factory=lambda: MappingProxyType({}))


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
    for former, current in DCGM_FORMER_NAMES.items():
        found.setdefault(former, set()).update(found.get(current, ()))
    return MappingProxyType({name: frozenset(keys) for name, keys in found.items()})


NAME_INDEX: Mapping[str, frozenset[str]] = _index()  # any accepted name -> the catalogue keys it selects


def parse_selection(text: str, origin: str = "--collectors") -> Selection:
    """Parse the file's text. Raises SelectionError("<origin> line N: ...") on the first bad line."""
    keys: set[str] = set()
    unsupported: dict[str, None] = {}
    types: dict[str, MetricType] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{origin} line {number}"
        is_csv = "," in line.partition("#")[0]  # a comment in our format may hold commas; a CSV help text may hold #
        kind = ""
        if is_csv:
            name, _, rest = (part.strip() for part in line.partition(","))
            kind = rest.partition(",")[0].strip().lower()
            if kind not in CSV_TYPES:
                raise SelectionError(
                    f"{where}: {kind!r} is not a dcgm-exporter metric type (expected gauge, counter or label)"
                )
        else:
            name = line.partition("#")[0].strip()
        if _NAME.fullmatch(name) is None:
            raise SelectionError(f"{where}: {name!r} is not a measurement name")
        if kind == "label":  # dcgm-exporter puts label fields on every series; we provide only the driver version
            if name not in PROVIDED_LABEL_FIELDS:
                unsupported.setdefault(name, None)
            continue
        chosen = NAME_INDEX.get(name)
        if chosen is not None:
            keys.update(chosen)
            if is_csv:
                types.update(dict.fromkeys(chosen, MetricType(kind)))
        elif is_csv or name.startswith("DCGM_FI_"):
            unsupported.setdefault(name, None)
        else:
            raise SelectionError(
                f"{where}: unknown measurement {name!r} (use catalogue keys such as gpu_util, or metric names of "
                "either dialect)"
            )
    if not keys:
        missing = f" (cannot provide: {', '.join(unsupported)})" if unsupported else ""
        raise SelectionError(f"{origin}: selects no measurement we can export{missing}")
    return Selection(frozenset(keys), tuple(unsupported), MappingProxyType(types))


def load_selection(path: Path) -> Selection:
    """Read and parse a `--collectors` file. Raises SelectionError with one line when unreadable or malformed."""
    origin = f"--collectors {path}"
    try:  # a regular file of bounded size: never a FIFO that blocks start-up or /dev/zero that fills memory
        text = read_input_text(path, "--collectors", max_bytes=MAX_COLLECTORS_BYTES)
    except InputFileError as error:
        raise SelectionError(str(error)) from None
    return parse_selection(text, origin)
