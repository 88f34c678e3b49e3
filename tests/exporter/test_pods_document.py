"""The /pods document (toolkit.pods_contract) built from snapshots: schema, utilization windows, sample timestamps, and
pods that come and go."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exporter.attribution.pods_builder import PodsDocumentBuilder
from exporter.pods_answers import SerializedPods
from exporter.snapshot import (
    DeviceReading,
    GpuIdentity,
    MigIdentity,
    PodDeviceUse,
    PodRef,
    ShareMethod,
    Snapshot,
)
from toolkit.pods_contract import SCHEMA_VERSION, PodsDocumentError, encode_node_pods, parse_node_pods

T0 = 1_760_000_000.0
GIB = 1024**3
GPU0 = GpuIdentity(0, f"GPU-{uuid.UUID(int=1)}", "NVIDIA H100 80GB HBM3", "0000:3B:00.0", 0)
GPU1 = GpuIdentity(1, f"GPU-{uuid.UUID(int=2)}", "NVIDIA A100-SXM4-80GB", "0000:5B:00.0", 1, mig_enabled=True)
MIG = MigIdentity(GPU1, 0, f"MIG-{uuid.UUID(int=3)}", 7, 0, "1g.10gb")
DEVICES = (
    DeviceReading(GPU0, True, {"gpu_util": 50.0, "fb_used": 20 * GIB, "fb_total": 80 * GIB, "power_usage": 400_000}),
    DeviceReading(GPU1, True, {"fb_total": 80 * GIB}),
    DeviceReading(MIG, True, {"fb_used": 2 * GIB, "fb_total": 10 * GIB}),
)


def use(
    name: str,
    device: str,
    utilization: float | None,
    *,
    share: ShareMethod = ShareMethod.PROCESS,
    namespace: str = "ml",
    container: str = "main",
    energy: float | None = None,
) -> PodDeviceUse:
    return PodDeviceUse(
        PodRef(namespace, name, container, uid=f"uid-{name}"),
        device,
        share,
        utilization,
        3 * GIB,
        power_milliwatts=150_000 if share is not ShareMethod.MIG else None,
        energy_millijoules=energy,
        sharing_pods=2 if share is ShareMethod.PROCESS else 1,
    )


def snapshot(at: float, *uses: PodDeviceUse, kubelet_up: bool | None = True) -> Snapshot:
    return Snapshot(taken_at=at, node="node-1", devices=DEVICES, pods=uses, kubelet_up=kubelet_up)


def test_schema_and_figures() -> None:
    builder = PodsDocumentBuilder(interval_seconds=1.0)
    document = builder(
        snapshot(
            T0,
            use("a", GPU0.uuid, 30.0, energy=2_500_000.0),
            use("b", GPU0.uuid, 20.0),
            use("m", MIG.uuid, None, share=ShareMethod.MIG, namespace="research"),
        )
    )
    assert document.api_version == SCHEMA_VERSION
    assert document.node == "node-1" and document.kubelet_up is True and document.interval_seconds == 1.0
    parsed = parse_node_pods(encode_node_pods(document))
    assert parsed == document
    assert [(p.namespace, p.name) for p in document.pods] == [("ml", "a"), ("ml", "b"), ("research", "m")]
    a = document.pods[0]
    assert a.uid == "uid-a"
    (figures,) = a.containers[0].devices
    assert figures.uuid == GPU0.uuid and figures.gpu == 0 and figures.gpu_uuid == GPU0.uuid
    assert figures.model == GPU0.model and figures.gpu_instance is None and figures.mig_profile is None
    assert figures.share == "process" and figures.sharing_pods == 2
    assert figures.utilization_percent == 30.0
    assert figures.memory_used_bytes == 3 * GIB and figures.memory_total_bytes == 80 * GIB
    assert figures.power_watts == 150.0 and figures.energy_joules == 2500.0
    (mig,) = document.pods[2].containers[0].devices
    assert (mig.uuid, mig.gpu, mig.gpu_uuid, mig.gpu_instance, mig.mig_profile) == (
        MIG.uuid,
        1,
        GPU1.uuid,
        7,
        "1g.10gb",
    )
    assert mig.share == "mig" and mig.utilization_percent is None and mig.memory_total_bytes == 10 * GIB
    assert mig.power_watts is None


def test_timestamps_are_sample_times_not_now() -> None:
    builder = PodsDocumentBuilder(interval_seconds=1.0)
    document = builder(snapshot(T0 - 3600, use("a", GPU0.uuid, 10.0)))
    expected = datetime.fromtimestamp(T0 - 3600, UTC)
    assert document.generated_at == expected
    assert document.pods[0].sampled_at == expected
    assert b'"sampled_at":"' in encode_node_pods(document)


def test_utilization_is_the_mean_over_the_window_actually_covered() -> None:
    builder = PodsDocumentBuilder(interval_seconds=1.0, window_seconds=10.0)
    document = builder(snapshot(T0, use("a", GPU0.uuid, 10.0)))
    assert document.pods[0].window_seconds == 1.0, "one sample covers one interval, not the whole window"
    for k in range(1, 5):
        document = builder(snapshot(T0 + k, use("a", GPU0.uuid, 10.0 + 10 * k)))
    assert document.pods[0].window_seconds == 5.0
    assert document.pods[0].containers[0].devices[0].utilization_percent == pytest.approx(30.0)  # 10..50
    for k in range(5, 30):
        document = builder(snapshot(T0 + k, use("a", GPU0.uuid, 90.0 if k >= 20 else 0.0)))
    assert document.pods[0].window_seconds == 10.0
    assert document.pods[0].containers[0].devices[0].utilization_percent == pytest.approx(90.0)


def test_the_window_is_given_without_clock_noise() -> None:
    """Sample times carry the jitter of the poll thread: the window is served to the millisecond (15, not 14.9999)."""
    builder = PodsDocumentBuilder(interval_seconds=1.0, window_seconds=60.0)
    for k in range(15):
        document = builder(snapshot(T0 + k * 0.9999925926, use("a", GPU0.uuid, 10.0)))
    assert document.pods[0].window_seconds == 15.0
    assert b'"window_seconds":15.0' in encode_node_pods(document)


def test_a_pod_that_leaves_and_returns_starts_a_new_window() -> None:
    builder = PodsDocumentBuilder(interval_seconds=1.0, window_seconds=60.0)
    for k in range(10):
        builder(snapshot(T0 + k, use("a", GPU0.uuid, 80.0), use("b", GPU0.uuid, 5.0)))
    gone = builder(snapshot(T0 + 10, use("b", GPU0.uuid, 5.0)))
    assert [p.name for p in gone.pods] == ["b"]
    back = builder(snapshot(T0 + 11, use("a", GPU0.uuid, 20.0), use("b", GPU0.uuid, 5.0)))
    a = back.pods[0]
    assert a.window_seconds == 1.0 and a.containers[0].devices[0].utilization_percent == 20.0
    assert back.pods[1].window_seconds == 12.0


def test_unknown_utilization_stays_unknown() -> None:
    builder = PodsDocumentBuilder(interval_seconds=1.0)
    for k in range(3):
        document = builder(snapshot(T0 + k, use("u", GPU0.uuid, None, share=ShareMethod.UNATTRIBUTED)))
    figures = document.pods[0].containers[0].devices[0]
    assert figures.share == "unattributed" and figures.utilization_percent is None


def test_the_same_snapshot_twice_counts_once() -> None:
    builder = PodsDocumentBuilder(interval_seconds=1.0)
    builder(snapshot(T0, use("a", GPU0.uuid, 0.0)))
    builder(snapshot(T0 + 1, use("a", GPU0.uuid, 100.0)))
    again = builder(snapshot(T0 + 1, use("a", GPU0.uuid, 100.0)))
    assert again.pods[0].containers[0].devices[0].utilization_percent == 50.0
    assert again.pods[0].window_seconds == 2.0


def test_containers_of_one_pod_and_no_pods() -> None:
    builder = PodsDocumentBuilder(interval_seconds=2.0)
    document = builder(
        snapshot(
            T0,
            use("a", GPU0.uuid, 10.0, container="worker"),
            use("a", MIG.uuid, None, container="aux", share=ShareMethod.MIG),
        )
    )
    assert [c.name for c in document.pods[0].containers] == ["aux", "worker"]
    empty = builder(snapshot(T0 + 2, kubelet_up=False))
    assert empty.pods == () and empty.kubelet_up is False
    with pytest.raises(ValueError, match="positive"):
        PodsDocumentBuilder(interval_seconds=0)


@given(
    interval=st.sampled_from([0.5, 1.0, 2.0, 5.0]),
    window=st.sampled_from([5.0, 30.0, 60.0]),
    values=st.lists(st.none() | st.floats(min_value=0, max_value=100), min_size=1, max_size=80),
)
@example(interval=0.5, window=5.0, values=[0.0, 0.0, 0.0, 0.25])  # a mean of 0.0625 is served as 0.062
def test_window_mean_and_span(interval: float, window: float, values: list[float | None]) -> None:
    builder = PodsDocumentBuilder(interval_seconds=interval, window_seconds=window)
    for k, value in enumerate(values):
        document = builder(snapshot(T0 + k * interval, use("a", GPU0.uuid, value)))
    pod = document.pods[0]
    newest = T0 + (len(values) - 1) * interval
    kept = [v for k, v in enumerate(values) if T0 + k * interval > newest - window]
    known = [v for v in kept if v is not None]
    reported = pod.containers[0].devices[0].utilization_percent
    if known:
        # served to a thousandth: off by at most half of one, and a half rounds to even (0.0625 -> 0.062)
        assert reported == pytest.approx(sum(known) / len(known), abs=0.0005 + 1e-12)
    else:
        assert reported is None
    assert pod.window_seconds <= window
    assert pod.window_seconds == pytest.approx(min(window, len(kept) * interval))
    assert pod.sampled_at == datetime.fromtimestamp(newest, UTC)


def test_a_figure_a_reader_would_refuse_is_never_published() -> None:
    """A driver that reports a megawatt for one pod: the document is built (msgspec checks bounds on decoding, not on
    building) but not serialized, so the poll loop keeps the previous one (tests/exporter/test_loop.py)."""
    builder = PodsDocumentBuilder(interval_seconds=1.0)
    sound = use("a", GPU0.uuid, 10.0)
    SerializedPods.of(builder(snapshot(T0, sound)))
    absurd = dataclasses.replace(sound, power_milliwatts=1e9)
    with pytest.raises(PodsDocumentError, match=r"pods\.0\.containers\.0\.devices\.0\.power_watts"):
        SerializedPods.of(builder(snapshot(T0 + 1, absurd)))
