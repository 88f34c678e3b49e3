"""The reader plan: which reads one GPU or MIG instance gets, decided once from plain data, no NVML call.

dcgm-exporter decides at start which collectors to build from its field groups; here each device gets a plan from
the enabled measurements and what discovery learnt of the device (`DeviceTraits`): its probes (board constants read
once: `Probe.static`), its PCIe probes (off the poll's path, `pcie.py`), one field-values batch, GPM, processes, and
what it cannot give and why. `readers.py` builds the reader from the plan. See
docs/decisions/2026-11-28-exporter-reader-plan.md.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from exporter.nvml.fields import field_entries, links_missing, wants_links
from exporter.nvml.gpm import METRICS, RATES
from exporter.nvml.probes import PCIE_PROBES, ProbeEntry, probes_for

FieldEntry = tuple[str, int, int]  # (batch key, field id, scope id)

_NO_REASONS: Mapping[str, str] = MappingProxyType({})
# NVML gives no utilization per MIG instance (nvml.h: utilization is NOT_SUPPORTED in MIG mode); GPM activity is the
# only per-instance figure, and GPM is Hopper and newer
_NOT_PER_MIG_INSTANCE = ("gpu_util", "mem_copy_util")


@dataclass(frozen=True, slots=True)
class DeviceTraits:
    """What discovery learnt of a device that decides its plan."""

    mig_enabled: bool = False  # a GPU whose MIG mode is on (its instances are read on their own)
    gpm: bool = False  # GPM answers on the GPU (for a MIG instance: on its parent)
    links: int = 0  # NVLinks (0 on a PCIe board, or where NVML will not say)
    refused: frozenset[str] = frozenset()  # what the device said NOT_SUPPORTED for already (DeviceFaults.unsupported)
    labels_missing: tuple[str, ...] = ()  # label fields asked for that the GPU has no value for


@dataclass(frozen=True, slots=True)
class ReaderPlan:
    """The reads of one device, every cycle unless a probe says otherwise (`Probe.every`, `Probe.static`)."""

    probes: tuple[ProbeEntry, ...] = ()
    pcie: tuple[ProbeEntry, ...] = ()  # PCIe throughput, on a thread of the GPU's own (pcie.py)
    fields: tuple[FieldEntry, ...] = ()  # one nvmlDeviceGetFieldValues call
    gpm: tuple[str, ...] = ()  # GPM metrics and rates sampled; none: no GPM sampler
    processes: bool = False
    cannot_give: Mapping[str, str] = field(default_factory=lambda: _NO_REASONS)  # known before asking


def wants_gpm(enabled: Collection[str]) -> bool:
    """Whether any GPM figure is enabled: only then is the GPU asked whether it has GPM."""
    return any(key in enabled for key in (*METRICS, *RATES))


def gpu_plan(
    enabled: frozenset[str],
    traits: DeviceTraits,
    *,
    processes: bool = True,
    unserved: Mapping[str, str] = _NO_REASONS,
    constant_every: int = 1,
) -> ReaderPlan:
    """The plan of a whole GPU. With GPM, PCIe throughput comes from it (the mean over the poll interval) instead of
    NVML's 20 ms sample; on a MIG-enabled GPU, GPM activity and processes come per instance."""
    gpm_keys = tuple(key for key in METRICS if key in enabled)
    rate_keys = tuple(key for key in RATES if key in enabled)
    has_gpm = bool(gpm_keys or rate_keys) and traits.gpm
    gpm: tuple[str, ...] = ()
    probe_keys = enabled
    if has_gpm and not traits.mig_enabled:
        gpm = gpm_keys + rate_keys
        probe_keys = enabled - frozenset(rate_keys)
    table = [
        entry
        for entry in probes_for(probe_keys, mig=False, constant_every=constant_every)
        if entry[0].name not in traits.refused
    ]
    links = traits.links if wants_links(enabled) else 0
    cannot_give = {key: "not_supported" for key in traits.labels_missing}
    cannot_give.update(unserved)
    cannot_give.update(dict.fromkeys(links_missing(enabled, links), "not_supported"))
    if not gpm and gpm_keys:
        cannot_give.update(dict.fromkeys(gpm_keys, "per_mig_instance" if has_gpm else "gpm_needs_hopper"))
    return ReaderPlan(
        probes=tuple(entry for entry in table if entry[0].name not in PCIE_PROBES),
        pcie=tuple(entry for entry in table if entry[0].name in PCIE_PROBES),
        fields=tuple(entry for entry in field_entries(enabled, links) if entry[0] not in traits.refused),
        gpm=gpm,
        processes=processes and not traits.mig_enabled,
        cannot_give=MappingProxyType(cannot_give),
    )


def mig_plan(enabled: frozenset[str], traits: DeviceTraits, *, processes: bool = True) -> ReaderPlan:
    """The plan of one MIG instance: its memory, its processes, and GPM activity sampled through its parent."""
    gpm_keys = tuple(key for key in METRICS if key in enabled)
    gpm = gpm_keys if gpm_keys and traits.gpm else ()
    cannot_give = {key: "not_per_mig_instance" for key in _NOT_PER_MIG_INSTANCE if key in enabled}
    if not gpm:
        cannot_give.update(dict.fromkeys(gpm_keys, "gpm_needs_hopper"))
    return ReaderPlan(
        probes=tuple(entry for entry in probes_for(enabled, mig=True) if entry[0].name not in traits.refused),
        gpm=gpm,
        processes=processes,
        cannot_give=MappingProxyType(cannot_give),
    )
