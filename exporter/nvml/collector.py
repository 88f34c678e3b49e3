"""NvmlCollector: the DeviceCollector that reads GPUs through pynvml (real libnvidia-ml, or the simulator under it)."""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, wait
from dataclasses import replace
from functools import partial
from types import MappingProxyType
from typing import Any

from exporter.collection import DeviceCollection, HistoryPoint
from exporter.nvml.availability import UP, DriverFiles, NvmlAvailability
from exporter.nvml.coverage import XID_KEYS, enabled_measurements
from exporter.nvml.device import NO_VECTORS, DeviceReader, GpuLostError
from exporter.nvml.discovery import GpuDevice, MigDevice, SystemVersions, gpu_count, open_gpu, system_versions
from exporter.nvml.errors import GPU_IS_LOST, Disposition, ErrorNames, disposition, status_code
from exporter.nvml.faults import DeviceFaults
from exporter.nvml.fields import FieldBatch, field_entries, link_count, links_missing, wants_links
from exporter.nvml.gpm import METRICS, RATES, GpmSampler, gpm_supported
from exporter.nvml.history import SampleHistory
from exporter.nvml.layout import NOT_MIG_CAPABLE, layout_change
from exporter.nvml.pcie import pcie_sampler
from exporter.nvml.pidspace import PidNamespace, own_pid_namespace
from exporter.nvml.probes import PCIE_PROBES, probes_for
from exporter.nvml.processes import ProcessSampler
from exporter.nvml.slot import GpuSlot, SlotReading
from exporter.nvml.status import CycleStatus
from exporter.nvml.xid import XidLedger, XidListener
from exporter.snapshot import EMPTY, DeviceReading, GpuIdentity, MigIdentity, NvmlState, StalledCall
from toolkit.backoff import Backoff, Draw, RetrySchedule
from toolkit.logs import fields

log = logging.getLogger("exporter.nvml")

LOST_GPU_BACKOFF = Backoff(initial=1.0, maximum=60.0)


def _default_nvml() -> Any:
    import pynvml

    return pynvml


