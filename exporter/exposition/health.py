"""The exporter's own series (`gpu_pulse_*`, and the standard `process_*` ones), identical in both dialects.

The age of the data is `time() - gpu_pulse_snapshot_timestamp_seconds`: the exposition is rendered once per snapshot
and then served as is, so a live "age" value could not be correct on every scrape; the timestamp always is.
"""

from __future__ import annotations

from exporter.catalogue import (
    SELF_BUILD_INFO,
    SELF_COLLECTOR_DURATION,
    SELF_COLLECTOR_ERRORS,
    SELF_COLLECTOR_SUCCESS,
    SELF_CONNECTIONS,
    SELF_CONNECTIONS_ACCEPTED,
    SELF_CONNECTIONS_CLOSED,
    SELF_CONNECTIONS_MAX,
    SELF_KUBELET_MAPPING_AGE,
    SELF_KUBELET_UP,
    SELF_NVML_ERRORS,
    SELF_NVML_STALLED,
    SELF_NVML_UP,
    SELF_POLL_INTERVAL,
    SELF_PROCESS_VISIBILITY,
    SELF_SNAPSHOT_TIMESTAMP,
    SELF_UNAVAILABLE,
    Dialect,
    MetricType,
)
from exporter.exposition.devices import Families
from exporter.exposition.families import FamilyHeader
from exporter.exposition.textformat import counter_value_is_valid, format_value, label_pairs
from exporter.snapshot import CollectorStatus, MigIdentity, Snapshot
from toolkit.connections import CLOSED_REASONS_HELP, ConnectionStats
from toolkit.process import PROCESS_SERIES, ProcessFigures

G, C = MetricType.GAUGE, MetricType.COUNTER
BUILD_INFO = FamilyHeader.of(SELF_BUILD_INFO, G, "gpu-pulse exporter build information (value 1).")
SUCCESS = FamilyHeader.of(SELF_COLLECTOR_SUCCESS, G, "1 if the collector's last run succeeded, else 0.")
DURATION = FamilyHeader.of(SELF_COLLECTOR_DURATION, G, "How long the collector's last run took, in seconds.")
ERRORS = FamilyHeader.of(SELF_COLLECTOR_ERRORS, C, "Failed collector runs since the exporter started.")
TIMESTAMP = FamilyHeader.of(
    SELF_SNAPSHOT_TIMESTAMP, G, "Wall-clock time the served snapshot was taken, in seconds since the epoch."
)
INTERVAL = FamilyHeader.of(SELF_POLL_INTERVAL, G, "The configured poll interval, in seconds.")
NVML_ERRORS = FamilyHeader.of(SELF_NVML_ERRORS, C, "NVML errors per device since the exporter started, by NVML error.")
STALLED = FamilyHeader.of(
    SELF_NVML_STALLED,
    G,
    "Seconds an NVML call on a GPU has been running past the collector's bound (a hung driver call), or, as "
    'call="gsp_rpc_timeout", since the kernel log reported the GPU\'s GSP timing out (Xid 119; the GPU is not '
    "called for a while after); the GPU is reported down meanwhile, the other GPUs keep reporting.",
)
UNAVAILABLE = FamilyHeader.of(
    SELF_UNAVAILABLE,
    G,
    "A measurement (catalogue key, or the dcgm field name of one gpu-pulse never serves) this GPU or MIG instance "
    "cannot give, and why (value 1): gpm_needs_hopper, per_mig_instance, not_per_mig_instance, mig_enabled, "
    "needs_mig_monitor_privilege, ecc_disabled, not_supported, driver_lacks_function, no_permission, not_in_nvml, "
    "not_provided.",
)
VISIBILITY = FamilyHeader.of(
    SELF_PROCESS_VISIBILITY,
    G,
    "1 if the exporter sees other pods' GPU processes, 0 if it cannot (PID namespace: shared GPUs stay "
    "unattributed; /readyz says why); absent until a busy GPU allows a verdict.",
)
NVML_UP = FamilyHeader.of(
    SELF_NVML_UP,
    G,
    "1 while NVML is usable, 0 while it is not (driver not loaded yet, driver/library version mismatch, no "
    "libnvidia-ml): then no GPU is reported, /readyz fails and says why, and NVML is tried again with backoff.",
)
KUBELET_UP = FamilyHeader.of(SELF_KUBELET_UP, G, "1 while the last kubelet pod-resources List succeeded, else 0.")
KUBELET_AGE = FamilyHeader.of(SELF_KUBELET_MAPPING_AGE, G, "Age of the pod-to-device mapping in use, in seconds.")
CONNECTIONS = FamilyHeader.of(SELF_CONNECTIONS, G, "HTTP connections open, as of the snapshot.")
CONNECTIONS_MAX = FamilyHeader.of(SELF_CONNECTIONS_MAX, G, "The cap on open HTTP connections (--max-connections).")
CONNECTIONS_ACCEPTED = FamilyHeader.of(SELF_CONNECTIONS_ACCEPTED, C, "HTTP connections accepted since the start.")
CONNECTIONS_CLOSED = FamilyHeader.of(
    SELF_CONNECTIONS_CLOSED,
    C,
    f"HTTP connections the server closed on its own, by reason: {CLOSED_REASONS_HELP}.",
)

