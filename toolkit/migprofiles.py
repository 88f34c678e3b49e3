"""MIG GPU-instance profiles per GPU model: what each profile holds of its GPU (compute and memory slices, and the
memory an instance really has), from NVIDIA's Multi-Instance GPU User Guide, "Supported MIG Profiles"
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/), and the driver's `nvidia-smi mig -lgip` listings. The
report, the waste recording rules and the waste dashboard count GPU shares with this one table; the method and its
limits: docs/rightsizing.md, "MIG profiles".

The A100-SXM4-40GB table of the guide gives 1g.10gb 1/8 of the memory; its name, its 4 possible instances and the
driver's `nvidia-smi mig -lgip` listing say 2/8, which is what this table records. A profile the table does not know
(another model, a compute-instance profile such as `1c.3g.40gb`) counts its GPU-instance slices out of 7.

An instance's memory is not the gigabytes in its name: `nvidia-smi mig -lgip` lists a 3g.40gb of an H100 80GB with
39.50 GiB (42.4e9 bytes, not 40e9) and a 1g.18gb of an H200 with 16.00 GiB (17.2e9 bytes, not 18e9). Where a listing
of the product is cited below, the table holds its figure (the listing's GiB with two decimals, rounded down by at
most 0.01 GiB); where none is, an estimate that no listing exceeds: the memory slices times the product's smallest
listed GiB per memory slice, or, for a product without any listing, the name's gigabytes times NAMED_SHARE_FLOOR.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from types import MappingProxyType

GB = 10**9
GIB = 2**30
FALLBACK_COMPUTE_SLICES = 7
# The least a listed instance holds of its name's gigabytes, over every listing below: the H200's 1g.18gb, 16.00 GiB
# of 18e9 bytes (0.954). An estimate from the name alone takes this share of it.
NAMED_SHARE_FLOOR = Decimal("0.95")


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile of one GPU model."""

    name: str  # "3g.40gb"
    compute_slices: int  # of the GPU's `compute_total`
    memory_slices: int  # of the GPU's `memory_total`
    compute_total: int
    memory_total: int
    memory_gb: int  # the name's gigabytes
    memory_bytes: int  # what an instance holds: the product's `nvidia-smi mig -lgip` listing, else an estimate
    listed: bool  # memory_bytes is the listing's (else the estimate the module docstring describes)

    @property
    def gpu_fraction(self) -> Fraction:
        """The share of the GPU an instance holds, counted in compute slices (7 x 1g.10gb make one whole H100)."""
        return Fraction(self.compute_slices, self.compute_total)

    @property
    def memory_fraction(self) -> Fraction:
        return Fraction(self.memory_slices, self.memory_total)


@dataclass(frozen=True, slots=True)
class MigModel:
    """A GPU product's profiles; `pattern` matches the names NVML gives the product (nvmlDeviceGetName)."""

    product: str
    pattern: re.Pattern[str]
    profiles: tuple[MigProfile, ...]  # smallest first

    @property
    def whole_gpu_bytes(self) -> int:
        return max(p.memory_bytes for p in self.profiles)


# `nvidia-smi mig -lgip`'s GiB per memory-slice count, per product (the +me variants list as the profile without):
# - A100-SXM4-40GB: the MIG user guide's listing ("Getting Started with MIG", "List GPU Instance Profiles");
# - A100-SXM4-80GB, H100 80GB HBM3 (also jbarrow.ai/field_notes/nvidia-mig), H100 PCIe (other SM counts, the same
#   memory), H200 (1, 2 and 8 slices), A30: published listings of the driver's output.
Listing = Mapping[int, str]
A30_LISTED: Listing = {1: "5.81", 2: "11.69", 4: "23.50"}
A100_40GB_LISTED: Listing = {1: "4.75", 2: "9.62", 4: "19.50", 8: "39.25"}
A100_80GB_LISTED: Listing = {1: "9.50", 2: "19.50", 4: "39.25", 8: "79.00"}
H100_80GB_LISTED: Listing = {1: "9.75", 2: "19.62", 4: "39.50", 8: "79.25"}
H200_LISTED: Listing = {1: "16.00", 2: "32.50", 8: "140.00"}


def _memory(memory_slices: int, gb: int, listed: Listing) -> tuple[int, bool]:
    """An instance's bytes (and whether listed): the listing's, else the estimate the module docstring describes."""
    if memory_slices in listed:
        return int(Decimal(listed[memory_slices]) * GIB), True
    if listed:
        per_slice = min(Decimal(gib) / slices for slices, gib in listed.items())
        return int(per_slice * memory_slices * GIB), False
    return int(gb * GB * NAMED_SHARE_FLOOR), False