class NvmlCollector:
    """Reads every GPU and MIG instance once per `collect()`; XID events on their own thread.

    `nvml` is the pynvml module (or an object with its API). `enabled` is the set of catalogue keys to read (see
    `enabled_measurements`); None reads the default set. `labels` are the dcgm label fields asked for (catalogue keys
    of `exporter.catalogue.identity`): a GPU that has no value for one says so in its `unavailable`, as it does for
    `unserved` (field name -> reason: fields gpu-pulse never serves that were asked for). `clock` is monotonic seconds
    (backoff, GPM spacing, durations), `wall_clock` is epoch seconds (sample times, history windows). A lost GPU is
    probed again after `lost_backoff` delays, jittered by `draw`. Board constants (temperature thresholds) are read
    every `constant_period_seconds`. `pid_namespace` is where the exporter runs (default: read from
    /proc/self/ns/pid); it decides whether per-process samples can be matched to the listed processes (see
    pidspace.py). Without a usable NVML (no driver yet, a driver/library version mismatch) it keeps returning empty
    collections that say why, and tries nvmlInit again after `driver_backoff` delays (`availability.py`);
    `driver_files` are where the node says its driver versions, for that message.
    """

    def __init__(
        self,
        nvml: Any = None,
        *,
        enabled: Iterable[str] | None = None,
        labels: Iterable[str] = (),
        unserved: Mapping[str, str] | None = None,
        interval_seconds: float = 1.0,
        history_seconds: float = 900.0,
        pcie_period_seconds: float = 5.0,
        constant_period_seconds: float = 60.0,
        processes: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        lost_backoff: Backoff = LOST_GPU_BACKOFF,
        draw: Draw = random.random,
        xid_wait_ms: int = 250,
        slow_call_seconds: float | None = None,
        layout_check_seconds: float = 10.0,
        pid_namespace: PidNamespace | None = None,
        driver_backoff: Backoff | None = None,
        driver_files: DriverFiles | None = None,
    ) -> None:
        if interval_seconds <= 0:
            raise ValueError(f"interval must be positive, got {interval_seconds}")
        # how long a cycle waits for a GPU's reads (real time) before it reports that GPU stalled: one interval
        self._slow_call_seconds = interval_seconds if slow_call_seconds is None else slow_call_seconds
        # MIG: instance identities are checked every cycle; the mode and the empty slots this often
        self._layout_check_seconds = layout_check_seconds
        self._nvml = nvml if nvml is not None else _default_nvml()
        self._enabled = enabled_measurements(enabled)
        self._labels = frozenset(labels)
        self._unserved = dict(unserved or {})
        self._pcie_every = max(1, math.ceil(pcie_period_seconds / interval_seconds))
        self._constant_every = max(1, math.ceil(constant_period_seconds / interval_seconds))
        self._processes = processes
        self._pid_namespace = pid_namespace if pid_namespace is not None else own_pid_namespace()
        self._samples_match = True
        self._processes_hidden: str | None = None
        self._process_hold_seconds = max(2.0, 3 * interval_seconds)
        self._clock = clock
        self._wall = wall_clock
        self._lost_backoff = lost_backoff
        self._draw = draw
        self._xid_wait_ms = xid_wait_ms
        self._names = ErrorNames(self._nvml)
        self._availability = NvmlAvailability(self._names, backoff=driver_backoff, draw=draw, files=driver_files)
        self._history = SampleHistory.for_span(history_seconds, interval_seconds)
        self._status = CycleStatus()
        self._faults: dict[str, DeviceFaults] = {}  # by UUID: error counts survive rediscovery
        self._ledger = XidLedger()
        self._xid: XidListener | None = None
        self._xid_failures_seen = 0
        self._slots: list[GpuSlot] = []
        self._versions = SystemVersions("", "")
        self._defects_logged: set[int] = set()
        self._lock = threading.Lock()
        self._started = False
        self._enumerated_at = -math.inf  # when NVML's GPU count was last compared with ours

    @property
    def enabled(self) -> frozenset[str]:
        return self._enabled

    @property
    def nvml_state(self) -> NvmlState:
        """Whether NVML is usable now, and if not, why."""
        return self._availability.state

    # ---- lifecycle ------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Initialize NVML and find the GPUs; without a usable NVML, say why and let `collect()` try again."""
        with self._lock:
            self._connect(self._clock())

    def _connect(self, now: float) -> bool:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self._availability.failed(status_code(exc), str(exc), now)
            return False
        self._started = True
        try:
            self._discover()
        except nvml.NVMLError as exc:
            self._shutdown()
            self._availability.failed(status_code(exc), f"NVML cannot list the GPUs: {exc}", now)
            return False
        self._availability.succeeded()
        return True

    def rediscover(self) -> None:
        with self._lock:
            if not self._started:
                return
            try:
                self._discover()
            except self._nvml.NVMLError as exc:
                log.error("rediscovering GPUs failed (%s); keeping the devices found before", exc)
                self._restart_xid()

    def close(self) -> None:
        with self._lock:
            self._stop_xid()
            for slot in self._slots:
                slot.close()
            self._slots = []
            self._shutdown()

    def _shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)

    # ---- discovery ------------------------------------------------------------------------------------------------
    def _discover(self) -> None:
        nvml = self._nvml
        self._versions = system_versions(nvml)
        self._samples_match = self._pid_namespace.samples_match_lists(self._versions.driver)
        self._processes_hidden = None
        if self._processes and not self._samples_match:
            self._processes_hidden = (
                f"the exporter runs in {self._pid_namespace.describe()}, and driver "
                f"{self._versions.driver or '(version unknown)'} lists only the processes of that namespace, while "
                "utilization samples carry host PIDs; set hostPID: true"
            )
            log.warning(
                "%s: pods sharing a GPU stay unattributed",
                self._processes_hidden,
                extra=fields(reason="pid_namespace"),
            )
        count = gpu_count(nvml)  # raises: the caller decides
        self._stop_xid()
        for slot in self._slots:
            slot.close()
        now = self._clock()
        self._slots = []
        for index in range(count):
            slot = GpuSlot(index, RetrySchedule(self._lost_backoff, self._draw))
            self._open(slot, now)
            self._slots.append(slot)
        self._restart_xid()
        self._enumerated_at = now
        uuids = [slot.identity.uuid for slot in self._slots if slot.identity is not None]
        uuids += [mig.identity.uuid for slot in self._slots for mig in slot.migs]
        self._history.retain(uuids)
        log.info(
            "found %d GPU(s), %d MIG instance(s); driver %s, CUDA %s",
            count,
            sum(len(slot.migs) for slot in self._slots),
            self._versions.driver or "?",
            self._versions.cuda or "?",
        )

    def _check_enumeration(self, now: float) -> None:
        """A GPU bound to or unbound from the driver at run time changes NVML's enumeration, and with it the indexes of
        the GPUs after it, whose old handles "must be re-established" (nvml.h, nvmlDeviceRemoveGpu_v2 and
        nvmlDeviceDiscoverGpus): compare the count every layout check, and find the GPUs again when it moved."""
        if now - self._enumerated_at < self._layout_check_seconds:
            return
        self._enumerated_at = now
        nvml = self._nvml
        try:
            count = gpu_count(nvml)
        except nvml.NVMLError as exc:
            log.debug("counting the GPUs failed: %s", exc)
            return
        if count == len(self._slots):
            return
        log.warning(
            "NVML enumerates %d GPU(s) now, not %d: a GPU was bound to or unbound from the driver; finding the GPUs "
            "again",
            count,
            len(self._slots),
        )
        try:
            self._discover()
        except nvml.NVMLError as exc:
            log.error("finding the GPUs again failed (%s); keeping the devices found before", exc)
            self._restart_xid()

    def _open(self, slot: GpuSlot, now: float) -> bool:
        """Open GPU `slot.index` (handle, identity, MIG instances, readers). False when it does not answer."""
        nvml = self._nvml
        try:
            gpu = open_gpu(nvml, slot.index, self._versions)
        except nvml.NVMLError as exc:
            slot.lost = True
            slot.backoff.failed(now)
            if slot.identity is None:
                log.warning(
                    "GPU %d does not answer (%s); probing again later",
                    slot.index,
                    exc,
                    extra=fields(gpu=slot.index, reason=exc),
                )
            return False
        slot.identity = gpu.identity
        slot.reader = self._gpu_reader(gpu)
        slot.migs = [self._mig_reader(gpu, mig) for mig in gpu.migs]
        slot.lost = False
        slot.backoff.reset()
        slot.down = ()
        return True

    def _faults_for(self, identity: GpuIdentity | MigIdentity) -> DeviceFaults:
        faults = self._faults.get(identity.uuid)
        if faults is None:
            if isinstance(identity, MigIdentity):
                label = f"GPU {identity.parent.index} MIG {identity.gpu_instance_id}/{identity.compute_instance_id}"
            else:
                label = f"GPU {identity.index}"
            faults = self._faults[identity.uuid] = DeviceFaults(
                f"{label} ({identity.uuid})", self._names, uuid=identity.uuid
            )
        return faults

    def _gpu_reader(self, gpu: GpuDevice) -> DeviceReader:
        faults = self._faults_for(gpu.identity)
        enabled = self._enabled
        gpm = None
        gpm_keys = tuple(key for key in METRICS if key in enabled)
        rate_keys = tuple(key for key in RATES if key in enabled)
        has_gpm = bool(gpm_keys or rate_keys) and gpm_supported(self._nvml, gpu.handle, faults)
        probe_keys = enabled
        if has_gpm and not gpu.identity.mig_enabled:
            # PCIe throughput from GPM is the mean over the poll interval; without GPM it is NVML's 20 ms sample
            gpm = GpmSampler(self._nvml, gpu.handle, gpm_keys + rate_keys, self._clock)
            probe_keys = enabled - frozenset(rate_keys)
        probes = probes_for(probe_keys, mig=False, constant_every=self._constant_every)
        pcie, probes = pcie_sampler(
            self._nvml,
            gpu.handle,
            probes,
            self._pcie_every,
            f"gpu-pulse-pcie-{gpu.identity.index}",
            PCIE_PROBES.__contains__,
        )
        links = link_count(self._nvml, gpu.handle) if wants_links(enabled) else 0
        fields = tuple(entry for entry in field_entries(enabled, links) if entry[0] not in faults.unsupported)
        cannot_give: dict[str, str] = self._labels_missing(gpu.identity)
        cannot_give.update(dict.fromkeys(links_missing(enabled, links), "not_supported"))
        if gpm is None and gpm_keys:
            # GPM is Hopper and newer; where it is there, a MIG-enabled GPU's activity comes per instance
            cannot_give.update(dict.fromkeys(gpm_keys, "per_mig_instance" if has_gpm else "gpm_needs_hopper"))
        return DeviceReader(
            self._nvml,
            gpu.identity,
            gpu.handle,
            faults,
            self._clock,
            probes=probes,
            fields=FieldBatch(fields) if fields else None,
            # on a MIG-enabled GPU the processes are listed per instance
            processes=self._process_sampler() if not gpu.identity.mig_enabled else None,
            gpm=gpm,
            pcie=pcie,
            enabled=enabled,
            cannot_give=cannot_give,
            ecc_enabled=gpu.ecc_enabled,
        )

    def _labels_missing(self, identity: GpuIdentity) -> dict[str, str]:
        """Why this GPU will not have the label fields and the fields asked for that it cannot give at all."""
        missing = {key: "not_supported" for key in sorted(self._labels) if not identity.label_value(key)}
        missing.update(self._unserved)
        return missing

    def _process_sampler(self) -> ProcessSampler | None:
        if not self._processes:
            return None
        return ProcessSampler(self._clock, hold_seconds=self._process_hold_seconds, samples_match=self._samples_match)

    def _mig_reader(self, gpu: GpuDevice, mig: MigDevice) -> DeviceReader:
        faults = self._faults_for(mig.identity)
        enabled = self._enabled
        gpm = None
        gpm_keys = tuple(key for key in METRICS if key in enabled)
        if gpm_keys and gpm_supported(self._nvml, gpu.handle, self._faults_for(gpu.identity)):
            gpm = GpmSampler(
                self._nvml,
                gpu.handle,
                gpm_keys,
                self._clock,
                gpu_instance_id=mig.identity.gpu_instance_id,
                mig_handle=mig.handle,
            )
        # NVML gives no utilization per MIG instance (nvml.h: utilization is NOT_SUPPORTED in MIG mode); GPM activity
        # is the only per-instance figure, and GPM is Hopper and newer
        cannot_give: dict[str, str] = {
            key: "not_per_mig_instance" for key in ("gpu_util", "mem_copy_util") if key in enabled
        }
        if gpm is None:
            cannot_give.update(dict.fromkeys(gpm_keys, "gpm_needs_hopper"))
        return DeviceReader(
            self._nvml,
            mig.identity,
            mig.handle,
            faults,
            self._clock,
            probes=probes_for(enabled, mig=True),
            processes=self._process_sampler(),
            gpm=gpm,
            enabled=enabled,
            cannot_give=cannot_give,
        )

    # ---- XID ------------------------------------------------------------------------------------------------------
    def _stop_xid(self) -> None:
        if self._xid is not None:
            self._xid.stop()
            self._xid_failures_seen = 0
            self._xid = None

    def _restart_xid(self) -> None:
        self._stop_xid()
        if not self._enabled & XID_KEYS:
            return
        gpus = [
            (slot.identity.uuid, slot.reader.handle)
            for slot in self._slots
            if not slot.lost and slot.identity is not None and slot.reader is not None
        ]
        if not gpus:
            return
        self._xid = XidListener(self._nvml, gpus, self._ledger, wait_ms=self._xid_wait_ms)
        self._xid.start()

    def _xid_status(self) -> None:
        listener = self._xid
        if listener is None or not listener.registered:
            return
        if not listener.alive:
            self._status.failed("xid")
        new_failures = listener.failures - self._xid_failures_seen
        if new_failures > 0:
            self._xid_failures_seen = listener.failures
            self._status.failed("xid", new_failures)

    # ---- the cycle ------------------------------------------------------------------------------------------------
    def collect(self) -> DeviceCollection:
        with self._lock:
            return self._collect()

    def _collect(self) -> DeviceCollection:
        status = self._status
        status.begin()
        now = self._clock()
        taken_at = self._wall()
        if not self._started and not (self._availability.due(now) and self._connect(now)):
            status.failed("nvml")  # no GPU to read: the snapshot says why, /readyz fails with it
            return DeviceCollection(taken_at, (), status.statuses(), nvml=self._availability.state)
        self._check_enumeration(now)
        by_slot: dict[int, tuple[DeviceReading, ...]] = {}
        recovered = False
        xid = self._xid
        registered = xid.registered if xid is not None else frozenset()
        answered = lost = 0
        reads: dict[int, tuple[GpuSlot, Future[SlotReading]]] = {}
        for slot in self._slots:
            if slot.busy is not None:
                if not slot.busy.done():  # still in a call from an earlier cycle: do not queue another read behind it
                    by_slot[slot.index] = self._stalled_readings(slot, now)
                    continue
                finished, slot.busy = slot.busy, None
                log.warning(
                    "GPU %d: the hung NVML call returned after %.1f s; reading it again",
                    slot.index,
                    now - slot.busy_since,
                    extra=fields(gpu=slot.index, gpu_uuid=slot.identity.uuid if slot.identity else None),
                )
                error = finished.exception()
                if isinstance(error, GpuLostError):
                    self._mark_lost(slot, error.code, now)
            if slot.lost:
                if slot.backoff.due(now) and self._recover(slot, now):
                    recovered = True
                else:
                    lost += 1
                    by_slot[slot.index] = self._down_readings(slot)
                    continue
            reader = slot.reader
            if reader is None:
                continue
            uuid = reader.identity.uuid
            history = self._ledger.read(uuid) if uuid in registered else None
            reads[slot.index] = (slot, slot.worker.submit(partial(self._read_slot, slot, status, history, now)))
        if reads:
            wait([future for _, future in reads.values()], timeout=self._slow_call_seconds)
        for index, (slot, future) in reads.items():
            if not future.done():
                slot.busy, slot.busy_since = future, now
                log.warning(
                    "GPU %d (%s): an NVML call (%s) has not returned within %.1f s; reporting the GPU stalled while "
                    "the other GPUs keep reporting",
                    slot.index,
                    slot.identity.uuid if slot.identity is not None else "?",
                    slot.current_call(),
                    self._slow_call_seconds,
                    extra=fields(
                        gpu=slot.index,
                        gpu_uuid=slot.identity.uuid if slot.identity is not None else None,
                        reason="nvml_call_stalled",
                    ),
                )
                by_slot[index] = self._stalled_readings(slot, now)
                continue
            error = future.exception()
            if isinstance(error, GpuLostError):
                self._mark_lost(slot, error.code, now)
                lost += 1
                by_slot[index] = self._down_readings(slot)
                continue
            if error is not None:  # a defect, not a device fault: the other GPUs keep reporting
                if slot.index not in self._defects_logged:
                    self._defects_logged.add(slot.index)
                    log.error(
                        "GPU %d: reading it failed unexpectedly; skipping it this cycle", slot.index, exc_info=error
                    )
                assert slot.reader is not None
                slot.reader.faults.count("INTERNAL")
                status.failed("nvml")
                continue
            answered += 1
            gpu_reading, mig_readings = future.result()
            by_slot[index] = (gpu_reading, *mig_readings)
        readings = [reading for slot in self._slots for reading in by_slot.get(slot.index, ())]
        if any(slot.reopened for slot in self._slots):
            for slot in self._slots:
                slot.reopened = False
            self._history.retain([r.uuid for r in readings])
        stalled = sum(1 for slot in self._slots if slot.busy is not None)
        if stalled:
            status.errors("nvml", stalled)
        if lost:
            # a lost GPU shows as its `up` 0 (and GPUDown); the collector failed only when no GPU answered at all
            if answered:
                status.errors("nvml", lost)
            else:
                status.failed("nvml", lost)
        if recovered:
            self._restart_xid()
        self._xid_status()
        self._remember(taken_at, readings)
        return DeviceCollection(
            taken_at=taken_at,
            devices=tuple(readings),
            statuses=status.statuses(),
            processes_hidden=self._processes_hidden,
            nvml=UP,
        )

    def _mark_lost(self, slot: GpuSlot, code: int, now: float) -> None:
        assert slot.reader is not None and slot.identity is not None
        name = self._names(code)
        faults = slot.reader.faults
        faults.count(name)
        slot.lost = True
        slot.backoff.failed(now)
        slot.close_readers()
        slot.down = (
            DeviceReading(identity=slot.identity, up=False, errors=faults.view()),
            *(DeviceReading(identity=mig.identity, up=False, errors=mig.faults.view()) for mig in slot.migs),
        )
        log.warning(
            "GPU %d (%s) is lost (%s): reporting it down, the other GPUs keep reporting; probing it again in %.0f s",
            slot.index,
            slot.identity.uuid,
            name,
            slot.backoff.delay,
            extra=fields(gpu=slot.index, gpu_uuid=slot.identity.uuid, reason=name),
        )
        if code == GPU_IS_LOST and self._enabled & XID_KEYS and self._ledger.lost(slot.identity.uuid):
            log.warning(
                "GPU %d (%s): no XID event came for it (driver %s posts none for a GPU that falls off the bus unless "
                "a process runs on it); counting the XID 79 the driver logged to the kernel log",
                slot.index,
                slot.identity.uuid,
                self._versions.driver or "?",
                extra=fields(gpu=slot.index, gpu_uuid=slot.identity.uuid, xid=79, reason=name),
            )

    # ---- one GPU, on its worker thread ------------------------------------------------------------------------------
    def _read_slot(
        self, slot: GpuSlot, status: CycleStatus, xid: tuple[Mapping[str, float], int] | None, now: float
    ) -> SlotReading:
        """One GPU's reading and its MIG instances'. A MIG layout that changed since discovery is read again first,
        and MIG readings taken while it changed are dropped: never one instance's figures under another's identity.
        Raises GpuLostError."""
        change = self._layout_change(slot, now, full=True)
        if change is not None:
            self._reopen(slot, change)
        assert slot.reader is not None
        gpu_reading = slot.reader.read(status, xid)
        mig_readings = [mig.read(status) for mig in slot.migs]
        if mig_readings and self._layout_change(slot, now, full=False) is not None:
            mig_readings = []  # changed while being read: read again next cycle
        return gpu_reading, mig_readings

    def _layout_change(self, slot: GpuSlot, now: float, *, full: bool) -> str | None:
        if not slot.mig_capable or slot.reader is None or slot.identity is None:
            return None
        full = full and now - slot.layout_checked_at >= self._layout_check_seconds
        if full:
            slot.layout_checked_at = now
        elif not slot.migs:
            return None  # nothing to check between full checks
        migs = [(m.identity, m.handle) for m in slot.migs if isinstance(m.identity, MigIdentity)]
        change = layout_change(
            self._nvml, slot.identity, slot.reader.handle, migs, full=full, on_pending=partial(self._pending, slot)
        )
        if change == NOT_MIG_CAPABLE:
            slot.mig_capable = False
            return None
        return change

    @staticmethod
    def _pending(slot: GpuSlot, pending: bool | None) -> None:
        if pending == slot.pending_mig:
            return
        slot.pending_mig = pending
        if pending is not None:
            log.warning(
                "GPU %d: a MIG mode change (to %s) is pending: it needs the GPU idle, and this exporter holds it "
                "while it runs. The GPU Operator's mig-manager (v0.15+, GPU Operator v26.7+) pauses gpu-pulse for "
                "it through the nvidia.com/gpu.deploy.client label; elsewhere stop the exporter on this node "
                '(docs/install.md, "The driver\'s life cycle")',
                slot.index,
                "on" if pending else "off",
            )

    def _reopen(self, slot: GpuSlot, change: str) -> None:
        """Read the GPU's identity and MIG layout again and build new readers for it (no SIGHUP needed)."""
        nvml = self._nvml
        old = slot.identity
        assert old is not None
        try:
            gpu = open_gpu(nvml, slot.index, self._versions)
        except nvml.NVMLError as exc:
            code = status_code(exc)
            if disposition(code) is Disposition.LOST:
                raise GpuLostError(code) from exc
            raise
        if gpu.identity.mig_enabled != old.mig_enabled:
            # what the GPU refused with MIG on (utilization ...) it may give with MIG off, and the other way round
            self._faults_for(gpu.identity).forget_verdicts()
        slot.close_readers()
        slot.identity = gpu.identity
        slot.reader = self._gpu_reader(gpu)
        slot.migs = [self._mig_reader(gpu, mig) for mig in gpu.migs]
        slot.reopened = True
        log.warning(
            "GPU %d (%s): %s; reading its new layout (MIG %s, %d instance(s)) without a restart",
            slot.index,
            gpu.identity.uuid,
            change,
            "on" if gpu.identity.mig_enabled else "off",
            len(gpu.migs),
        )

    def _stalled_readings(self, slot: GpuSlot, now: float) -> tuple[DeviceReading, ...]:
        """A GPU whose read hangs: down this cycle (nothing it said is current), named, with the call and how long."""
        if slot.identity is None or slot.reader is None:
            return ()
        stalled = StalledCall(slot.current_call(), max(0.0, now - slot.busy_since))
        gpu = DeviceReading(identity=slot.identity, up=False, errors=slot.reader.faults.view(), stalled=stalled)
        migs = (DeviceReading(identity=mig.identity, up=False, errors=mig.faults.view()) for mig in slot.migs)
        return (gpu, *migs)

    def _down_readings(self, slot: GpuSlot) -> tuple[DeviceReading, ...]:
        """A lost GPU's readings: down, with the XIDs heard from it kept (XID 79 is what it said as it fell off the
        bus; without its series that alert could not fire while the GPU is gone)."""
        if not slot.down or not self._enabled & XID_KEYS:
            return slot.down
        counts, last = self._ledger.read(slot.down[0].uuid)
        if not counts:
            return slot.down
        values = MappingProxyType({"last_xid": float(last)}) if "last_xid" in self._enabled else EMPTY
        vectors = MappingProxyType({"xid_errors": counts}) if "xid_errors" in self._enabled else NO_VECTORS
        return (replace(slot.down[0], values=values, vectors=vectors), *slot.down[1:])

    def _recover(self, slot: GpuSlot, now: float) -> bool:
        if not self._open(slot, now):
            return False
        assert slot.identity is not None
        self._ledger.answered(slot.identity.uuid)
        log.warning(
            "GPU %d (%s) answers again",
            slot.index,
            slot.identity.uuid,
            extra=fields(gpu=slot.index, gpu_uuid=slot.identity.uuid),
        )
        return True

    # ---- sample buffers -------------------------------------------------------------------------------------------
    def _remember(self, taken_at: float, readings: list[DeviceReading]) -> None:
        history = self._history
        for reading in readings:
            if not reading.up:
                continue
            values = reading.values
            utilization = values.get("gr_engine_active") if reading.is_mig else values.get("gpu_util")
            history.record(reading.uuid, HistoryPoint(taken_at, utilization, values.get("fb_used")))

    def history(self, uuid: str, seconds: float) -> tuple[HistoryPoint, ...]:
        return self._history.window(uuid, self._wall() - seconds)