# the standard process series, in prometheus-client's names and words, so that common dashboards read them
PROCESS = {
    name: FamilyHeader.of(name, C if type_ == "counter" else G, help_)
    for name, (type_, help_) in PROCESS_SERIES.items()
}


class HealthSeries:
    """Renders the self-metrics of one exporter (dialect, version and interval fixed at start)."""

    def __init__(self, dialect: Dialect, version: str, interval_seconds: float) -> None:
        labels = label_pairs((("version", version), ("dialect", str(dialect))))
        self._build_line = f"{SELF_BUILD_INFO}{{{labels}}} 1\n"
        self._interval_line = f"{SELF_POLL_INTERVAL} {format_value(interval_seconds)}\n"

    def render(self, snapshot: Snapshot, out: Families) -> int:
        families: list[tuple[FamilyHeader, list[str]]] = [
            (BUILD_INFO, [self._build_line]),
            (TIMESTAMP, [f"{SELF_SNAPSHOT_TIMESTAMP} {format_value(snapshot.taken_at)}\n"]),
            (INTERVAL, [self._interval_line]),
        ]
        families += _collector_families(snapshot.collectors)
        if snapshot.nvml is not None:
            families.append((NVML_UP, [f"{SELF_NVML_UP} {1 if snapshot.nvml.up else 0}\n"]))
        errors = _nvml_error_lines(snapshot)
        if errors:
            families.append((NVML_ERRORS, errors))
        stalled = _stalled_lines(snapshot)
        if stalled:
            families.append((STALLED, stalled))
        unavailable = _unavailable_lines(snapshot)
        if unavailable:
            families.append((UNAVAILABLE, unavailable))
        if snapshot.kubelet_up is not None:
            families.append((KUBELET_UP, [f"{SELF_KUBELET_UP} {1 if snapshot.kubelet_up else 0}\n"]))
            age = snapshot.kubelet_mapping_age_seconds
            if age is not None:
                families.append((KUBELET_AGE, [f"{SELF_KUBELET_MAPPING_AGE} {format_value(age)}\n"]))
        if snapshot.connections is not None:
            families += _connection_families(snapshot.connections)
        if snapshot.process is not None:
            families += _process_families(snapshot.process)
        visibility = snapshot.process_visibility
        if visibility is not None and visibility.visible is not None:
            families.append((VISIBILITY, [f"{SELF_PROCESS_VISIBILITY} {1 if visibility.visible else 0}\n"]))
        out.extend(families)
        return sum(len(lines) for _, lines in families)


