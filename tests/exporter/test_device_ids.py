"""Device IDs as the kubelet reports them (NVIDIA k8s-device-plugin and dcgm-exporter's kubernetes mapping): every
documented format parses, prints back the same, and anything else is refused with DeviceIdError only."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.kubelet.device_ids import DeviceIdError, DeviceKind, DeviceRef, ResourceNames, parse_device_id

GPU = "GPU-8f6c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
MIG = "MIG-1b2c3d4e-5f60-4718-9a0b-c1d2e3f40516"

uuids = st.uuids().map(str) | st.uuids().map(lambda u: str(u).upper())
small = st.integers(min_value=0, max_value=10_000)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GPU, DeviceRef(DeviceKind.GPU, uuid=GPU)),
        (f"{GPU}::3", DeviceRef(DeviceKind.GPU, uuid=GPU, replica=3)),
        (MIG, DeviceRef(DeviceKind.MIG, uuid=MIG)),
        (f"{MIG}::0", DeviceRef(DeviceKind.MIG, uuid=MIG, replica=0)),
        (f"MIG-{GPU}/7/0", DeviceRef(DeviceKind.MIG_LEGACY, uuid=GPU, gpu_instance=7, compute_instance=0)),
        ("nvidia0", DeviceRef(DeviceKind.GKE, minor=0)),
        ("nvidia3/gi5", DeviceRef(DeviceKind.GKE, minor=3, gpu_instance=5)),
        ("nvidia1/vgpu2", DeviceRef(DeviceKind.GKE, minor=1, vgpu=2)),
        ("nvidia1/gi2/vgpu4", DeviceRef(DeviceKind.GKE, minor=1, gpu_instance=2, vgpu=4)),
    ],
)
def test_documented_formats(text: str, expected: DeviceRef) -> None:
    ref = parse_device_id(text)
    assert ref == expected
    assert ref.device_id == text


def test_shared_and_mig_flags() -> None:
    assert parse_device_id(f"{GPU}::1").shared
    assert parse_device_id("nvidia0/vgpu1").shared
    assert not parse_device_id(GPU).shared
    assert parse_device_id(MIG).is_mig
    assert parse_device_id(f"MIG-{GPU}/1/0").is_mig
    assert parse_device_id("nvidia0/gi1").is_mig
    assert not parse_device_id("nvidia0").is_mig


@pytest.mark.parametrize(
    "text",
    [
        "",
        "GPU-",
        "GPU-1234",
        f"{GPU}::",
        f"{GPU}::-1",
        f"{GPU}::01",
        f"{GPU}::1::2",
        f"{GPU} ",
        f"gpu-{GPU[4:]}",
        f"MIG-{GPU}",  # the legacy form needs its /gi/ci
        f"MIG-{GPU}/1",
        "nvidia",
        "nvidia01",
        "nvidia0/vgpu1/gi2",
        "nvidia0/gi",
        "0",
        "/dev/nvidia0",
    ],
)
def test_malformed_ids_are_refused(text: str) -> None:
    with pytest.raises(DeviceIdError, match="unknown device ID"):
        parse_device_id(text)


@given(
    kind=st.sampled_from(list(DeviceKind)),
    gpu_uuid=uuids,
    gi=small,
    ci=small,
    minor=small,
    gke_gi=st.none() | small,
    vgpu=st.none() | small,
    replica=st.none() | small,
)
def test_round_trip(
    kind: DeviceKind,
    gpu_uuid: str,
    gi: int,
    ci: int,
    minor: int,
    gke_gi: int | None,
    vgpu: int | None,
    replica: int | None,
) -> None:
    if kind is DeviceKind.GPU:
        ref = DeviceRef(kind, uuid=f"GPU-{gpu_uuid}", replica=replica)
    elif kind is DeviceKind.MIG:
        ref = DeviceRef(kind, uuid=f"MIG-{gpu_uuid}", replica=replica)
    elif kind is DeviceKind.MIG_LEGACY:
        ref = DeviceRef(kind, uuid=f"GPU-{gpu_uuid}", gpu_instance=gi, compute_instance=ci, replica=replica)
    else:
        ref = DeviceRef(kind, minor=minor, gpu_instance=gke_gi, vgpu=vgpu, replica=replica)
    assert parse_device_id(ref.device_id) == ref


@given(st.text(max_size=120))
def test_any_text_parses_or_is_refused_cleanly(text: str) -> None:
    try:
        ref = parse_device_id(text)
    except DeviceIdError as error:
        assert "\n" not in str(error)
        return
    assert ref.device_id == text


@given(st.text(alphabet="GPUMIGnvidagv-/:0123456789abcdef", max_size=70))
def test_near_misses_parse_or_are_refused_cleanly(text: str) -> None:
    try:
        ref = parse_device_id(text)
    except DeviceIdError:
        return
    assert ref.device_id == text


def test_real_uuid_shapes() -> None:
    for _ in range(20):
        value = f"GPU-{uuid.uuid4()}"
        assert parse_device_id(value).uuid == value


def test_resource_names() -> None:
    names = ResourceNames.of(["example.com/vgpu", " "])
    assert "nvidia.com/gpu" in names
    assert "nvidia.com/gpu.shared" in names
    assert "nvidia.com/mig-1g.10gb" in names
    assert "nvidia.com/mig-3g.40gb" in names
    assert "example.com/vgpu" in names
    assert "amd.com/gpu" not in names
    assert "cpu" not in names
    assert names.shared("nvidia.com/gpu.shared")
    assert not names.shared("nvidia.com/gpu")
    with pytest.raises(ValueError, match="no domain"):
        ResourceNames.of(["gpu"])
