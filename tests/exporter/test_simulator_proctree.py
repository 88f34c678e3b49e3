"""The fake /proc tree: cgroup files in the layouts the kubelet's cgroup drivers produce, and comm files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulation import (
    CgroupLayout,
    ContainerRuntime,
    build_scenario,
    cgroup_path,
    load_scenario,
    write_proc_tree,
)
from simulation.proctree import cgroup_file
from simulation.scenario import Container, Pod

UID = "0b9f53c2-5a1e-4f8e-9d2a-3c4b5d6e7f80"
CID = "4f2a" * 16


def pod(qos: str) -> tuple[Pod, Container]:
    c = Container(name="app", id=CID)
    return Pod(namespace="ns", name="p", uid=UID, qos=qos, containers=(c,)), c  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("layout", "qos", "runtime", "expected"),
    [
        (
            "v2-systemd",
            "burstable",
            "containerd",
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b9f53c2_5a1e_4f8e_9d2a_3c4b5d6e7f80.slice"
            f"/cri-containerd-{CID}.scope",
        ),
        (
            "v2-systemd",
            "guaranteed",
            "crio",
            f"/kubepods.slice/kubepods-pod0b9f53c2_5a1e_4f8e_9d2a_3c4b5d6e7f80.slice/crio-{CID}.scope",
        ),
        (
            "v1-systemd",
            "besteffort",
            "docker",
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0b9f53c2_5a1e_4f8e_9d2a_3c4b5d6e7f80.slice"
            f"/docker-{CID}.scope",
        ),
        ("v2-cgroupfs", "burstable", "containerd", f"/kubepods/burstable/pod{UID}/{CID}"),
        ("v1-cgroupfs", "guaranteed", "containerd", f"/kubepods/pod{UID}/{CID}"),
        ("v1-cgroupfs", "besteffort", "crio", f"/kubepods/besteffort/pod{UID}/crio-{CID}"),
    ],
)
def test_cgroup_paths_per_driver_qos_and_runtime(layout: str, qos: str, runtime: str, expected: str) -> None:
    p, c = pod(qos)
    assert cgroup_path(p, c, layout, runtime) == expected


def test_cgroup_file_v2_is_one_unified_line_and_v1_one_line_per_hierarchy() -> None:
    assert cgroup_file("/a/b", CgroupLayout.V2_SYSTEMD) == "0::/a/b\n"
    *lines, unified = cgroup_file("/a/b", CgroupLayout.V1_CGROUPFS).splitlines()
    assert len(lines) == 12
    for line in lines:
        n, controllers, path = line.split(":", 2)
        assert n.isdigit() and controllers
        assert path == ("/" if controllers == "rdma" else "/a/b")
    assert "1:name=systemd:/a/b" in lines
    assert any(line.startswith("6:memory:") for line in lines)
    assert unified == "0::/a/b"  # a hybrid host's unified hierarchy


def test_on_a_hybrid_host_the_cgroupfs_drivers_unified_line_names_the_runtime_not_the_pod() -> None:
    path = f"/kubepods/burstable/pod{UID}/{CID}"
    assert cgroup_file(path, CgroupLayout.V1_CGROUPFS, "crio").splitlines()[-1] == "0::/system.slice/crio.service"
    assert cgroup_file(path, CgroupLayout.V1_SYSTEMD, "crio").splitlines()[-1] == f"0::{path}"


@pytest.mark.parametrize("layout", list(CgroupLayout))
def test_write_proc_tree_covers_every_process(tmp_path: Path, layout: CgroupLayout) -> None:
    s = load_scenario("shared")
    written = write_proc_tree(tmp_path, s, layout)
    gpu_pids = {p.pid for p in s.processes}
    container_pids = {pid for p in s.pods for c in p.containers for pid in c.pids}
    assert set(written) == gpu_pids | container_pids
    for pod_ in s.pods:
        for c in pod_.containers:
            for pid in c.pids:
                text = (tmp_path / str(pid) / "cgroup").read_text()
                assert cgroup_path(pod_, c, layout) in text
                assert text.endswith("\n")
    assert (tmp_path / "61003" / "comm").read_text() == "vllm\n"
    assert (tmp_path / "61090" / "comm").read_text() == "log-shipper\n"  # a sidecar's process: its container name


def test_a_process_outside_any_pod_lives_in_a_host_service(tmp_path: Path) -> None:
    s = load_scenario("faulty")
    write_proc_tree(tmp_path, s, "v2-systemd")
    assert (tmp_path / "71009" / "cgroup").read_text() == "0::/system.slice/nv-hostengine.service\n"


def test_unknown_layout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown cgroup layout .v3-magic. \(one of v2-systemd"):
        write_proc_tree(tmp_path, load_scenario("shared"), "v3-magic")


_SYSTEMD = re.compile(
    r"^/kubepods\.slice/(?:kubepods-(?P<qos>burstable|besteffort)\.slice/kubepods-(?P=qos)-pod|kubepods-pod)"
    r"(?P<uid>[0-9a-f_]{36})\.slice/(?:cri-containerd|crio|docker)-(?P<cid>[0-9a-f]{64})\.scope(?:/container)?$"
)
_CGROUPFS = re.compile(
    r"^/kubepods/(?:(?:burstable|besteffort)/)?pod(?P<uid>[0-9a-f-]{36})/(?:crio-)?(?P<cid>[0-9a-f]{64})$"
)


@given(
    seed=st.integers(0, 2**32),
    qos=st.sampled_from(["guaranteed", "burstable", "besteffort"]),
    layout=st.sampled_from(list(CgroupLayout)),
    runtime=st.sampled_from(list(ContainerRuntime)),
)
def test_every_path_names_its_pod_uid_and_container_id(
    seed: int, qos: str, layout: CgroupLayout, runtime: ContainerRuntime
) -> None:
    s = build_scenario(
        {"pods": [{"namespace": "n", "name": "p", "qos": qos, "containers": [{"name": "c", "pids": [7]}]}]}, seed=seed
    )
    p = s.pods[0]
    c = p.containers[0]
    path = cgroup_path(p, c, layout, runtime)
    m = (_SYSTEMD if layout.systemd else _CGROUPFS).match(path)
    assert m is not None, path
    uid = m.group("uid")
    assert (uid.replace("_", "-") if layout.systemd else uid) == p.uid
    assert m.group("cid") == c.id
    assert ("besteffort" in path) == (qos == "besteffort")
    assert ("burstable" in path) == (qos == "burstable")