def _connection_families(stats: ConnectionStats) -> list[tuple[FamilyHeader, list[str]]]:
    closed = stats.closed_by_reason()
    return [
        (CONNECTIONS, [f"{SELF_CONNECTIONS} {stats.open}\n"]),
        (CONNECTIONS_MAX, [f"{SELF_CONNECTIONS_MAX} {stats.limit}\n"]),
        (CONNECTIONS_ACCEPTED, [f"{SELF_CONNECTIONS_ACCEPTED} {stats.accepted}\n"]),
        (
            CONNECTIONS_CLOSED,
            [
                f"{SELF_CONNECTIONS_CLOSED}{{{label_pairs((('reason', reason),))}}} {count}\n"
                for reason, count in closed
            ],
        ),
    ]


def _process_families(figures: ProcessFigures) -> list[tuple[FamilyHeader, list[str]]]:
    return [(PROCESS[name], [f"{name} {format_value(value)}\n"]) for name, value in figures.values]


def _collector_families(statuses: tuple[CollectorStatus, ...]) -> list[tuple[FamilyHeader, list[str]]]:
    by_name: dict[str, CollectorStatus] = {}
    for status in statuses:  # one series per collector name: the last status of a name wins
        by_name[status.name] = status
    if not by_name:
        return []
    success, duration, errors = [], [], []
    for name, status in by_name.items():
        labels = label_pairs((("collector", name),))
        success.append(f"{SELF_COLLECTOR_SUCCESS}{{{labels}}} {1 if status.success else 0}\n")
        duration.append(f"{SELF_COLLECTOR_DURATION}{{{labels}}} {format_value(status.duration_seconds)}\n")
        if counter_value_is_valid(status.errors_total):
            errors.append(f"{SELF_COLLECTOR_ERRORS}{{{labels}}} {format_value(status.errors_total)}\n")
    families = [(SUCCESS, success), (DURATION, duration)]
    if errors:
        families.append((ERRORS, errors))
    return families


def _nvml_error_lines(snapshot: Snapshot) -> list[str]:
    lines: list[str] = []
    seen: set[str] = set()
    for reading in snapshot.devices:
        if not reading.errors or reading.uuid in seen:
            continue
        seen.add(reading.uuid)
        ident = reading.identity
        gpu = ident.parent if isinstance(ident, MigIdentity) else ident
        for error in sorted(reading.errors):
            value = reading.errors[error]
            if not counter_value_is_valid(value):
                continue
            labels = label_pairs((("gpu", str(gpu.index)), ("uuid", reading.uuid), ("error", error)))
            lines.append(f"{SELF_NVML_ERRORS}{{{labels}}} {format_value(value)}\n")
    return lines


def _stalled_lines(snapshot: Snapshot) -> list[str]:
    lines: list[str] = []
    for reading in snapshot.devices:
        stalled = reading.stalled
        if stalled is None:
            continue
        gpu = reading.gpu
        labels = label_pairs((("gpu", str(gpu.index)), ("uuid", gpu.uuid), ("call", stalled.call)))
        lines.append(f"{SELF_NVML_STALLED}{{{labels}}} {format_value(stalled.seconds)}\n")
    return lines


def _unavailable_lines(snapshot: Snapshot) -> list[str]:
    lines: list[str] = []
    for reading in snapshot.devices:
        if not reading.unavailable or not reading.up:
            continue
        ident = reading.identity
        instance = str(ident.gpu_instance_id) if isinstance(ident, MigIdentity) else ""
        gpu = reading.gpu
        for key in sorted(reading.unavailable):
            labels = label_pairs(
                (
                    ("gpu", str(gpu.index)),
                    ("uuid", gpu.uuid),
                    ("gpu_instance", instance),
                    ("measurement", key),
                    ("reason", reading.unavailable[key]),
                )
            )
            lines.append(f"{SELF_UNAVAILABLE}{{{labels}}} 1\n")
    return lines
