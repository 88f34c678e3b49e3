"""Which measurements the collector reads: the CLI's `--collectors` selection, as a set of catalogue keys."""

from __future__ import annotations

from collections.abc import Iterable

from exporter.catalogue import BY_KEY, DEFAULT_MEASUREMENTS
from exporter.nvml.fields import FIELDS, LINK_RATE_PREFIX, LINK_VECTORS, MAX_LINKS, NVLINK_TOTAL
from exporter.nvml.gpm import METRICS
from exporter.nvml.probes import PROBE_KEYS

XID_KEYS = frozenset({"xid_errors", "last_xid"})
_LINK_KEYS = frozenset({*LINK_VECTORS, *(f"{LINK_RATE_PREFIX}{link}" for link in range(MAX_LINKS))})

# Every catalogue measurement NVML gives without DCGM.
NVML_MEASUREMENTS: frozenset[str] = frozenset(
    PROBE_KEYS | FIELDS.keys() | {NVLINK_TOTAL} | _LINK_KEYS | METRICS.keys() | XID_KEYS
) & frozenset(BY_KEY)


def enabled_measurements(selection: Iterable[str] | None = None) -> frozenset[str]:
    """The measurements to read and report: the default set when `selection` is None, else those selected.

    Raises ValueError naming the first key that is not in the catalogue. Catalogue keys NVML cannot give are left out.
    """
    if selection is None:
        return DEFAULT_MEASUREMENTS & NVML_MEASUREMENTS
    chosen = frozenset(selection)
    unknown = sorted(chosen - BY_KEY.keys())
    if unknown:
        raise ValueError(f"unknown measurement {unknown[0]!r}; known: {', '.join(sorted(BY_KEY))}")
    return chosen & NVML_MEASUREMENTS
