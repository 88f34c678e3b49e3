"""The measurement catalogue: what is measured, in which native unit, and how each dialect names it.

One row per measurement. A row carries both dialects side by side so that they cannot drift. The snapshot stores the
native NVML unit (`Measurement.unit`); a dialect's `Rendering.scale` converts it to the unit that dialect publishes.
Several measurements may render into one metric family with constant labels (ECC correctable and uncorrectable become
`nvidia_gpu_ecc_errors_total{type=...}` in the prometheus dialect, two names in the dcgm dialect).

The rows live in one module per domain (`device`, `health`, `profiling`), dcgm-exporter's label fields in `identity`,
the other series names in `names`; `dcgm_fields` holds every DCGM field name and `dcgm_exporter_files` the counters
files of the dcgm-exporter release the dcgm dialect matches.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from exporter.catalogue.dcgm import DCGM_DEFAULT_SET, DCGM_EXPORTER_RELEASE, NEVER_SERVED, NOT_IN_NVML, NOT_PROVIDED
from exporter.catalogue.device import (
    CLOCK_EVENT_REASONS,
    CLOCKS,
    MEMORY,
    NVLINK,
    NVLINK_LINK_FIELDS,
    PCIE,
    POWER,
    TEMPERATURE,
    UTILIZATION,
    VGPU,
)
from exporter.catalogue.field_sets import ALERTS_READ, FIELD_SET_NAMES, default_reasons, field_sets
from exporter.catalogue.field_sets import DEFAULT as DEFAULT_FIELD_SET
from exporter.catalogue.health import ECC, NVLINK_ERRORS, REMAPPED_ROWS, RETIRED_PAGES, VIOLATIONS, XID
from exporter.catalogue.identity import (
    ALWAYS_LABELLED,
    BRAND_NAMES,
    INFOROM_KEYS,
    LABEL_BY_KEY,
    LABEL_FIELDS,
    UNKNOWN_BRAND,
)
from exporter.catalogue.model import (
    NEED_TEXT,
    DcgmFamily,
    Dialect,
    LabelField,
    Measurement,
    MetricType,
    Need,
    Rendering,
)
from exporter.catalogue.names import (
    DCGM_DEVICE_LABELS,
    DCGM_DRA_LABELS,
    DCGM_HOSTNAME_LABELS,
    DCGM_MIG_LABELS,
    DCGM_POD_LABELS,
    DCGM_TRAILING_LABELS,
    DCGM_UP,
    POD_CLAIM_LABELS,
    POD_DEVICE_INFO,
    POD_ENERGY,
    POD_INFERENCE_ITL,
    POD_INFERENCE_KV_CACHE,
    POD_INFERENCE_LABELS,
    POD_INFERENCE_QUEUED,
    POD_INFERENCE_REQUESTS,
    POD_INFERENCE_RUNNING,
    POD_INFERENCE_STATE,
    POD_INFERENCE_TOKENS,
    POD_INFERENCE_TTFT,
    POD_LABELS,
    POD_MEMORY_USED,
    POD_POWER,
    POD_SHARING,
    POD_UTILIZATION,
    PROM_DEVICE_LABELS,
    PROM_INFO,
    PROM_INFOROM_INFO,
    PROM_MIG_LABELS,
    PROM_UP,
    SELF_BUILD_INFO,
    SELF_COLLECTOR_DURATION,
    SELF_COLLECTOR_ERRORS,
    SELF_COLLECTOR_SUCCESS,
    SELF_CONNECTIONS,
    SELF_CONNECTIONS_ACCEPTED,
    SELF_CONNECTIONS_CLOSED,
    SELF_CONNECTIONS_MAX,
    SELF_ENGINE_BYTES,
    SELF_ENGINE_ENDPOINTS,
    SELF_ENGINE_FAILURES,
    SELF_ENGINE_READS,
    SELF_ENGINE_SECONDS,
    SELF_KUBELET_MAPPING_AGE,
    SELF_KUBELET_UP,
    SELF_NVML_ERRORS,
    SELF_NVML_STALLED,
    SELF_NVML_UP,
    SELF_POLL_INTERVAL,
    SELF_PROCESS_VISIBILITY,
    SELF_SNAPSHOT_TIMESTAMP,
    SELF_UNAVAILABLE,
)
from exporter.catalogue.profiling import GPM

MEASUREMENTS: tuple[Measurement, ...] = (
    *UTILIZATION,
    *MEMORY,
    *TEMPERATURE,
    *POWER,
    *CLOCKS,
    *PCIE,
    *ECC,
    *REMAPPED_ROWS,
    *RETIRED_PAGES,
    *VIOLATIONS,
    *XID,
    *NVLINK,
    *NVLINK_ERRORS,
    *VGPU,
    *GPM,
)

BY_KEY: Mapping[str, Measurement] = MappingProxyType({m.key: m for m in MEASUREMENTS})

# What a lost GPU's series still say (GPU_IS_LOST): the XIDs it reported, XID 79 among them as it fell off the bus.
KEPT_WHILE_DOWN = frozenset({"last_xid", "xid_errors"})

# Always collected and served, whatever `--collectors` says: what the shipped alerts read (rules/), so that a team
# feeding dcgm-exporter's default-counters.csv (which leaves ECC out, among others) does not lose its ECC, throttling
# and memory alerts without noticing; a handful of extra series per GPU is a smaller surprise than a silent alert. The
# exporter names the ones it adds beyond the file, once, at start-up.
ALWAYS_SERVED: frozenset[str] = ALERTS_READ

# Measurements read when no --collectors file is given, per `--field-set` (exporter.catalogue.field_sets)
FIELD_SETS: Mapping[str, frozenset[str]] = field_sets(MEASUREMENTS)
DEFAULT_REASONS: Mapping[str, str] = default_reasons(MEASUREMENTS)
DEFAULT_MEASUREMENTS: frozenset[str] = FIELD_SETS[DEFAULT_FIELD_SET]

__all__ = [
    "ALWAYS_LABELLED",
    "ALWAYS_SERVED",
    "BRAND_NAMES",
    "BY_KEY",
    "CLOCK_EVENT_REASONS",
    "DCGM_DEFAULT_SET",
    "DCGM_DEVICE_LABELS",
    "DCGM_DRA_LABELS",
    "DCGM_EXPORTER_RELEASE",
    "DCGM_HOSTNAME_LABELS",
    "DCGM_MIG_LABELS",
    "DCGM_POD_LABELS",
    "DCGM_TRAILING_LABELS",
    "DCGM_UP",
    "DEFAULT_FIELD_SET",
    "DEFAULT_MEASUREMENTS",
    "DEFAULT_REASONS",
    "FIELD_SETS",
    "FIELD_SET_NAMES",
    "INFOROM_KEYS",
    "KEPT_WHILE_DOWN",
    "LABEL_BY_KEY",
    "LABEL_FIELDS",
    "MEASUREMENTS",
    "NEED_TEXT",
    "NEVER_SERVED",
    "NOT_IN_NVML",
    "NOT_PROVIDED",
    "NVLINK_LINK_FIELDS",
    "POD_CLAIM_LABELS",
    "POD_DEVICE_INFO",
    "POD_ENERGY",
    "POD_INFERENCE_ITL",
    "POD_INFERENCE_KV_CACHE",
    "POD_INFERENCE_LABELS",
    "POD_INFERENCE_QUEUED",
    "POD_INFERENCE_REQUESTS",
    "POD_INFERENCE_RUNNING",
    "POD_INFERENCE_STATE",
    "POD_INFERENCE_TOKENS",
    "POD_INFERENCE_TTFT",
    "POD_LABELS",
    "POD_MEMORY_USED",
    "POD_POWER",
    "POD_SHARING",
    "POD_UTILIZATION",
    "PROM_DEVICE_LABELS",
    "PROM_INFO",
    "PROM_INFOROM_INFO",
    "PROM_MIG_LABELS",
    "PROM_UP",
    "SELF_BUILD_INFO",
    "SELF_COLLECTOR_DURATION",
    "SELF_COLLECTOR_ERRORS",
    "SELF_COLLECTOR_SUCCESS",
    "SELF_CONNECTIONS",
    "SELF_CONNECTIONS_ACCEPTED",
    "SELF_CONNECTIONS_CLOSED",
    "SELF_CONNECTIONS_MAX",
    "SELF_ENGINE_BYTES",
    "SELF_ENGINE_ENDPOINTS",
    "SELF_ENGINE_FAILURES",
    "SELF_ENGINE_READS",
    "SELF_ENGINE_SECONDS",
    "SELF_KUBELET_MAPPING_AGE",
    "SELF_KUBELET_UP",
    "SELF_NVML_ERRORS",
    "SELF_NVML_STALLED",
    "SELF_NVML_UP",
    "SELF_POLL_INTERVAL",
    "SELF_PROCESS_VISIBILITY",
    "SELF_SNAPSHOT_TIMESTAMP",
    "SELF_UNAVAILABLE",
    "UNKNOWN_BRAND",
    "DcgmFamily",
    "Dialect",
    "LabelField",
    "Measurement",
    "MetricType",
    "Need",
    "Rendering",
]
