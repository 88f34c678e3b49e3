"""A fake /proc for the scenario's processes: `<root>/<pid>/cgroup` and `<root>/<pid>/comm`.

The cgroup paths are those the kubelet's cgroup drivers and the runtimes produce for a container of a pod of a QoS
class (tests/exporter/fixtures/cgroup holds one real file per layout, with its sources; the simulator writes exactly
that format):

- the pod: kubernetes pkg/kubelet/cm (qos_container_manager_linux.go: `kubepods`, then `burstable` or `besteffort`,
  guaranteed pods directly under it; pod_container_manager_linux.go: `pod<uid>`; cgroup_manager_linux.go `ToSystemd`:
  with the systemd driver each level is a slice named after its ancestors, `-` in the UID escaped as `_`):
  `/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice` or `/kubepods/<qos>/pod<uid>`;
- the container: containerd (internal/cri `getCgroupsPath`: `<parent slice>:cri-containerd:<id>` for systemd, which
  runc makes the scope `cri-containerd-<id>.scope`; `<parent>/<id>` for cgroupfs), CRI-O
  (internal/config/cgmgr: scope prefix `crio`, `crio-<id>.scope`; cgroupfs `<parent>/crio-<id>`), and crun under
  CRI-O on cgroup v2 with systemd, which moves the process into a sub-cgroup `container` of the scope (crun.1,
  `run.oci.systemd.subgroup`: "Defaults to `container` on cgroup v2").

cgroup v2 has one line `0::<path>`; cgroup v1 one line per hierarchy, `N:controllers:<path>`, and on a hybrid host
(systemd's default before v2) a last line `0::` for the unified hierarchy, which only the systemd driver sets: under
cgroupfs it names the runtime's service, not the pod. Processes that belong to no pod are put in a systemd service of
the host.
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
    CRIO_CRUN = "crio-crun"  # CRI-O running containers with crun
    DOCKER = "docker"


_SCOPE_PREFIX = {
    ContainerRuntime.CONTAINERD: "cri-containerd-",
    ContainerRuntime.CRIO: "crio-",
    ContainerRuntime.CRIO_CRUN: "crio-",
    ContainerRuntime.DOCKER: "docker-",
}
_SERVICE = {
    ContainerRuntime.CONTAINERD: "containerd",
    ContainerRuntime.CRIO: "crio",
    ContainerRuntime.CRIO_CRUN: "crio",
    ContainerRuntime.DOCKER: "docker",
}

# cgroup v1 hierarchies as a typical host mounts them (hierarchy id, controllers); rdma stays at the root
_V1_HIERARCHIES = (
    (12, "cpuset"),
    (11, "hugetlb"),
    (10, "perf_event"),
    (9, "net_cls,net_prio"),
    (8, "blkio"),
    (7, "rdma"),
    (6, "memory"),
    (5, "freezer"),
    (4, "devices"),
    (3, "pids"),
    (2, "cpu,cpuacct"),
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
        if runtime is ContainerRuntime.CRIO_CRUN and not layout.v1:
            leaf += "/container"
        if pod.qos == "guaranteed":
            return f"/kubepods.slice/kubepods-pod{uid}.slice/{leaf}"
        return f"/kubepods.slice/kubepods-{pod.qos}.slice/kubepods-{pod.qos}-pod{uid}.slice/{leaf}"
    leaf = f"crio-{container.id}" if runtime in (ContainerRuntime.CRIO, ContainerRuntime.CRIO_CRUN) else container.id
    if pod.qos == "guaranteed":
        return f"/kubepods/pod{pod.uid}/{leaf}"
    return f"/kubepods/{pod.qos}/pod{pod.uid}/{leaf}"


def cgroup_file(
    path: str, layout: CgroupLayout | str, runtime: ContainerRuntime | str = ContainerRuntime.CONTAINERD
) -> str:
    """The text of /proc/<pid>/cgroup for a process in cgroup `path`."""
    layout = _layout(layout)
    if layout.v1:
        in_pod = path.startswith("/kubepods")
        unified = path if layout.systemd or not in_pod else f"/system.slice/{_SERVICE[_runtime(runtime)]}.service"
        lines = "".join(f"{n}:{ctl}:{'/' if ctl == 'rdma' else path}\n" for n, ctl in _V1_HIERARCHIES)
        return f"{lines}0::{unified}\n"
    return f"0::{path}\n"


def write_proc_tree(
    root: Path,
    scenario: Scenario,
    layout: CgroupLayout | str = CgroupLayout.V2_SYSTEMD,
    runtime: ContainerRuntime | str = ContainerRuntime.CONTAINERD,
) -> tuple[int, ...]:
    """Write `<root>/<pid>/cgroup` and `<root>/<pid>/comm` for every process of the scenario (GPU processes and the
    processes of pod containers). Returns the pids written, sorted.

    An exporter in its own container's PID namespace (`exporter_pid_namespace: container`) sees only the processes
    of that namespace: the GPU processes given a `namespace_pid` (its own pod's), under that PID, as that container's
    /proc would show them.
    """
    layout = _layout(layout)
    root.mkdir(parents=True, exist_ok=True)
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
    if scenario.exporter_pid_namespace == "container":
        seen = {p.namespace_pid: p.pid for p in scenario.processes if p.namespace_pid is not None}
        paths = {ns_pid: paths[pid] for ns_pid, pid in seen.items()}
        names = {ns_pid: names[pid] for ns_pid, pid in seen.items()}
    for pid, path in paths.items():
        d = root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup").write_text(cgroup_file(path, layout, runtime))
        (d / "comm").write_text(names[pid] + "\n")
    return tuple(sorted(paths))
