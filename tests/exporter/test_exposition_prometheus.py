"""The prometheus dialect: base units, conventional names, identity in `nvidia_gpu_info`, pods only on pod series;
`promtool check metrics` is the referee. Also what both dialects share: per-pod series, self-metrics, OpenMetrics."""

from __future__ import annotations

import dataclasses
import math
import subprocess

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from exporter.catalogue import Dialect
from exporter.exposition import ExpositionRenderer, render_exposition
from exporter.snapshot import ShareMethod
from tests.support.snapshots import gpu, mig, node_with_everything, pod, reading, snapshot, use
from tests.support.tools import require_tool

DEVICE_LABELS = ["gpu", "uuid", "model", "node"]
POD_LABELS = ["node", "namespace", "pod", "container", "gpu", "uuid", "gpu_instance", "mig_profile", "share"]

# family sample name, extra labels, published value of the builders' NATIVE figures in base units
BASE_UNITS: list[tuple[str, dict[str, str], float]] = [
    ("nvidia_gpu_utilization_ratio", {}, 0.87),
    ("nvidia_gpu_memory_copy_utilization_ratio", {}, 0.41),
    ("nvidia_gpu_decoder_utilization_ratio", {}, 0.03),
    ("nvidia_gpu_memory_used_bytes", {}, 71234 * 1024 * 1024 + 123),
    ("nvidia_gpu_memory_total_bytes", {}, 81559 * 1024 * 1024),
    ("nvidia_gpu_temperature_celsius", {}, 64),
    ("nvidia_gpu_memory_temperature_celsius", {}, 71),
    ("nvidia_gpu_power_limit_watts", {}, 650.5),
    ("nvidia_gpu_power_management_limit_watts", {}, 700),
    ("nvidia_gpu_energy_joules_total", {}, 98765432.101),
    ("nvidia_gpu_sm_clock_hertz", {}, 1.98e9),
    ("nvidia_gpu_memory_clock_hertz", {}, 2.619e9),
    ("nvidia_gpu_performance_state", {}, 0),
    ("nvidia_gpu_clock_event_active", {"reason": "gpu_idle"}, 1),
    ("nvidia_gpu_clock_event_active", {"reason": "sw_power_cap"}, 1),
    ("nvidia_gpu_clock_event_active", {"reason": "hw_slowdown"}, 0),
    ("nvidia_gpu_pcie_transmit_bytes_per_second", {}, 1234 * 1024),
    ("nvidia_gpu_pcie_receive_bytes_per_second", {}, 567 * 1024),
    ("nvidia_gpu_pcie_replays_total", {}, 2),
    ("nvidia_gpu_ecc_errors_total", {"type": "correctable"}, 5),
    ("nvidia_gpu_ecc_errors_total", {"type": "uncorrectable"}, 0),
    ("nvidia_gpu_remapped_rows_total", {"type": "correctable"}, 1),
    ("nvidia_gpu_row_remap_failure", {}, 0),
    ("nvidia_gpu_xid_errors_total", {"xid": "79"}, 2),
    ("nvidia_gpu_xid_errors_total", {"xid": "13"}, 1),
    ("nvidia_gpu_last_xid", {}, 79),
    ("nvidia_gpu_nvlink_bytes_total", {"direction": "transmit"}, 1000 * 1024),
    ("nvidia_gpu_nvlink_bytes_total", {"direction": "receive"}, 2000 * 1024),
    ("nvidia_gpu_sm_active_ratio", {}, 0.8025),
    ("nvidia_gpu_tensor_active_ratio", {}, 0.555),
    ("nvidia_gpu_dram_active_ratio", {}, 0.33),
    ("nvidia_gpu_graphics_engine_active_ratio", {}, 0.915),
    ("nvidia_gpu_power_watts", {}, 612.345),
    ("nvidia_gpu_slowdown_temperature_celsius", {}, 89),
    ("nvidia_gpu_shutdown_temperature_celsius", {}, 92),
    ("nvidia_gpu_max_operating_temperature_celsius", {}, 87),
    ("nvidia_gpu_ecc_aggregate_errors_total", {"type": "correctable"}, 312),
    ("nvidia_gpu_ecc_aggregate_errors_total", {"type": "uncorrectable"}, 1),
    ("nvidia_gpu_retired_pages_total", {"cause": "multiple_single_bit_ecc"}, 2),
    ("nvidia_gpu_retired_pages_total", {"cause": "double_bit_ecc"}, 0),
    ("nvidia_gpu_retired_pages_pending", {}, 1),
    ("nvidia_gpu_violation_seconds_total", {"policy": "power"}, 1.5),
    ("nvidia_gpu_violation_seconds_total", {"policy": "low_utilization"}, 42),
    ("nvidia_gpu_nvlink_errors_total", {"type": "crc_flit"}, 3),
    ("nvidia_gpu_nvlink_errors_total", {"type": "replay"}, 3),
    ("nvidia_gpu_nvlink_link_bytes_total", {"direction": "transmit", "link": "3"}, 300 * 1024),
    ("nvidia_gpu_nvlink_link_bytes_total", {"direction": "receive", "link": "17"}, 90 * 17 * 1024),
    ("nvidia_gpu_vgpu_licensed", {}, 0),
    ("nvidia_gpu_sm_occupancy_ratio", {}, 0.445),
    ("nvidia_gpu_pipe_active_ratio", {"pipe": "fp32"}, 0.255),
    ("nvidia_gpu_pipe_active_ratio", {"pipe": "fp16"}, 0.0725),
]


