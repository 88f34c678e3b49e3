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

from exporter.catalogue import MEASUREMENTS, Need
from exporter.nvml.errors import Disposition, status_code
from exporter.nvml.faults import DeviceFaults
from exporter.nvml.fields import LINK_RATE_PREFIX, LINK_VECTORS, NVLINK_TOTAL, FieldBatch
from exporter.nvml.gpm import GpmSampler
from exporter.nvml.pcie import GpuLost, PcieSampler
from exporter.nvml.probes import Probe
from exporter.nvml.processes import ProcessSampler
from exporter.nvml.rates import NvlinkRates
from exporter.nvml.reader_plan import ReaderPlan
from exporter.nvml.status import CycleStatus
from exporter.snapshot import EMPTY_REASONS, DeviceReading, GpuIdentity, MigIdentity, ProcessUsage
from toolkit.logs import fields

NO_VECTORS: Mapping[str, Mapping[str, float]] = MappingProxyType({})
MIG_MONITOR = "needs_mig_monitor_privilege"
ECC_DISABLED = "ecc_disabled"
# what a device's refusal means, from what the catalogue says a measurement needs: nvml.h, nvmlDeviceGetTotalEccErrors
# "Requires ECC Mode to be enabled"; the calls nvml.h says are not supported on a MIG-enabled GPU's own handle
ECC_KEYS = frozenset(m.key for m in MEASUREMENTS if Need.ECC in m.needs)
NOT_WITH_MIG = frozenset(m.key for m in MEASUREMENTS if Need.NO_MIG in m.needs)

log = logging.getLogger("exporter.nvml")


class GpuLostError(Exception):
    """The GPU stopped answering (GPU_IS_LOST or RESET_REQUIRED) during a read."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class DeviceReader:
    """Reads one device every cycle, as its plan says (`reader_plan.py`); only the device's thread calls `read`."""

    def __init__(
        self,
        nvml: Any,
        identity: GpuIdentity | MigIdentity,
        handle: Any,
        faults: DeviceFaults,
        clock: Callable[[], float],
        plan: ReaderPlan,
        *,
        processes: ProcessSampler | None = None,
        gpm: GpmSampler | None = None,
        pcie: PcieSampler | None = None,
        enabled: frozenset[str] = frozenset(),
        ecc_enabled: bool = True,
    ) -> None:
        self.nvml = nvml
        self.identity = identity
        self.handle = handle
        self.faults = faults
        self._clock = clock
        self._probes = list(plan.probes)
        fields = FieldBatch(plan.fields) if plan.fields else None
        self._fields = fields
        self._processes = processes
        self.gpm = gpm
        self._pcie = pcie
        self._enabled = enabled
        self._rates = NvlinkRates(enabled) if fields is not None else None
        self._link_vectors = tuple(key for key in LINK_VECTORS if key in enabled)
        self._ecc_enabled = ecc_enabled
        self._mig_parent = isinstance(identity, GpuIdentity) and identity.mig_enabled
        self._last_xid = "last_xid" in enabled
        self._xid_errors = "xid_errors" in enabled
        self._held: dict[str, tuple[float, ...]] = {}  # last values of probes read every Nth cycle, or once
        self.current_call = ""  # what `read` is asking NVML now (read by the collector when a call hangs)
        # catalogue key -> what the device is asked for it (probe name or field key), to explain a refusal
        self._asked_by: dict[str, str] = {key: probe.name for probe, keep in plan.probes for _, key in keep}
        if pcie is not None:
            self._asked_by.update((key, f"pcie_{key.removeprefix('pcie_')}_throughput") for key in pcie.keys)
        for key in fields.keys if fields is not None else ():
            entry = key.partition(":")[0]
            self._asked_by[entry] = entry
        if NVLINK_TOTAL in enabled:
            self._asked_by[NVLINK_TOTAL] = "nvlink_tx"
        for key in enabled:
            if key.startswith(LINK_RATE_PREFIX) or key in LINK_VECTORS:
                self._asked_by[key] = "nvlink_link_tx"
        self._cannot_give = dict(plan.cannot_give)  # known before asking (GPM on Ampere, MIG)
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
            held = self._held.get(probe.name) if probe.static or probe.every > 1 else None
            if held is not None and (probe.static or cycle % probe.every):
                got = held
            elif probe.every > 1 and cycle % probe.every:
                continue  # nothing held yet: its first read failed
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
                if probe.every > 1 or probe.static:
                    self._held[probe.name] = got
            for position, key in keep:
                if position < len(got):  # a probe may have no value this time (the vGPU license of some GPUs)
                    values[key] = got[position]
        if dropped:
            self._probes = [entry for entry in self._probes if entry[0] not in dropped]
        if self._pcie is not None:
            self.current_call = "pcie_throughput"
            try:
                failures += self._pcie.read(faults, values)
            except GpuLost as lost:
                raise GpuLostError(lost.code) from lost
        now = clock()
        status.spent("nvml", now - started)
        if failures:
            status.failed("nvml", failures)

        vectors = NO_VECTORS
        if self._fields is not None:
            started = now
            self.current_call = "field_values"
            links = self._read_fields(values, status, now)
            if links:
                vectors = MappingProxyType(links)
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
        if xid is not None:
            counts, last = xid
            if self._last_xid:
                values["last_xid"] = float(last)
            if self._xid_errors:
                vectors = MappingProxyType({**vectors, "xid_errors": counts})
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
                    if not self._ecc_enabled and reason == "not_supported" and key in ECC_KEYS:
                        reason = ECC_DISABLED
                    elif self._mig_parent and reason == "not_supported" and key in NOT_WITH_MIG:
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
                    extra=fields(gpu_uuid=self.identity.uuid, reason="needs_mig_monitor_privilege"),
                )
            self._unavailable = MappingProxyType(found)
            self._reasons_seen = len(reasons)
        return self._unavailable

    def _read_fields(self, values: dict[str, float], status: CycleStatus, now: float) -> dict[str, dict[str, float]]:
        """Read the field batch into `values`, the per-link counters into vectors (returned: {key: {link: value}})."""
        assert self._fields is not None
        if "field_values" in self.faults.unsupported:
            return {}
        nvml = self.nvml
        counted: dict[str, float] = {}
        stamps: dict[str, int] = {}
        try:
            self._fields.read(nvml, self.handle, self.faults, counted, stamps)
        except nvml.NVMLError as exc:
            kind = self.faults.record("field_values", exc)
            if kind is Disposition.LOST:
                raise GpuLostError(status_code(exc)) from exc
            if kind is Disposition.FAILED:
                status.failed("fields")
            return {}
        if self._rates is not None:
            self._rates.add(counted, stamps, int(now * 1e6), values)
        enabled = self._enabled
        links: dict[str, dict[str, float]] = {}
        for key, value in counted.items():
            if key in enabled:
                values[key] = value
            elif self._link_vectors and ":" in key:
                vector, _, link = key.partition(":")
                if vector in enabled:
                    links.setdefault(vector, {})[link] = value
        return links

    def close(self) -> None:
        if self.gpm is not None:
            self.gpm.close()
        if self._pcie is not None:
            self._pcie.close()
