"""A fake /proc for the scenario's processes: `<root>/<pid>/cgroup` and `<root>/<pid>/comm`.

The cgroup paths are those the kubelet's cgroup drivers produce for a container of a pod of a QoS class:

- systemd driver: `/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid, - as _>.slice/<runtime>-<id>.scope`
  (guaranteed pods sit directly under kubepods.slice: `kubepods-pod<uid>.slice`);
- cgroupfs driver: `/kubepods/<qos>/pod<uid>/<id>` (guaranteed: `/kubepods/pod<uid>/<id>`; CRI-O prefixes `crio-`).

cgroup v2 has one line `0::<path>`; cgroup v1 one line per hierarchy, `N:controllers:<path>`.
Processes that belong to no pod are put in a systemd service of the host.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from simulation.scenario import Container, Pod, Scenario


class CgroupLayout(StrEnum):
    V2_SYSTEMD = "v2-systemd"
    V2_CGROUPFS = "v2-cgroupfs"
    V1_SYSTEMD = "v1-systemd"
    V1_CGROUPFS = "v1-cgroupfs"

    @property
    def systemd(self) -> bool:
        return self in (CgroupLayout.V2_SYSTEMD, CgroupLayout.V1_SYSTEMD)

    @property
    def v1(self) -> bool:
        return self in (CgroupLayout.V1_SYSTEMD, CgroupLayout.V1_CGROUPFS)


class ContainerRuntime(StrEnum):
    CONTAINERD = "containerd"
    CRIO = "crio"
    DOCKER = "docker"


_SCOPE_PREFIX = {
    ContainerRuntime.CONTAINERD: "cri-containerd-",
    ContainerRuntime.CRIO: "crio-",
    ContainerRuntime.DOCKER: "docker-",
}

# cgroup v1 hierarchies as a typical host mounts them (hierarchy id, controllers); rdma stays at the root
_V1_HIERARCHIES = (
    (12, "hugetlb"),
    (11, "memory"),
    (10, "cpu,cpuacct"),
    (9, "devices"),
    (8, "pids"),
    (7, "blkio"),
    (6, "net_cls,net_prio"),
    (5, "freezer"),
    (4, "perf_event"),
    (3, "cpuset"),
    (2, "rdma"),
    (1, "name=systemd"),
)


def _layout(value: CgroupLayout | str) -> CgroupLayout:
    try:
        return CgroupLayout(value)
    except ValueError:
        raise ValueError(f"unknown cgroup layout {value!r} (one of {', '.join(CgroupLayout)})") from None


def _runtime(value: ContainerRuntime | str) -> ContainerRuntime:
    try:
        return ContainerRuntime(value)
    except ValueError:
        raise ValueError(f"unknown container runtime {value!r} (one of {', '.join(ContainerRuntime)})") from None


def cgroup_path(
    pod: Pod,
    container: Container,
    layout: CgroupLayout | str,
    runtime: ContainerRuntime | str = ContainerRuntime.CONTAINERD,
) -> str:
    """The cgroup path of a container of a pod, as the kubelet's cgroup driver names it."""
    layout, runtime = _layout(layout), _runtime(runtime)
    if pod.uid is None or container.id is None:
        raise ValueError(f"pod {pod.ref} has no uid or container id: load the scenario with load_scenario()")
    if layout.systemd:
        uid = pod.uid.replace("-", "_")
        leaf = f"{_SCOPE_PREFIX[runtime]}{container.id}.scope"
        if pod.qos == "guaranteed":
            return f"/kubepods.slice/kubepods-pod{uid}.slice/{leaf}"
        return f"/kubepods.slice/kubepods-{pod.qos}.slice/kubepods-{pod.qos}-pod{uid}.slice/{leaf}"
    leaf = f"crio-{container.id}" if runtime == ContainerRuntime.CRIO else container.id
    if pod.qos == "guaranteed":
        return f"/kubepods/pod{pod.uid}/{leaf}"
    return f"/kubepods/{pod.qos}/pod{pod.uid}/{leaf}"


def cgroup_file(path: str, layout: CgroupLayout | str) -> str:
    """The text of /proc/<pid>/cgroup for a process in cgroup `path`."""
    if _layout(layout).v1:
        return "".join(f"{n}:{ctl}:{'/' if ctl == 'rdma' else path}\n" for n, ctl in _V1_HIERARCHIES)
    return f"0::{path}\n"


def write_proc_tree(
    root: Path,
    scenario: Scenario,
    layout: CgroupLayout | str = CgroupLayout.V2_SYSTEMD,
    runtime: ContainerRuntime | str = ContainerRuntime.CONTAINERD,
) -> tuple[int, ...]:
    """Write `<root>/<pid>/cgroup` and `<root>/<pid>/comm` for every process of the scenario (GPU processes and the
    processes of pod containers). Returns the pids written, sorted.

    An exporter in its own container's PID namespace (`exporter_pid_namespace: container`) sees none of them: the
    tree is then left empty, as that container's /proc would be of other pods' processes.
    """
    layout = _layout(layout)
    root.mkdir(parents=True, exist_ok=True)
    if scenario.exporter_pid_namespace == "container":
        return ()
    names = {p.pid: p.name for p in scenario.processes}
    paths: dict[int, str] = {}
    for pod in scenario.pods:
        for container in pod.containers:
            for pid in container.pids:
                paths[pid] = cgroup_path(pod, container, layout, runtime)
                names.setdefault(pid, container.name[:15])
    for p in scenario.processes:
        paths.setdefault(p.pid, f"/system.slice/{p.name}.service")
    for g in scenario.gpus:
        if g.mps_server_pid is not None:  # the MPS control daemon, run by the device plugin or on the host
            paths.setdefault(g.mps_server_pid, "/system.slice/nvidia-mps.service")
            names.setdefault(g.mps_server_pid, "nvidia-cuda-mps")
    for pid, path in paths.items():
        d = root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup").write_text(cgroup_file(path, layout))
        (d / "comm").write_text(names[pid] + "\n")
    return tuple(sorted(paths))