def promtool() -> str:
    return require_tool("promtool")


def promtool_check(text: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, timeout=60, check=False)


def samples(text: bytes) -> list[Sample]:
    return [s for f in text_string_to_metric_families(text.decode()) for s in f.samples]


def _one(text: bytes, name: str, **labels: str) -> Sample:
    found = [s for s in samples(text) if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) == 1, (name, labels, found)
    return found[0]


@pytest.mark.parametrize(("name", "extra", "published"), BASE_UNITS)
def test_base_units(name: str, extra: dict[str, str], published: float) -> None:
    g = gpu(0)
    text = render_exposition(snapshot((reading(g),)), Dialect.PROMETHEUS)
    sample = _one(text, name, **extra)
    assert math.isclose(sample.value, published, rel_tol=1e-12)
    assert list(sample.labels) == DEVICE_LABELS + list(extra)
    assert sample.labels["uuid"] == g.uuid
    assert sample.labels["model"] == g.model
    assert sample.labels["node"] == "gpu-node-1"


def test_promtool_finds_nothing_to_complain_about() -> None:
    text = render_exposition(node_with_everything(), Dialect.PROMETHEUS)
    result = promtool_check(text)
    assert result.returncode == 0 and not result.stdout and not result.stderr, result


def test_promtool_is_a_real_referee_here() -> None:
    # the dcgm dialect keeps dcgm-exporter's camelCase labels and _total-less counters: promtool must object
    result = promtool_check(render_exposition(node_with_everything(), Dialect.DCGM))
    assert result.returncode != 0
    assert b"camelCase" in result.stdout + result.stderr


def test_identity_lives_in_the_info_series() -> None:
    parent = gpu(2, mig=True)
    instance = mig(parent, 0, profile="1g.10gb", gi=9)
    text = render_exposition(snapshot((reading(parent, gpu_temp=50), reading(instance))), Dialect.PROMETHEUS)
    info = [s for s in samples(text) if s.name == "nvidia_gpu_info"]
    by_kind = {"mig_uuid" in s.labels: s for s in info}
    assert by_kind[False].labels == {
        "gpu": "2",
        "uuid": parent.uuid,
        "model": parent.model,
        "node": "gpu-node-1",
        "pci_bus_id": parent.pci_bus_id,
        "device": "nvidia2",
        "driver_version": parent.driver_version,
        "cuda_version": "12.4",
        "nvml_version": "",
        "brand": "",
        "serial": parent.serial,
        "vbios_version": parent.vbios_version,
        "mig_mode": "enabled",
    }
    assert by_kind[True].labels["mig_uuid"] == instance.uuid
    assert (by_kind[True].labels["gpu_instance"], by_kind[True].labels["mig_profile"]) == ("9", "1g.10gb")
    assert all(s.value == 1 for s in info)
    memory = _one(text, "nvidia_gpu_memory_used_bytes", gpu_instance="9")
    assert list(memory.labels) == [*DEVICE_LABELS, "gpu_instance", "mig_profile"]
    assert memory.labels["uuid"] == parent.uuid


