"""PID -> pod through /proc/<pid>/cgroup: every layout the kubelet and the runtimes write, and garbage refused
without an exception escaping."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.attribution.cgroup import CgroupOwner, parse_cgroup_file, parse_cgroup_path
from exporter.attribution.proc import ProcessOwners

POD = "1d2c3b4a-5f6e-4d8c-9b0a-112233445566"
CID = "4f" * 32

# One real-world line per layout (paths as they appear in /proc/<pid>/cgroup on such nodes).
EXAMPLES = [
    # cgroup v2, systemd driver, containerd
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD.replace('-', '_')}.slice/"
    f"cri-containerd-{CID}.scope",
    # cgroup v2, systemd driver, CRI-O, guaranteed QoS (no QoS slice)
    f"0::/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/crio-{CID}.scope",
    # cgroup v2, cgroupfs driver, containerd
    f"0::/kubepods/besteffort/pod{POD}/{CID}",
    # cgroup v2 seen from inside a private cgroup namespace
    f"0::/../../kubepods-besteffort-pod{POD.replace('-', '_')}.slice/cri-containerd-{CID}.scope",
    # cgroup v1, cgroupfs driver, docker
    f"12:memory:/kubepods/burstable/pod{POD}/{CID}\n11:cpu,cpuacct:/kubepods/burstable/pod{POD}/{CID}\n"
    f"1:name=systemd:/kubepods/burstable/pod{POD}/{CID}",
    # cgroup v1, systemd driver, docker
    f"10:devices:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD.replace('-', '_')}.slice/"
    f"docker-{CID}.scope\n0::/",
    # containerd with systemd cgroups in a kind-like node: the colon form
    f"0::/system.slice/containerd.service/kubepods-burstable-pod{POD.replace('-', '_')}.slice:cri-containerd:{CID}",
    # nested in a docker container (kind, dind)
    f"0::/docker/{'ab' * 32}/kubepods/pod{POD}/crio-{CID}",
]


@pytest.mark.parametrize("text", EXAMPLES)
def test_known_layouts(text: str) -> None:
    assert parse_cgroup_file(text) == CgroupOwner(POD, CID)


def test_static_pod_uid_is_a_config_hash() -> None:
    uid = "6a5e1b2c3d4e5f60718293a4b5c6d7e8"
    assert parse_cgroup_file(f"0::/kubepods/burstable/pod{uid}/{CID}") == CgroupOwner(uid, CID)


def test_pod_level_only_and_conmon() -> None:
    # a process in the pod cgroup itself, and CRI-O's conmon: the pod is known, the container is not
    assert parse_cgroup_file(f"0::/kubepods/pod{POD}") == CgroupOwner(POD, None)
    conmon = f"0::/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/crio-conmon-{CID}.scope"
    assert parse_cgroup_file(conmon) == CgroupOwner(POD, None)


def test_v1_prefers_a_line_naming_the_container() -> None:
    text = f"3:pids:/kubepods/pod{POD}\n2:memory:/kubepods/pod{POD}/{CID}\n"
    assert parse_cgroup_file(text) == CgroupOwner(POD, CID)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0::/",
        "0::/system.slice/containerd.service",
        "0::/user.slice/user-1000.slice/session-3.scope",
        "12:memory:/docker/" + "ab" * 32,
        f"0::/kubepods/burstable/pod{POD[:-1]}/{CID}",  # truncated uid
        f"0::/kubepods/burstable/pod{POD}x/{CID}",
        f"0::/kubepods-burstable-pod{POD}.slice/cri-containerd-{CID}.scope",  # systemd names use underscores
        f"kubepods/pod{POD}",  # not a cgroup line
        "\x00\xff",
    ],
)
def test_not_a_pod(text: str) -> None:
    assert parse_cgroup_file(text) is None


# ---- hypothesis: every combination of version, driver, runtime, QoS, namespace view and nesting ---------------------
runtimes = st.sampled_from(["containerd", "crio", "docker"])
qos_classes = st.sampled_from(["guaranteed", "burstable", "besteffort"])
prefixes = st.sampled_from(["", "/../..", "/..", f"/docker/{'cd' * 32}", "/kubelet.slice"])


def _systemd_path(uid: str, qos: str, runtime: str, cid: str | None) -> str:
    u = uid.replace("-", "_")
    if qos == "guaranteed":
        path = f"/kubepods.slice/kubepods-pod{u}.slice"
    else:
        path = f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{u}.slice"
    if cid is not None:
        scope = {"containerd": "cri-containerd", "crio": "crio", "docker": "docker"}[runtime]
        path += f"/{scope}-{cid}.scope"
    return path


def _cgroupfs_path(uid: str, qos: str, runtime: str, cid: str | None) -> str:
    path = "/kubepods" + ("" if qos == "guaranteed" else f"/{qos}") + f"/pod{uid}"
    if cid is not None:
        path += f"/crio-{cid}" if runtime == "crio" else f"/{cid}"
    return path


@given(
    uid=st.uuids().map(str),
    cid=st.none() | st.binary(min_size=32, max_size=32).map(bytes.hex),
    qos=qos_classes,
    runtime=runtimes,
    systemd=st.booleans(),
    v2=st.booleans(),
    prefix=prefixes,
    upper=st.booleans(),
)
def test_every_layout(
    uid: str, cid: str | None, qos: str, runtime: str, systemd: bool, v2: bool, prefix: str, upper: bool
) -> None:
    written_uid = uid.upper() if upper else uid
    path = prefix + (_systemd_path if systemd else _cgroupfs_path)(written_uid, qos, runtime, cid)
    if v2:
        text = f"0::{path}\n"
    else:
        text = f"13:misc:/\n12:memory:{path}\n4:cpu,cpuacct:{path}\n1:name=systemd:/init.scope\n"
    assert parse_cgroup_file(text) == CgroupOwner(uid, cid)
    assert parse_cgroup_path(path) == CgroupOwner(uid, cid)


@given(st.text(max_size=300))
def test_garbage_never_raises(text: str) -> None:
    owner = parse_cgroup_file(text)
    assert owner is None or isinstance(owner, CgroupOwner)


@given(st.lists(st.sampled_from(["0", ":", "/", "kubepods", "pod", POD, CID, ".slice", "-", "_", "\n"]), max_size=30))
def test_near_misses_never_raise(parts: list[str]) -> None:
    owner = parse_cgroup_file("".join(parts))
    if owner is not None:
        assert owner.pod_uid == POD


# ---- the proc tree ----
def _write(root: Path, pid: int, text: str | bytes) -> None:
    (root / str(pid)).mkdir(parents=True)
    data = text.encode() if isinstance(text, str) else text
    (root / str(pid) / "cgroup").write_bytes(data)


def test_process_owners_over_a_proc_root(tmp_path: Path) -> None:
    other = str(uuid.UUID(int=7))
    _write(tmp_path, 100, EXAMPLES[0])
    _write(tmp_path, 200, f"0::/kubepods/pod{other}/{'12' * 32}")
    _write(tmp_path, 300, "0::/system.slice/sshd.service")
    _write(tmp_path, 400, b"\xff\xfe not utf-8")
    owners = ProcessOwners(tmp_path)
    assert owners.available()
    assert owners.owner_of(100) == CgroupOwner(POD, CID)
    assert owners.owner_of(999) is None
    assert owners.owner_of(-1) is None
    lookup = owners.owners_of([100, 200, 300, 400, 999, 100])
    assert lookup.owners == {100: CgroupOwner(POD, CID), 200: CgroupOwner(other, "12" * 32)}
    assert lookup.not_in_pod == 1
    assert lookup.unreadable == 2


def test_missing_proc_root(tmp_path: Path) -> None:
    owners = ProcessOwners(tmp_path / "host" / "proc")
    assert not owners.available()
    assert owners.owner_of(1) is None
