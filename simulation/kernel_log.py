"""The simulated node's kernel log: the `NVRM: Xid` lines the NVIDIA driver prints, as /dev/kmsg gives them.

Every XID the driver raises is printed (open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c,
`krcReportXid`: "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s", with " GPU-I:%02u" and " GPU-CI:%02u"
inside the parentheses when the error is attributed to a MIG instance), some only there: Xid 79 before the releases
that post it (osinit.c `osHandleGpuLost`), Xid 119 on every GSP RPC timeout (kernel_gsp.c `_kgspLogXid119`).
/dev/kmsg gives each record as "<priority>,<sequence>,<microseconds since boot>,<flags>;<text>" (the kernel's
Documentation/ABI/testing/dev-kmsg). Records go to `path` when one is given (a file the exporter under test reads
in place of /dev/kmsg), one per line, and are kept in `records` in any case.
"""

from __future__ import annotations

import threading
from pathlib import Path

# the driver prints with KERN_CONT and no level (kernel-open/nvidia/os-interface.c `nv_printf`), so its lines take the
# kernel's default message level, 4 (warning)
KERN_WARNING = 4


def kernel_address(pci_bus_id: str) -> str:
    """ "0000:18:00" from NVML's "00000000:18:00.0": the domain in 4 digits, no function, as the driver prints it."""
    domain, bus, rest = pci_bus_id.lower().split(":")
    device = rest.split(".")[0]
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}"


class KernelLog:
    """The node's /dev/kmsg records; safe across threads."""

    def __init__(self, path: Path | None, boot_offset_s: float = 3600.0) -> None:
        self.path = path
        self._boot_offset_s = boot_offset_s  # the node booted this long before scenario time 0
        self._lock = threading.Lock()
        self._sequence = 0
        self.records: list[str] = []
        if path is not None:
            path.write_text("")

    def xid(
        self,
        t: float,
        pci_bus_id: str,
        xid: int,
        message: str,
        *,
        pid: int | None = None,
        name: str = "<unknown>",
        instance: tuple[int, int] | None = None,
    ) -> str:
        """Print an Xid line for the GPU at `pci_bus_id` at scenario time `t`; returns the record."""
        where = kernel_address(pci_bus_id)
        if instance is not None:
            where += f" GPU-I:{instance[0]:02d} GPU-CI:{instance[1]:02d}"
        who = "'<unknown>'" if pid is None else str(pid)
        return self.write(t, f"NVRM: Xid (PCI:{where}): {xid}, pid={who}, name={name}, {message}")

    def write(self, t: float, text: str) -> str:
        with self._lock:
            microseconds = int((self._boot_offset_s + max(t, 0.0)) * 1e6)
            record = f"{KERN_WARNING},{self._sequence},{microseconds},-;{text}"
            self._sequence += 1
            self.records.append(record)
            if self.path is not None:
                with self.path.open("a") as out:
                    out.write(record + "\n")
            return record
