"""Has a GPU's MIG layout changed under us? The GPU Operator's mig-manager turns MIG on or off and destroys and
creates instances at run time, with the exporter running.

What NVML does then (modelled in simulation/machine.py `reconfigure_mig`): a destroyed instance's handle stops
answering, and a handle of a reused slot names the new instance, with its own UUID and profile. So a cached MIG
handle is trusted only while its UUID is the one read at discovery (checked every cycle, one call per instance); a
mode change shows in nvmlDeviceGetMigMode, and an instance created in an empty slot only by probing the slots: both
are asked in a `full` check, every few seconds (a GPU without MIG costs nothing in between).

A change of the MIG mode itself needs the GPU idle (nvml.h, nvmlDeviceSetMigMode: IN_USE while it is not), and this
exporter holds every GPU it reads: while it runs, a mode change stays pending (nvmlDeviceGetMigMode's pending mode
differs from the current one). The full check reports that (`on_pending`), so the log says what blocks the change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from exporter.nvml.device import GpuLostError
from exporter.nvml.discovery import MIG_ENABLED, read_uuid
from exporter.nvml.errors import Disposition, disposition, status_code
from exporter.snapshot import GpuIdentity, MigIdentity

NOT_MIG_CAPABLE = "not MIG capable"


def _lost(nvml: Any, exc: Exception) -> bool:
    return isinstance(exc, nvml.NVMLError) and disposition(status_code(exc)) is Disposition.LOST


def layout_change(
    nvml: Any,
    gpu: GpuIdentity,
    handle: Any,
    migs: Sequence[tuple[MigIdentity, Any]],
    *,
    full: bool,
    on_pending: Callable[[bool | None], None] | None = None,
) -> str | None:
    """Why the layout read at discovery no longer holds, or None while it does (NOT_MIG_CAPABLE for a GPU that has no
    MIG mode at all: the caller need not ask again). A full check tells `on_pending` the MIG mode waiting to become
    active (None when none waits). Raises GpuLostError."""
    if not full:
        return _instances_changed(nvml, migs)
    try:
        current, pending = (int(mode) for mode in nvml.nvmlDeviceGetMigMode(handle))
        enabled = current == MIG_ENABLED
    except nvml.NVMLError as exc:
        if _lost(nvml, exc):
            raise GpuLostError(status_code(exc)) from exc
        kind = disposition(status_code(exc))
        return NOT_MIG_CAPABLE if kind is Disposition.UNSUPPORTED else None
    if on_pending is not None:
        on_pending(None if pending == current else pending == MIG_ENABLED)
    if enabled != gpu.mig_enabled:
        return f"MIG was turned {'on' if enabled else 'off'}"
    if not enabled:
        return None
    changed = _instances_changed(nvml, migs)
    if changed is not None:
        return changed
    found = _occupied_slots(nvml, handle)
    if found is not None and found != len(migs):
        return f"the GPU has {found} MIG instance(s), not {len(migs)}"
    return None


def _instances_changed(nvml: Any, migs: Sequence[tuple[MigIdentity, Any]]) -> str | None:
    for identity, mig_handle in migs:
        try:
            uuid = read_uuid(nvml, mig_handle)
        except nvml.NVMLError as exc:
            if _lost(nvml, exc):
                raise GpuLostError(status_code(exc)) from exc
            return f"MIG instance {identity.gpu_instance_id} ({identity.uuid}) was destroyed"
        if uuid != identity.uuid:
            return f"MIG instance {identity.uuid} was replaced by {uuid}"
    return None


def _occupied_slots(nvml: Any, handle: Any) -> int | None:
    try:
        slots = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    except nvml.NVMLError as exc:
        if _lost(nvml, exc):
            raise GpuLostError(status_code(exc)) from exc
        return None
    found = 0
    for slot in range(slots):
        try:
            nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError as exc:
            if _lost(nvml, exc):
                raise GpuLostError(status_code(exc)) from exc
            continue
        found += 1
    return found
