"""Which pod (and container) a process belongs to, read from its `/proc/<pid>/cgroup` file.

The kubelet puts every pod in a cgroup named after its UID, and the container runtime puts each container in a child
cgroup named after the container ID. The names depend on the cgroup driver and the runtime:

    cgroupfs driver   .../kubepods/burstable/pod<uid>/<container-id>
                      .../kubepods/pod<uid>/crio-<container-id>              (guaranteed QoS, CRI-O)
    systemd driver    .../kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_with_underscores>.slice/
                         cri-containerd-<id>.scope | crio-<id>.scope | docker-<id>.scope
    containerd, systemd cgroups, some setups:  .../kubepods-burstable-pod<uid>.slice:cri-containerd:<id>

A cgroup v1 file has one line per hierarchy (`12:memory:/kubepods/...`), cgroup v2 a single `0::/...` line; inside a
private cgroup namespace the path is relative and may start with `/../..`. Static pods have a 32-hex-digit UID (their
config hash) instead of a dashed UUID. Anything else yields None: parsing never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEX = "[0-9a-fA-F]"
_UUID_DASH = f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
_UUID_UNDERSCORE = f"{_HEX}{{8}}_{_HEX}{{4}}_{_HEX}{{4}}_{_HEX}{{4}}_{_HEX}{{12}}"
_HASH_UID = f"{_HEX}{{32}}"
_CONTAINER_ID = f"{_HEX}{{12,128}}"
_RUNTIME = "(?:cri-containerd|containerd|crio|cri-o|docker)"

_POD_CGROUPFS = re.compile(f"pod(?P<uid>{_UUID_DASH}|{_HASH_UID})")
_POD_SYSTEMD = re.compile(
    f"kubepods(?:-[a-z]+)?-pod(?P<uid>{_UUID_UNDERSCORE}|{_HASH_UID})\\.slice(?::{_RUNTIME}:(?P<cid>{_CONTAINER_ID}))?"
)
_CONTAINER_CGROUPFS = re.compile(f"(?:{_RUNTIME}-)?(?P<cid>{_CONTAINER_ID})")
_CONTAINER_SYSTEMD = re.compile(f"{_RUNTIME}-(?P<cid>{_CONTAINER_ID})\\.scope")
_MAX_FILE_CHARS = 64 * 1024  # a real cgroup file is a few hundred bytes


@dataclass(frozen=True, slots=True)
class CgroupOwner:
    """The pod a process runs in, and its container when the cgroup names one."""

    pod_uid: str  # lower case; dashed UUID, or the 32-hex-digit UID of a static pod
    container_id: str | None = None  # lower case hex, without a runtime prefix


def parse_cgroup_path(path: str) -> CgroupOwner | None:
    """The pod (and container) a single cgroup path names, or None."""
    segments = path.split("/")
    for i, segment in enumerate(segments):
        m = _POD_CGROUPFS.fullmatch(segment)
        systemd = False
        if m is None:
            m = _POD_SYSTEMD.fullmatch(segment)
            systemd = m is not None
        if m is None:
            continue
        uid = m["uid"].replace("_", "-").lower()
        container: str | None = m["cid"] if systemd else None
        if container is None and i + 1 < len(segments):
            child = (_CONTAINER_SYSTEMD if systemd else _CONTAINER_CGROUPFS).fullmatch(segments[i + 1])
            container = child["cid"] if child is not None else None
        return CgroupOwner(uid, container.lower() if container else None)
    return None


def parse_cgroup_file(text: str) -> CgroupOwner | None:
    """The pod (and container) of a whole `/proc/<pid>/cgroup` file, v1 or v2, or None.

    Every line is `hierarchy-id:controllers:path`. The first line that names a container wins; failing that, the
    first that names a pod.
    """
    if len(text) > _MAX_FILE_CHARS:
        return None
    pod_only: CgroupOwner | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        owner = parse_cgroup_path(parts[2])
        if owner is None:
            continue
        if owner.container_id is not None:
            return owner
        if pod_only is None:
            pod_only = owner
    return pod_only