def _profile(name: str, c: int, m: int, compute_total: int, memory_total: int, gb: int, listed: Listing) -> MigProfile:
    memory, is_listed = _memory(m, gb, listed)
    return MigProfile(name, c, m, compute_total, memory_total, gb, memory, is_listed)


def _seven_slices(one: int, two: int, half: int, full: int, listed: Listing) -> tuple[MigProfile, ...]:
    """The profiles of a 7-compute, 8-memory-slice GPU (GA100, GH100, GB100): 1g (1/8 memory), 1g and 2g (2/8), 3g and
    4g (4/8), 7g; a `+me` profile (media engines) holds the slices of the one without."""

    def p(name: str, c: int, m: int, gb: int) -> MigProfile:
        return _profile(name, c, m, 7, 8, gb, listed)

    return (
        p(f"1g.{one}gb", 1, 1, one),
        p(f"1g.{one}gb+me", 1, 1, one),
        p(f"1g.{two}gb", 1, 2, two),
        p(f"2g.{two}gb", 2, 2, two),
        p(f"3g.{half}gb", 3, 4, half),
        p(f"4g.{half}gb", 4, 4, half),
        p(f"7g.{full}gb", 7, 8, full),
    )


def _a30() -> tuple[MigProfile, ...]:
    def p(name: str, c: int, gb: int) -> MigProfile:
        return _profile(name, c, c, 4, 4, gb, A30_LISTED)

    return (p("1g.6gb", 1, 6), p("1g.6gb+me", 1, 6), p("2g.12gb", 2, 12), p("2g.12gb+me", 2, 12), p("4g.24gb", 4, 24))


# Checked in order: the first product whose pattern matches the GPU's name gives its profiles.
MIG_MODELS: tuple[MigModel, ...] = (
    MigModel("A30 24GB", re.compile(r"\bA30\b"), _a30()),
    MigModel("A100 40GB", re.compile(r"\bA100\b.*\b40GB\b"), _seven_slices(5, 10, 20, 40, A100_40GB_LISTED)),
    MigModel("A100 80GB", re.compile(r"\bA100\b.*\b80GB\b"), _seven_slices(10, 20, 40, 80, A100_80GB_LISTED)),
    MigModel("H100 94GB (NVL)", re.compile(r"\bH100 NVL\b"), _seven_slices(12, 24, 47, 94, {})),
    MigModel("H100 80GB (SXM5, PCIe)", re.compile(r"\bH100\b"), _seven_slices(10, 20, 40, 80, H100_80GB_LISTED)),
    MigModel("H200 141GB (SXM5, NVL)", re.compile(r"\bH200\b"), _seven_slices(18, 35, 71, 141, H200_LISTED)),
    MigModel("B200 180GB", re.compile(r"\bB200\b"), _seven_slices(23, 45, 90, 180, {})),
)

_FALLBACK = re.compile(r"(?:\d+c\.)?(\d+)g\.")


def mig_model(gpu_name: str) -> MigModel | None:
    """The MIG profiles of the GPU model NVML names `gpu_name`, or None (not MIG-capable, or not in the table)."""
    return next((m for m in MIG_MODELS if m.pattern.search(gpu_name)), None)


def _fractions() -> Mapping[str, Fraction]:
    found: dict[str, Fraction] = {}
    for model in MIG_MODELS:
        for profile in model.profiles:
            if found.setdefault(profile.name, profile.gpu_fraction) != profile.gpu_fraction:
                raise AssertionError(f"profile {profile.name} holds different shares of different GPUs")
    return MappingProxyType(found)


# Every profile name of the table and the share of its GPU it holds: the same for every model that has it, so the
# recording rules can look a share up by the profile name alone (pod series carry no model).
PROFILE_GPU_FRACTIONS: Mapping[str, Fraction] = _fractions()


def gpu_fraction(profile: str) -> Fraction:
    """The share of its GPU a MIG instance of `profile` holds: from the table, else its GPU-instance slices out of 7
    (1 for a name that says neither)."""
    known = PROFILE_GPU_FRACTIONS.get(profile)
    if known is not None:
        return known
    match = _FALLBACK.match(profile)
    if match is None:
        return Fraction(1)
    return min(Fraction(1), Fraction(int(match.group(1)), FALLBACK_COMPUTE_SLICES))
