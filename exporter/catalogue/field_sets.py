"""The field sets `--field-set` chooses from when no `--collectors` file is given, and why each default field is in.

`default` is what a team moving from dcgm-exporter has sized its Prometheus for: dcgm-exporter's default counters
(etc/default-counters.csv), plus what gpu-pulse's own shipped alerts and recording rules read, plus the static limits
the node board draws as threshold lines (one series a GPU each, never changing). `all` is every field NVML can give
(the per-link NVLink fields stay opt-in by name: 18 links make them most of a node's series). Why not everything by
default: docs/decisions/2026-11-29-default-field-set.md. Tests hold `default` to what rules/ and dashboards/ read.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from exporter.catalogue.dcgm import DCGM_DEFAULT_SET
from exporter.catalogue.model import Measurement

# What the shipped alerts read and the exporter serves whatever a --collectors file says (see ALWAYS_SERVED)
ALERTS_READ: frozenset[str] = frozenset(
    {
        "last_xid",
        "xid_errors",
        "ecc_sbe_volatile",
        "ecc_dbe_volatile",
        "remapped_rows_correctable",
        "remapped_rows_uncorrectable",
        "row_remap_failure",
        "row_remap_pending",
        "clock_event_reasons",
        "gpu_temp",
        "slowdown_temp",
        "fb_used",
        "fb_free",
        "fb_total",
        "power_usage",
        "power_limit",
    }
)
# What the shipped recording rules read beyond the alerts (rules/recording.py, rules/devices.py)
RULES_READ: frozenset[str] = frozenset({"gpu_util", "sm_active", "total_energy"})
# The static limits the node board draws as threshold lines on the panels they bound
BOARD_LIMITS: frozenset[str] = frozenset({"slowdown_temp", "shutdown_temp", "power_limit", "fb_total"})
# A dcgm field in the default counters whose prometheus dialect publishes it as other measurements
DIALECT_TWINS: Mapping[str, frozenset[str]] = MappingProxyType({"nvlink_total": frozenset({"nvlink_tx", "nvlink_rx"})})

DEFAULT = "default"
ALL = "all"
FIELD_SET_NAMES = (DEFAULT, ALL)

IN_DCGM_DEFAULTS = "dcgm-exporter's default counters"
BY_ALERTS = "read by the shipped alerts"
BY_RULES = "read by the shipped recording rules"
BY_BOARD = "a limit the node board draws"


def default_reasons(measurements: tuple[Measurement, ...]) -> Mapping[str, str]:
    """Catalogue key -> why it is in the default field set, for each measurement that is."""
    reasons: dict[str, str] = {}
    for measurement in measurements:
        if measurement.dcgm is not None and measurement.dcgm.name in DCGM_DEFAULT_SET:
            reasons[measurement.key] = IN_DCGM_DEFAULTS
            for twin in DIALECT_TWINS.get(measurement.key, ()):
                reasons[twin] = IN_DCGM_DEFAULTS
    for keys, reason in ((ALERTS_READ, BY_ALERTS), (RULES_READ, BY_RULES), (BOARD_LIMITS, BY_BOARD)):
        for key in sorted(keys):
            reasons.setdefault(key, reason)
    return MappingProxyType(reasons)


def field_sets(measurements: tuple[Measurement, ...]) -> Mapping[str, frozenset[str]]:
    """Field-set name -> the catalogue keys it reads."""
    every = frozenset(m.key for m in measurements if m.default)
    return MappingProxyType({DEFAULT: frozenset(default_reasons(measurements)) & every, ALL: every})
