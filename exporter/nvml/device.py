"""One cycle's reading of one GPU or MIG instance: the probes, the field batch, processes and GPM, error rules applied.

Rules: a measurement the device says NOT_SUPPORTED (or FUNCTION_NOT_FOUND) for leaves its table for good; NO_PERMISSION
is logged and counted once; any other error counts and drops only that value this cycle; a lost GPU raises
`GpuLostError` so the collector marks it down while the other GPUs keep reporting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from exporter.nvml.errors import Disposition, status_code
from exporter.nvml.faults import DeviceFaults
from exporter.nvml.fields import NVLINK_TOTAL, FieldBatch
from exporter.nvml.gpm import GpmSampler
from exporter.nvml.probes import Probe
from exporter.nvml.processes import ProcessSampler
from exporter.nvml.status import CycleStatus
from exporter.snapshot import EMPTY_REASONS, DeviceReading, GpuIdentity, MigIdentity, ProcessUsage

NO_VECTORS: Mapping[str, Mapping[str, float]] = MappingProxyType({})
MIG_MONITOR = "needs_mig_monitor_privilege"

log = logging.getLogger("exporter.nvml")


class GpuLostError(Exception):
    """The GPU stopped answering (GPU_IS_LOST or RESET_REQUIRED) during a read."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class DeviceReader:
    """Reads one device every cycle. The tables are built once; only the collector's thread calls `read`."""

    def __init__(
        self,
        nvml: Any,
        identity: GpuIdentity | MigIdentity,
        handle: Any,
        faults: DeviceFaults,
        clock: Callable[[], float],
        *,
        probes: list[tuple[Probe, tuple[tuple[int, str], ...]]],
        fields: FieldBatch | None = None,
        processes: ProcessSampler | None = None,
        gpm: GpmSampler | None = None,
        enabled: frozenset[str] = frozenset(),
        cannot_give: Mapping[str, str] | None = None,
    ) -> None:
        self.nvml = nvml
        self.identity = identity
        self.handle = handle
        self.faults = faults
        self._clock = clock
        self._probes = [entry for entry in probes if entry[0].name not in faults.unsupported]
        self._fields = fields
        self._processes = processes
        self.gpm = gpm
        self._enabled = enabled
        self._nvlink_total = NVLINK_TOTAL in enabled
        self._mig_parent = isinstance(identity, GpuIdentity) and identity.mig_enabled
        self._last_xid = "last_xid" in enabled
        self._xid_errors = "xid_errors" in enabled
        self._held: dict[str, tuple[float, ...]] = {}  # last values of probes read every Nth cycle
        self.current_call = ""  # what `read` is asking NVML now (read by the collector when a call hangs)
        # catalogue key -> what the device is asked for it (probe name or field key), to explain a refusal
        self._asked_by: dict[str, str] = {key: probe.name for probe, keep in probes for _, key in keep}
        self._asked_by.update((key, key) for key in (fields.keys if fields is not None else ()))
        self._cannot_give = dict(cannot_give or {})  # known before asking (GPM on Ampere, MIG)
        self._unavailable: Mapping[str, str] = EMPTY_REASONS
        self._reasons_seen = -1
        self._monitor_logged = False
        self._reads = 0  # cycles this reader has read: probes read every Nth cycle run on the first one

    def read(self, status: CycleStatus, xid: tuple[Mapping[str, float], int] | None = None) -> DeviceReading:
        """This cycle's reading; `xid` is ({xid: count}, last xid) when the GPU is registered for XID events.

        Raises GpuLostError when the GPU is gone.
        """
        nvml = self.nvml
        clock = self._clock
        faults = self.faults
        values: dict[str, float] = {}
        failures = 0
        started = clock()
        dropped: list[Probe] | None = None
        cycle = self._reads
        self._reads += 1
        for probe, keep in self._probes:
            if probe.every > 1 and cycle % probe.every:
                got = self._held.get(probe.name)
                if got is None:
                    continue
            else:
                self.current_call = probe.name
                try:
                    got = probe.read(nvml, self.handle)
                except nvml.NVMLError as exc:
                    kind = faults.record(probe.name, exc)
                    if kind is Disposition.LOST:
                        raise GpuLostError(status_code(exc)) from exc
                    if kind is Disposition.UNSUPPORTED:
                        dropped = [*(dropped or []), probe]
                    elif kind is Disposition.FAILED:
                        failures += 1
                    continue
                if probe.every > 1:
                    self._held[probe.name] = got
            for position, key in keep:
                values[key] = got[position]
        if dropped:
            self._probes = [entry for entry in self._probes if entry[0] not in dropped]
        now = clock()
        status.spent("nvml", now - started)
        if failures:
            status.failed("nvml", failures)

        if self._fields is not None:
            started = now
            self.current_call = "field_values"
            self._read_fields(values, status)
            now = clock()
            status.spent("fields", now - started)

        processes: tuple[ProcessUsage, ...] = ()
        if self._processes is not None:
            started = now
            self.current_call = "processes"
            try:
                found = self._processes.read(nvml, self.handle, faults)
            except nvml.NVMLError as exc:
                raise GpuLostError(status_code(exc)) from exc
            if found is None:
                if "running_processes" not in faults.unsupported:
                    status.failed("processes")
            else:
                processes = found
            now = clock()
            status.spent("processes", now - started)

        if self.gpm is not None:
            started = now
            self.current_call = "gpm"
            try:
                ok = self.gpm.read(faults, values)
            except nvml.NVMLError as exc:
                raise GpuLostError(status_code(exc)) from exc
            if not ok:
                status.failed("gpm")
            status.spent("gpm", clock() - started)

        self.current_call = ""
        vectors = NO_VECTORS
        if xid is not None:
            counts, last = xid
            if self._last_xid:
                values["last_xid"] = float(last)
            if self._xid_errors:
                vectors = MappingProxyType({"xid_errors": counts})
        return DeviceReading(
            identity=self.identity,
            up=True,
            values=MappingProxyType(values),
            vectors=vectors,
            processes=processes,
            errors=faults.view(),
            unavailable=self._explained(),
        )

    def _explained(self) -> Mapping[str, str]:
        """What this device cannot give and why; rebuilt only when the device refused something new."""
        reasons = self.faults.reasons
        if len(reasons) != self._reasons_seen:
            found = dict(self._cannot_give)
            for key, asked in self._asked_by.items():
                reason = reasons.get(asked)
                if reason is not None and key in self._enabled:
                    if self._mig_parent and reason == "not_supported":
                        reason = "mig_enabled"
                    elif self._mig_parent and reason == "no_permission":
                        reason = MIG_MONITOR
                    found[key] = reason
            if MIG_MONITOR in found.values():
                # nvml.h (nvmlEventSetWait_v2): without the privilege only whole-device events are reported
                found["mig_instance_xids"] = MIG_MONITOR
            if MIG_MONITOR in found.values() and not self._monitor_logged:
                self._monitor_logged = True
                log.warning(
                    "GPU %d (%s): MIG is on and this process lacks the MIG monitor privilege: no memory or processes "
                    "for the whole GPU, and XIDs of single MIG instances do not arrive (grant it with "
                    "NVIDIA_MIG_MONITOR_DEVICES=all and CAP_SYS_ADMIN); the instances' own figures are reported",
                    self.identity.index if isinstance(self.identity, GpuIdentity) else -1,
                    self.identity.uuid,
                )
            self._unavailable = MappingProxyType(found)
            self._reasons_seen = len(reasons)
        return self._unavailable

    def _read_fields(self, values: dict[str, float], status: CycleStatus) -> None:
        assert self._fields is not None
        if "field_values" in self.faults.unsupported:
            return
        nvml = self.nvml
        counted: dict[str, float] = {}
        try:
            self._fields.read(nvml, self.handle, self.faults, counted)
        except nvml.NVMLError as exc:
            kind = self.faults.record("field_values", exc)
            if kind is Disposition.LOST:
                raise GpuLostError(status_code(exc)) from exc
            if kind is Disposition.FAILED:
                status.failed("fields")
            return
        if self._nvlink_total and "nvlink_tx" in counted and "nvlink_rx" in counted:
            values[NVLINK_TOTAL] = counted["nvlink_tx"] + counted["nvlink_rx"]
        enabled = self._enabled
        for key, value in counted.items():
            if key in enabled:
                values[key] = value

    def close(self) -> None:
        if self.gpm is not None:
            self.gpm.close()
