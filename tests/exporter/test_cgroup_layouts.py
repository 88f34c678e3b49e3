"""PID -> pod on every node layout, from whole `/proc/<pid>/cgroup` files in their real format (tests/exporter/fixtures/
cgroup), the simulator held to the same format, and PID reuse never crediting a new process to the old pod.

Where each format comes from:
- the pod's cgroup: kubernetes/kubernetes pkg/kubelet/cm: qos_container_manager_linux.go (`kubepods`, `burstable`,
  `besteffort`; guaranteed pods directly under `kubepods`), pod_container_manager_linux.go (`pod` + UID), and
  cgroup_manager_linux.go (`ToSystemd`: `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`,
  `escapeSystemdCgroupName` turning `-` into `_`);
- containerd's container cgroup: internal/cri `getCgroupsPath` (`<slice>:cri-containerd:<id>` with systemd, which runc
  libcontainer/cgroups/systemd `getUnitName` makes `cri-containerd-<id>.scope`; `<parent>/<id>` with cgroupfs);
- CRI-O's: internal/config/cgmgr/cgmgr_linux.go (scope prefix `crio`: `crio-<id>.scope`; cgroupfs `crio-<id>`; crun's
  `container` sub-cgroup, `crunContainerCgroupManager`), and crun.1 (`run.oci.systemd.subgroup`: `container` by
  default on cgroup v2);
- the files: proc(5) `/proc/[pid]/cgroup` (`hierarchy-ID:controller-list:cgroup-path`, one line per v1 hierarchy,
  `0::` for v2); a hybrid host (systemd's default before cgroup v2) adds the unified hierarchy's `0::` line, which the
  cgroupfs driver never sets, so there it names the runtime's service.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from exporter.attribution.attribute import attribute
from exporter.attribution.cgroup import CgroupOwner, parse_cgroup_file
from exporter.attribution.directory import StaticPodDirectory
from exporter.attribution.proc import ProcessOwners
from exporter.kubelet.podresources import ContainerDevices, ContainerResources, PodResources
from exporter.snapshot import DeviceReading, GpuIdentity, ProcessUsage, ShareMethod
from simulation.proctree import cgroup_file, cgroup_path
from simulation.scenario import Container, Pod
from toolkit.pods import Pod as PodMeta

FIXTURES = Path(__file__).parent / "fixtures" / "cgroup"

# fixture, QoS class, pod UID, container id
CASES = [
    ("v2-systemd-containerd", "burstable", "c963cfe0-afae-4a3b-b909-6a04e7d80068",
     "d96e5adfa2beee31ac8be7d742840d2b26b563b1e794ee14e1454c40c439f34a"),
    ("v2-systemd-crio", "besteffort", "53d23c0b-df43-4fb2-99fc-fc64e7aa8576",
     "1333bc1cfe6c2b036820212c6959935406e82a012b5c5cd1e7ca430e92ac3d42"),
    ("v2-systemd-crio-crun", "guaranteed", "7972a36d-51b3-4a6c-a005-0ed31a6e72b9",
     "a0187b4d51209e8f332726d0356a41526977a41b730bed9c94a67f00f335c357"),
    ("v2-cgroupfs-containerd", "besteffort", "542861cd-55e7-467e-ae6a-c4a9e89c5bc7",
     "67a9b05c7dfb27e8d775f593ce3ad2b28491cabea0afe35617bcc74d6d683cf8"),
    ("v2-cgroupfs-crio", "guaranteed", "3e1dcfb5-92bd-431c-b4d2-ea1614daf467",
     "c3b1b366b1852ac840e0529930b9f6091570bc621832c9e233aa391808fc2081"),
    ("v1-systemd-containerd", "burstable", "41bc858e-b0b4-462e-8e18-a3634891a61b",
     "3be4c78bb4ae3dd3447e604605f9eb87e7db270d1e2162169fbba63829d144e4"),
    ("v1-systemd-crio", "guaranteed", "92ed2607-383c-417b-9756-a407dbeece42",
     "4786a2284cfdb1e79e1fcc46a5157170cc8fc5260352a9bf0e56d5813cd158af"),
    ("v1-cgroupfs-containerd", "burstable", "55fac783-a599-4165-b1dd-1b80230a102c",
     "4617edaaa37feba2ec246343272be0eae810b08a72880e4ab8a6acd699882356"),
    ("v1-cgroupfs-crio", "besteffort", "281f772f-6ed2-49e4-9532-b79f8e41a78f",
     "200c54e9b096ebf51efc20c9dcf8bef6b4ec0652edc8144167e0e2a62a27ead5"),
]  # fmt: skip


def test_every_fixture_is_a_case_and_every_case_a_fixture() -> None:
    assert {p.stem for p in FIXTURES.glob("*.cgroup")} == {case[0] for case in CASES}


@pytest.mark.parametrize(("fixture", "qos", "uid", "cid"), CASES, ids=[c[0] for c in CASES])
def test_a_real_cgroup_file_names_its_pod_and_container(fixture: str, qos: str, uid: str, cid: str) -> None:
    text = (FIXTURES / f"{fixture}.cgroup").read_text()
    assert parse_cgroup_file(text) == CgroupOwner(uid, cid)


@pytest.mark.parametrize(("fixture", "qos", "uid", "cid"), CASES, ids=[c[0] for c in CASES])
def test_the_simulator_writes_the_real_format(fixture: str, qos: str, uid: str, cid: str) -> None:
    version, driver, *runtime = fixture.split("-")
    pod = Pod(namespace="ns", name="p", uid=uid, qos=qos, containers=(Container(name="c", id=cid),))  # type: ignore[arg-type]
    layout = f"{version}-{driver}"
    path = cgroup_path(pod, pod.containers[0], layout, "-".join(runtime))
    assert cgroup_file(path, layout, "-".join(runtime)) == (FIXTURES / f"{fixture}.cgroup").read_text()


# ---- PID reuse ------------------------------------------------------------------------------------------------------
GPU = GpuIdentity(0, f"GPU-{uuid.UUID(int=1)}", "NVIDIA H100 80GB HBM3", "0000:18:00.0", 0)


def _pod(name: str, replica: int) -> PodResources:
    devices = (ContainerDevices("nvidia.com/gpu", (f"{GPU.uuid}::{replica}",)),)
    return PodResources("team", name, (ContainerResources("main", devices),))


def test_a_reused_pid_is_credited_to_the_pod_it_runs_in_now_never_to_the_old_one(tmp_path: Path) -> None:
    """Every cycle reads the cgroup afresh: PID 4242 ran in pod `old`; after it exited the kernel handed the PID to a
    process of pod `new`. Its figures go to `new` from the first cycle it is seen there, and `old` gets none of them."""
    (old_uid, old_cid), (new_uid, new_cid) = [(str(uuid.UUID(int=n)), f"{n:064x}") for n in (10, 20)]
    directory = StaticPodDirectory(
        [
            PodMeta("team", "old", old_uid, phase="Running", containers={old_cid: "main"}),
            PodMeta("team", "new", new_uid, phase="Running", containers={new_cid: "main"}),
        ]
    )
    pods = [_pod("old", 0), _pod("new", 1)]
    owners = ProcessOwners(tmp_path)
    (tmp_path / "4242").mkdir()
    cgroup = tmp_path / "4242" / "cgroup"

    def cycle(sm: float) -> dict[str, tuple[ShareMethod, float | None, int | None]]:
        process = ProcessUsage(4242, 3 << 30, sm)
        device = DeviceReading(GPU, True, {"gpu_util": sm, "fb_used": 4 << 30}, processes=(process,))
        result = attribute([device], pods, owner_of=owners.owner_of, directory=directory)
        return {u.pod.name: (u.share, u.utilization_percent, u.memory_used_bytes) for u in result.uses}

    cgroup.write_text(
        f"0::/kubepods.slice/kubepods-pod{old_uid.replace('-', '_')}.slice/cri-containerd-{old_cid}.scope\n"
    )
    assert cycle(40.0) == {"old": (ShareMethod.PROCESS, 40.0, 3 << 30), "new": (ShareMethod.PROCESS, 0.0, 0)}
    cgroup.write_text(
        f"0::/kubepods.slice/kubepods-pod{new_uid.replace('-', '_')}.slice/cri-containerd-{new_cid}.scope\n"
    )
    assert cycle(70.0) == {"old": (ShareMethod.PROCESS, 0.0, 0), "new": (ShareMethod.PROCESS, 70.0, 3 << 30)}
    cgroup.unlink()  # gone between the NVML list and the cgroup read: credited to no pod, and said so
    after = cycle(70.0)
    assert {name: share for name, (share, _, _) in after.items()} == {"old": ShareMethod.UNATTRIBUTED} | {
        "new": ShareMethod.UNATTRIBUTED
    }
