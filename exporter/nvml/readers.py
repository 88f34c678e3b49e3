"""Builds each device's reader: asks NVML the few things a plan depends on (`DeviceTraits`), makes the plan
(`reader_plan.py`), and gives the reader the samplers its plan names. Keeps each device's error record by UUID, so
that what a device refused survives a rediscovery."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from exporter.nvml.device import DeviceReader
from exporter.nvml.discovery import GpuDevice, MigDevice, SystemVersions, open_gpu
from exporter.nvml.errors import ErrorNames
from exporter.nvml.faults import DeviceFaults
from exporter.nvml.fields import link_count, wants_links
from exporter.nvml.gpm import METRICS, GpmSampler, gpm_supported
from exporter.nvml.pcie import PcieSampler
from exporter.nvml.processes import ProcessSampler
from exporter.nvml.reader_plan import DeviceTraits, ReaderPlan, gpu_plan, mig_plan, wants_gpm
from exporter.snapshot import GpuIdentity, MigIdentity


@dataclass(frozen=True, slots=True)
class OpenedGpu:
    """A GPU found and ready to read: its identity, its reader, and one reader per MIG instance."""

    identity: GpuIdentity
    reader: DeviceReader
    migs: tuple[DeviceReader, ...]


class DeviceReaders:
    """Opens GPUs and builds their readers from `enabled` (catalogue keys), the labels asked for that a GPU may lack,
    and the fields asked for that are never served (`unserved`)."""

    def __init__(
        self,
        nvml: Any,
        names: ErrorNames,
        clock: Callable[[], float],
        *,
        enabled: frozenset[str],
        labels: Collection[str] = (),
        unserved: Mapping[str, str] | None = None,
        processes: bool = True,
        process_hold_seconds: float = 3.0,
        pcie_every: int = 1,
        constant_every: int = 1,
    ) -> None:
        self.nvml = nvml
        self._names = names
        self._clock = clock
        self.enabled = enabled
        self._labels = frozenset(labels)
        self._unserved = dict(unserved or {})
        self._processes = processes
        self._process_hold_seconds = process_hold_seconds
        self._pcie_every = pcie_every
        self._constant_every = constant_every
        self._faults: dict[str, DeviceFaults] = {}  # by UUID: error counts survive rediscovery
        self.samples_match = True  # whether process samples and lists share a PID namespace (pidspace.py)

    def open(self, index: int, versions: SystemVersions, *, before: GpuIdentity | None = None) -> OpenedGpu:
        """GPU `index` and its MIG instances, with their readers; `before` is what it was when its layout changed.
        Raises NVMLError when the GPU does not answer."""
        gpu = open_gpu(self.nvml, index, versions)
        if before is not None and gpu.identity.mig_enabled != before.mig_enabled:
            # what the GPU refused with MIG on (utilization ...) it may give with MIG off, and the other way round
            self.faults_for(gpu.identity).forget_verdicts()
        return OpenedGpu(gpu.identity, self.gpu_reader(gpu), tuple(self.mig_reader(gpu, mig) for mig in gpu.migs))

    def faults_for(self, identity: GpuIdentity | MigIdentity) -> DeviceFaults:
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

    def gpu_reader(self, gpu: GpuDevice) -> DeviceReader:
        nvml, enabled, identity = self.nvml, self.enabled, gpu.identity
        faults = self.faults_for(identity)
        traits = DeviceTraits(
            mig_enabled=identity.mig_enabled,
            gpm=wants_gpm(enabled) and gpm_supported(nvml, gpu.handle, faults),
            links=link_count(nvml, gpu.handle) if wants_links(enabled) else 0,
            refused=frozenset(faults.unsupported),
            labels_missing=tuple(key for key in sorted(self._labels) if not identity.label_value(key)),
        )
        plan = gpu_plan(
            enabled, traits, processes=self._processes, unserved=self._unserved, constant_every=self._constant_every
        )
        return DeviceReader(
            nvml,
            identity,
            gpu.handle,
            faults,
            self._clock,
            plan,
            processes=self._process_sampler() if plan.processes else None,
            gpm=GpmSampler(nvml, gpu.handle, plan.gpm, self._clock) if plan.gpm else None,
            pcie=self._pcie_sampler(gpu, plan),
            enabled=enabled,
            ecc_enabled=gpu.ecc_enabled,
        )

    def mig_reader(self, gpu: GpuDevice, mig: MigDevice) -> DeviceReader:
        nvml, enabled = self.nvml, self.enabled
        faults = self.faults_for(mig.identity)
        wants = any(key in enabled for key in METRICS)
        traits = DeviceTraits(
            gpm=wants and gpm_supported(nvml, gpu.handle, self.faults_for(gpu.identity)),
            refused=frozenset(faults.unsupported),
        )
        plan = mig_plan(enabled, traits, processes=self._processes)
        gpm = None
        if plan.gpm:
            gpm = GpmSampler(
                nvml,
                gpu.handle,
                plan.gpm,
                self._clock,
                gpu_instance_id=mig.identity.gpu_instance_id,
                mig_handle=mig.handle,
            )
        return DeviceReader(
            nvml,
            mig.identity,
            mig.handle,
            faults,
            self._clock,
            plan,
            processes=self._process_sampler() if plan.processes else None,
            gpm=gpm,
            enabled=enabled,
        )

    def _process_sampler(self) -> ProcessSampler:
        return ProcessSampler(self._clock, hold_seconds=self._process_hold_seconds, samples_match=self.samples_match)

    def _pcie_sampler(self, gpu: GpuDevice, plan: ReaderPlan) -> PcieSampler | None:
        if not plan.pcie:
            return None
        name = f"gpu-pulse-pcie-{gpu.identity.index}"
        return PcieSampler(self.nvml, gpu.handle, list(plan.pcie), self._pcie_every, name)
