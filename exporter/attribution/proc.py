"""PID -> pod, through the cgroup files of a proc tree whose root is a parameter.

NVML reports host PIDs, so the proc root must be the host's (`/proc` with hostPID, or the host's /proc mounted, e.g.
at /host/proc). Tests and the simulator point it at a fake tree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from exporter.attribution.cgroup import CgroupOwner, parse_cgroup_file

_MAX_READ = 64 * 1024


@dataclass(frozen=True, slots=True)
class OwnerLookup:
    """The owners of a set of PIDs, and how many could not be read or named no pod."""

    owners: Mapping[int, CgroupOwner]
    unreadable: int = 0  # no such process, permission denied, not text
    not_in_pod: int = 0  # readable, but the cgroup names no pod (a host process)


class ProcessOwners:
    """Reads `<proc_root>/<pid>/cgroup`; every call reads afresh, so a reused PID is never mistaken for the old one."""

    def __init__(self, proc_root: Path | str = Path("/proc")) -> None:
        self.proc_root = Path(proc_root)
        self._prefix = str(self.proc_root) + "/"

    def available(self) -> bool:
        """Whether the proc root exists at all (a missing host /proc mount is a configuration error worth a log)."""
        return self.proc_root.is_dir()

    def owner_of(self, pid: int) -> CgroupOwner | None:
        text = self._read(pid)
        return None if text is None else parse_cgroup_file(text)

    def owners_of(self, pids: Iterable[int]) -> OwnerLookup:
        owners: dict[int, CgroupOwner] = {}
        unreadable = not_in_pod = 0
        for pid in set(pids):
            text = self._read(pid)
            if text is None:
                unreadable += 1
                continue
            owner = parse_cgroup_file(text)
            if owner is None:
                not_in_pod += 1
            else:
                owners[pid] = owner
        return OwnerLookup(owners, unreadable, not_in_pod)

    def _read(self, pid: int) -> str | None:
        if pid <= 0:
            return None
        try:
            with open(f"{self._prefix}{pid}/cgroup", "rb", buffering=0) as f:
                data = f.read(_MAX_READ)
            return data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return None