def test_inforom_versions_live_in_their_own_info_series() -> None:
    versions = {"inforom_image_version": "G520.0200.00.05", "inforom_oem_version": "2.1"}
    g = dataclasses.replace(gpu(0), inforom_ecc_version="7.16", **versions)
    text = render_exposition(snapshot((reading(g), reading(gpu(1)))), Dialect.PROMETHEUS)
    (sample,) = [s for s in samples(text) if s.name == "nvidia_gpu_inforom_info"]  # GPU 1 gives no version: none
    assert sample.labels == {
        "gpu": "0",
        "uuid": g.uuid,
        "model": g.model,
        "node": "gpu-node-1",
        "image_version": "G520.0200.00.05",
        "oem_version": "2.1",
        "ecc_version": "7.16",
        "power_version": "",
    }


def test_device_series_carry_no_pod_labels_pod_series_do() -> None:
    text = render_exposition(node_with_everything(), Dialect.PROMETHEUS)
    for sample in samples(text):
        if sample.name.startswith("nvidia_gpu_"):
            assert not {"pod", "namespace", "container"} & set(sample.labels), sample
    shared = [s for s in samples(text) if s.name == "gpu_pulse_pod_device_info" and s.labels["gpu"] == "1"]
    assert sorted((s.labels["pod"], s.labels["share"]) for s in shared) == [
        ("infer-a", "process"),
        ("infer-b", "unattributed"),
    ]
    assert list(shared[0].labels) == POD_LABELS


def test_pod_figures_in_base_units_and_unknown_figures_absent() -> None:
    g = gpu(1)
    known = use(pod("infer-a", "serve"), g.uuid, ShareMethod.PROCESS, util=30.0, sharing=2)
    unknown = use(pod("infer-b", "serve"), g.uuid, ShareMethod.UNATTRIBUTED, util=None, sharing=2)
    for dialect in Dialect:
        text = render_exposition(snapshot((reading(g),), (known, unknown)), dialect)
        assert _one(text, "gpu_pulse_pod_gpu_utilization_ratio", pod="infer-a").value == pytest.approx(0.3)
        assert _one(text, "gpu_pulse_pod_gpu_memory_used_bytes", pod="infer-a").value == 1 << 30
        assert _one(text, "gpu_pulse_pod_gpu_power_watts", pod="infer-a").value == pytest.approx(123.456)
        assert _one(text, "gpu_pulse_pod_gpu_energy_joules_total", pod="infer-a").value == pytest.approx(4567.89)
        assert _one(text, "gpu_pulse_pod_gpu_sharing_pods", pod="infer-b").value == 2
        assert _one(text, "gpu_pulse_pod_device_info", pod="infer-b").value == 1
        names = {s.name for s in samples(text) if s.labels.get("pod") == "infer-b"}
        assert "gpu_pulse_pod_gpu_utilization_ratio" not in names  # not known: absent, never zero


def test_exported_pod_labels_become_label_names() -> None:
    g = gpu(0)
    ref = pod("web-0", **{"app.kubernetes.io/name": "web", "team": "search"})
    text = render_exposition(snapshot((reading(g),), (use(ref, g.uuid),)), Dialect.PROMETHEUS)
    info = _one(text, "gpu_pulse_pod_device_info", pod="web-0")
    assert info.labels["label_app_kubernetes_io_name"] == "web"
    assert info.labels["label_team"] == "search"
    assert promtool_check(text).returncode == 0


def test_a_lost_gpu_reports_up_0_and_nothing_else() -> None:
    text = render_exposition(node_with_everything(), Dialect.PROMETHEUS)
    on_lost = {s.name for s in samples(text) if s.labels.get("gpu") == "3"}
    assert on_lost == {"nvidia_gpu_up", "gpu_pulse_nvml_errors_total"}
    up = {s.labels["gpu"]: s.value for s in samples(text) if s.name == "nvidia_gpu_up"}
    assert up == {"0": 1, "1": 1, "2": 1, "3": 0}
    errors = _one(text, "gpu_pulse_nvml_errors_total", gpu="3")
    assert errors.labels["error"] == "GPU_IS_LOST"


