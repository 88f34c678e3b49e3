"""What the exporter serves of what was asked for, said once at start-up.

Two lines at most: the measurements added beyond a `--collectors` file because the shipped alerts read them, and,
after the first poll, every requested field this node does not serve, with the reason each GPU gave (the same reasons
`gpu_pulse_device_unavailable_info` publishes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from exporter.catalogue import ALWAYS_SERVED, BY_KEY, LABEL_BY_KEY, NEED_TEXT, NEVER_SERVED, Dialect, Rendering
from exporter.collectors_file import Selection
from exporter.snapshot import MigIdentity, Snapshot

log = logging.getLogger("exporter.fields")

# reason -> what it means, grouped as the start-up line explains it
REASONS: Mapping[str, str] = {
    "not_in_nvml": "not in NVML at all, DCGM computes it",
    "not_provided": "not computed by gpu-pulse",
    "not_supported": "not on this GPU generation, NVML says NOT_SUPPORTED",
    "driver_lacks_function": "not in this driver's NVML",
    "gpm_needs_hopper": "not on this GPU generation: GPM is Hopper and newer",
    "ecc_disabled": "ECC is off on this GPU",
    "no_permission": "needs a privilege this process lacks",
    "needs_mig_monitor_privilege": "MIG: needs the MIG monitor privilege",
    "mig_enabled": "MIG: not on a MIG-enabled GPU",
    "per_mig_instance": "MIG: given per MIG instance instead",
    "not_per_mig_instance": "MIG: not per MIG instance",
}


@dataclass(frozen=True, slots=True)
class Requested:
    """What was asked for: catalogue keys under the names the user gave them (a counters CSV's, or the dialect's)."""

    names: Mapping[str, str]  # catalogue key or label-field key -> the name to say it by
    never: Mapping[str, str]  # field name -> reason, for fields gpu-pulse never serves
    chosen: bool = True  # a --collectors file chose them (else the default set: what is missing is no surprise)


def requested(selection: Selection | None, dialect: Dialect, enabled: Iterable[str]) -> Requested:
    """The names of the requested measurements: a CSV's spelling where it gave one, else the dialect's own."""
    names: dict[str, str] = {}
    csv = {family.key: family.name for family in selection.families} if selection is not None else {}
    for key in enabled:
        rendering = BY_KEY[key].rendering(dialect)
        if rendering is None:
            continue  # not published in this dialect (a companion of another measurement)
        names[key] = csv.get(key) or _series(rendering)
    if selection is not None:
        for key, label in selection.labels:
            names[key] = label
    never = dict(selection.unserved) if selection is not None else {}
    return Requested(names, never, chosen=selection is not None)


def _series(rendering: Rendering) -> str:
    """A family's name, with the constant labels that tell its measurements apart (several share a family in the
    prometheus dialect: `nvidia_gpu_pipe_active_ratio{pipe="fp64"}`)."""
    if not rendering.const_labels:
        return rendering.name
    pairs = ",".join(f'{name}="{value}"' for name, value in sorted(rendering.const_labels.items()))
    return f"{rendering.name}{{{pairs}}}"


def added_beyond(selection: Selection | None, dialect: Dialect) -> list[str]:
    """The names of the always-served families a `--collectors` file does not publish under that name itself (none
    without a file): measurements it leaves out, and in the dcgm dialect ones it spells otherwise (a 1.x name)."""
    if selection is None:
        return []
    spelled = {family.key: family.name for family in selection.families}
    fields = {BY_KEY[family.key].dcgm_fields[0] for family in selection.families}
    names = []
    for key in sorted(ALWAYS_SERVED):
        measurement = BY_KEY[key]
        rendering = measurement.rendering(dialect)
        if rendering is None or rendering.name in names:
            continue
        renamed = dialect is Dialect.DCGM and spelled.get(key, rendering.name) != rendering.name
        # a family of its own beside the one the file spells for the same field (XIDs: the count beside the last one)
        beside = (
            dialect is Dialect.DCGM and key not in spelled and bool(fields.intersection(measurement.dcgm_fields[:1]))
        )
        if key not in selection.keys or renamed or beside:
            names.append(rendering.name)
    return names


def _why(key: str, reason: str) -> str:
    text = REASONS.get(reason, reason)
    measurement = BY_KEY.get(key)
    needs = measurement.needs if measurement is not None else LABEL_BY_KEY[key].needs if key in LABEL_BY_KEY else ()
    if reason == "not_supported" and needs:
        text += f"; given on {', '.join(NEED_TEXT[need] for need in sorted(needs))}"
    return text


def unserved_line(snapshot: Snapshot, asked: Requested) -> str | None:
    """One line naming every requested field this node does not serve, with the reason and the devices, or None."""
    found: dict[tuple[str, str, str], list[str]] = {}  # (name, key, reason) -> devices
    for reading in snapshot.devices:
        ident = reading.identity
        mig = f" MIG {ident.gpu_instance_id}" if isinstance(ident, MigIdentity) else ""
        device = f"GPU {reading.gpu.index}{mig}"
        for key, reason in reading.unavailable.items():
            name = asked.names.get(key) or (key if key in asked.never else None)
            if name is not None:
                found.setdefault((name, key, reason), []).append(device)
    if not found:
        return None
    gpus = sum(1 for reading in snapshot.devices if not reading.is_mig)
    instances = len(snapshot.devices) - gpus
    parts = []
    for (name, key, reason), devices in sorted(found.items()):
        why = _why(key, reason)
        if name in NEVER_SERVED:
            why += f": {NEVER_SERVED[name][1]}"
        parts.append(f"{name} [{why}; {_where(devices, gpus, instances)}]")
    what = "requested fields" if asked.chosen else "fields of the default set"
    return f"{what} this node does not serve: " + "; ".join(parts)


def _where(devices: list[str], gpus: int, instances: int) -> str:
    mig = sum(1 for device in devices if " MIG " in device)
    if mig == 0 and len(devices) == gpus:
        return "every GPU"
    if mig == len(devices) == instances:
        return "every MIG instance"
    shown = ", ".join(devices[:6])
    return shown if len(devices) <= 6 else f"{shown} and {len(devices) - 6} more"


def log_added(selection: Selection | None, dialect: Dialect, origin: str, *, exact: bool = False) -> None:
    """One line at start-up: the families served beyond the file (with the flag that turns that off), or, with
    `exact`, the same families left out, so that nobody waits for an alert whose series are not there."""
    added = added_beyond(selection, dialect)
    if not added:
        return
    if exact:
        log.warning(
            "%s leaves out what the shipped alerts read; served exactly (--collectors-exact), so the alerts reading "
            "these do not fire on this node: %s",
            origin,
            ", ".join(added),
        )
    else:
        log.warning(
            "%s leaves out what the shipped alerts read; serving these too: %s (--collectors-exact serves the file "
            "alone)",
            origin,
            ", ".join(added),
        )


class UnservedReport:
    """Logs `unserved_line` once, for the first snapshot published (a PollLoop `on_publish` listener): a warning
    for fields a --collectors file asked for, information for the default set's."""

    def __init__(self, asked: Requested, newest: Callable[[], Snapshot | None]) -> None:
        self._asked = asked
        self._newest = newest
        self._done = False

    def __call__(self) -> None:
        if self._done:
            return
        snapshot = self._newest()
        if snapshot is None:
            return
        self._done = True
        line = unserved_line(snapshot, self._asked)
        if line is not None:
            # a file that asks for what this node lacks deserves a warning; the default set's gaps are expected
            log.log(logging.WARNING if self._asked.chosen else logging.INFO, "%s", line)
