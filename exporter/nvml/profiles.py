"""MIG profile names ("1g.10gb", "1c.3g.40gb", "1g.10gb+me"): from a MIG device's name, or from its attributes."""

from __future__ import annotations

import math
import re

# "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", "... MIG 1g.10gb+me"
_PROFILE_IN_NAME = re.compile(r"\bMIG\s+((?:\d+c\.)?\d+g\.\d+gb(?:\+[a-z]+)*)\s*$", re.IGNORECASE)


def profile_from_name(name: str) -> str | None:
    """The profile at the end of a MIG device name, or None when the name does not carry one."""
    match = _PROFILE_IN_NAME.search(name.strip())
    return match.group(1).lower() if match else None


def profile_from_attributes(gpu_slices: int, compute_slices: int, memory_mib: int) -> str:
    """The profile name NVIDIA tools give an instance of this size: `<g>g.<GB>gb`, `<c>c.` first when the compute
    instance holds fewer slices than its GPU instance. Memory is rounded up to whole GiB (4864 MiB -> 5gb)."""
    if gpu_slices < 1 or memory_mib < 0 or compute_slices < 0:
        raise ValueError(f"not a MIG instance size: {gpu_slices} slices, {compute_slices} compute, {memory_mib} MiB")
    gigabytes = math.ceil(memory_mib / 1024)
    prefix = f"{compute_slices}c." if 0 < compute_slices < gpu_slices else ""
    return f"{prefix}{gpu_slices}g.{gigabytes}gb"