@pytest.mark.parametrize("dialect", list(Dialect))
def test_self_metrics(dialect: Dialect) -> None:
    text = ExpositionRenderer(dialect, interval_seconds=2.5, version="1.2.3").render(node_with_everything()).text
    assert _one(text, "gpu_pulse_exporter_build_info").labels == {"version": "1.2.3", "dialect": str(dialect)}
    assert _one(text, "gpu_pulse_snapshot_timestamp_seconds").value == 1_790_000_000.25
    assert _one(text, "gpu_pulse_poll_interval_seconds").value == 2.5
    assert _one(text, "gpu_pulse_collector_success", collector="nvml").value == 1
    assert _one(text, "gpu_pulse_collector_success", collector="xid").value == 0
    assert _one(text, "gpu_pulse_collector_duration_seconds", collector="nvml").value == 0.0123
    assert _one(text, "gpu_pulse_collector_errors_total", collector="xid").value == 3
    assert _one(text, "gpu_pulse_kubelet_up").value == 1
    assert _one(text, "gpu_pulse_kubelet_mapping_age_seconds").value == 2.5


def test_kubelet_series_only_when_attribution_is_configured() -> None:
    text = render_exposition(snapshot((reading(gpu(0)),), kubelet_up=None), Dialect.PROMETHEUS).decode()
    assert "gpu_pulse_kubelet_up" not in text
    assert "gpu_pulse_kubelet_mapping_age_seconds" not in text


@pytest.mark.parametrize("dialect", list(Dialect))
def test_openmetrics_document(dialect: Dialect) -> None:
    rendered = ExpositionRenderer(dialect).render(node_with_everything())
    om = rendered.openmetrics.decode()
    assert om.endswith("\n# EOF\n")
    assert "# TYPE nvidia_gpu_energy_joules counter" in om or dialect is Dialect.DCGM
    assert "# TYPE gpu_pulse_collector_errors counter" in om
    if dialect is Dialect.DCGM:  # an OpenMetrics counter must end in _total: dcgm-exporter's names cannot
        assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown" in om
    parsed = [(s.name, s.labels, s.value) for f in parse_openmetrics(om) for s in f.samples]
    text_samples = [(s.name, s.labels, s.value) for s in samples(rendered.text)]
    assert len(parsed) == len(text_samples) == rendered.samples


def test_no_timestamps_and_every_line_well_formed() -> None:
    for dialect in Dialect:
        for line in render_exposition(node_with_everything(), dialect).decode().splitlines():
            if line.startswith("#"):
                assert line.startswith(("# HELP ", "# TYPE ")), line
                continue
            tail = line.rsplit("}", 1)[1] if "}" in line else line.split(" ", 1)[1]
            tokens = tail.split()
            assert len(tokens) == 1, f"a value and nothing else (no timestamp): {line}"
            float(tokens[0])


def test_duplicate_edges_and_devices_render_once() -> None:
    g = gpu(0)
    ref = pod("a")
    text = render_exposition(snapshot((reading(g), reading(g)), (use(ref, g.uuid), use(ref, g.uuid))), Dialect.DCGM)
    assert len([s for s in samples(text) if s.name == "DCGM_FI_DEV_GPU_UTIL"]) == 1
    assert len([s for s in samples(text) if s.name == "gpu_pulse_pod_device_info"]) == 1


def test_per_pod_shares_are_published_to_the_precision_of_their_source() -> None:
    """A share of a sampled figure is not more precise than the figure: 149.557 W, not 149.55694936708858."""
    g = gpu(0)
    share = dataclasses.replace(
        use(pod("a"), g.uuid, ShareMethod.PROCESS, util=20.999999999999996, sharing=2),
        power_milliwatts=149556.94936708858,
        energy_millijoules=894797.2405063291,
    )
    text = render_exposition(snapshot((reading(g),), (share,)), Dialect.PROMETHEUS).decode()
    values = {ln.split("{")[0]: ln.rsplit(" ", 1)[1] for ln in text.splitlines() if ln.startswith("gpu_pulse_pod_gpu")}
    assert values["gpu_pulse_pod_gpu_utilization_ratio"] == "0.21"
    assert values["gpu_pulse_pod_gpu_power_watts"] == "149.557"
    assert values["gpu_pulse_pod_gpu_energy_joules_total"] == "894.797"
