"""The dcgm dialect is a drop-in for dcgm-exporter: its default set with exactly dcgm-exporter's names, types, units and
labels (from dcgm-exporter's etc/default-counters.csv and its label rendering)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from exporter.catalogue import DCGM_DEFAULT_SET, DcgmFamily, Dialect, MetricType
from exporter.exposition import ExpositionRenderer, render_exposition
from exporter.snapshot import DeviceReading, ShareMethod, StalledCall
from tests.support.snapshots import NATIVE, gpu, mig, node_with_everything, pod, reading, snapshot, use

MIB = 1024 * 1024

# name, type, native key, published value of NATIVE[key] in dcgm-exporter's unit
DCGM_DEFAULTS: list[tuple[str, str, str, float]] = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "sm_clock", 1980),  # MHz
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "mem_clock", 2619),  # MHz
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "memory_temp", 71),  # C
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "gpu_temp", 64),  # C
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "power_usage", 612.345),  # W (NVML gives mW)
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "total_energy", 98765432101),  # mJ
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "pcie_replay", 2),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "gpu_util", 87),  # %
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "mem_copy_util", 41),  # %
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "enc_util", 0),  # %
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "dec_util", 3),  # %
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "last_xid", 79),  # the last XID
    ("DCGM_FI_DEV_FB_FREE", "gauge", "fb_free", 9000),  # MiB, integer
    ("DCGM_FI_DEV_FB_USED", "gauge", "fb_used", 71234),  # MiB, integer (71234 MiB + 123 B floors)
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "fb_reserved", 512),  # MiB, integer
    # DCGM's rate (KiB/s / 1000, truncated), typed counter as dcgm-exporter's CSV does (its pull request 658)
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "nvlink_total", 3),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vgpu_license_status", 0),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "remapped_rows_uncorrectable", 0),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "remapped_rows_correctable", 1),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "row_remap_failure", 0),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "gr_engine_active", 0.915),  # ratio 0-1
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "tensor_active", 0.555),  # ratio 0-1
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "dram_active", 0.33),  # ratio 0-1
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "pcie_tx", 1234 * 1024),  # bytes/s (NVML gives KB/s)
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "pcie_rx", 567 * 1024),  # bytes/s
]
# Fields outside the default set (commented out or absent in default-counters.csv) that we also publish, under
# dcgm-exporter's names and units. Upstream's CSV has SM_ACTIVE commented out.
DCGM_EXTRAS: list[tuple[str, str, str, float]] = [
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "sm_active", 0.8025),  # ratio 0-1
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "power_management_limit", 700),  # W
    ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "gauge", "power_limit", 650),  # W, floored as DCGM's integer division does
    ("DCGM_FI_DEV_PSTATE", "gauge", "pstate", 0),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "clock_event_reasons", 5),  # the raw bitmask (4.x name)
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "ecc_sbe_volatile", 5),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "ecc_dbe_volatile", 0),
    ("DCGM_FI_DEV_FB_TOTAL", "gauge", "fb_total", 81559),  # MiB
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "row_remap_pending", 0),
    ("DCGM_FI_DEV_SLOWDOWN_TEMP", "gauge", "slowdown_temp", 89),  # C
    ("DCGM_FI_DEV_SHUTDOWN_TEMP", "gauge", "shutdown_temp", 92),  # C
    ("DCGM_FI_DEV_GPU_MAX_OP_TEMP", "gauge", "max_operating_temp", 87),  # C
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "ecc_sbe_aggregate", 312),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "ecc_dbe_aggregate", 1),
    ("DCGM_FI_DEV_RETIRED_SBE", "counter", "retired_pages_sbe", 2),
    ("DCGM_FI_DEV_RETIRED_DBE", "counter", "retired_pages_dbe", 0),
    ("DCGM_FI_DEV_RETIRED_PENDING", "counter", "retired_pages_pending", 1),  # counter, as the CSV types it
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "power_violation", 1_500_000_000),  # ns
    ("DCGM_FI_DEV_LOW_UTIL_VIOLATION", "counter", "low_util_violation", 42_000_000_000),  # ns
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "nvlink_crc_flit_errors", 3),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "nvlink_crc_data_errors", 1),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "nvlink_replay_errors", 3),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "nvlink_recovery_errors", 0),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_L0", "counter", "nvlink_bandwidth_l0", 2),  # 2500 KiB/s / 1000, truncated
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_L17", "counter", "nvlink_bandwidth_l17", 2),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "sm_occupancy", 0.445),  # ratio 0-1
    ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "fp64_active", 0.0),
    ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "fp32_active", 0.255),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "fp16_active", 0.0725),
]
GPU_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
MIG_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID", "Hostname"]
MIG_LABELS.append("DCGM_FI_DRIVER_VERSION")
POD_LABELS = ["container", "namespace", "pod"]


def _families(text: bytes) -> dict[str, tuple[str, str, list[Sample]]]:
    """family name -> (type, help, samples); the parser reads a counter `X` (no `_total`) with samples `X_total`."""
    return {f.name: (f.type, f.documentation, list(f.samples)) for f in text_string_to_metric_families(text.decode())}


def _series(text: bytes, family: str) -> list[Sample]:
    return [s for f in text_string_to_metric_families(text.decode()) if f.name == family for s in f.samples]


def test_the_table_is_dcgm_exporters_default_set() -> None:
    assert {row[0] for row in DCGM_DEFAULTS} == DCGM_DEFAULT_SET


@pytest.mark.parametrize(
    ("name", "type_", "key", "published"), DCGM_DEFAULTS + DCGM_EXTRAS, ids=[r[0] for r in DCGM_DEFAULTS + DCGM_EXTRAS]
)
def test_default_field_name_type_unit_and_labels(name: str, type_: str, key: str, published: float) -> None:
    g = gpu(0)
    text = render_exposition(snapshot((reading(g),)), Dialect.DCGM)
    families = _families(text)
    assert name in families, f"{name} missing"
    family_type, help_, samples = families[name]
    assert family_type == type_
    assert help_
    (sample,) = samples
    lines = text.decode().splitlines()
    assert f"# TYPE {name} {type_}" in lines  # on the wire: dcgm-exporter's name exactly, no _total added
    assert sum(line.startswith(name + "{") for line in lines) == 1
    assert math.isclose(sample.value, published, rel_tol=1e-12, abs_tol=1e-12), (sample.value, published, NATIVE[key])
    xid = {"err_code": "79", "err_msg": "GPU has fallen off the bus"} if name == "DCGM_FI_DEV_XID_ERRORS" else {}
    assert list(sample.labels) == GPU_LABELS + list(xid)
    assert sample.labels == {
        "gpu": "0",
        "UUID": g.uuid,
        "pci_bus_id": g.pci_bus_id,
        "device": "nvidia0",
        "modelName": g.model,
        "Hostname": "gpu-node-1",
        "DCGM_FI_DRIVER_VERSION": g.driver_version,
        **xid,
    }


def test_device_is_nvidia_and_the_gpu_index_not_the_minor_number() -> None:
    """dcgm-exporter (collector/gpu_collector.go): `GPUDevice: fmt.Sprintf("nvidia%d", mi.DeviceInfo.GPU)`."""
    g = dataclasses.replace(gpu(2), minor_number=5)
    text = render_exposition(snapshot((reading(g),)), Dialect.DCGM)
    assert {s.labels["device"] for s in _series(text, "DCGM_FI_DEV_GPU_TEMP")} == {"nvidia2"}


def test_the_hostname_label_can_be_spelled_as_later_releases_do() -> None:
    snap = snapshot((reading(gpu(0)),))
    pinned = _series(ExpositionRenderer(Dialect.DCGM).render(snap).text, "DCGM_FI_DEV_GPU_TEMP")[0]
    later = _series(
        ExpositionRenderer(Dialect.DCGM, hostname_label="hostname").render(snap).text, "DCGM_FI_DEV_GPU_TEMP"
    )
    assert pinned.labels["Hostname"] == "gpu-node-1" and "hostname" not in pinned.labels
    assert later[0].labels["hostname"] == "gpu-node-1" and "Hostname" not in later[0].labels
    with pytest.raises(ValueError, match="Hostname, hostname"):
        ExpositionRenderer(Dialect.DCGM, hostname_label="HOSTNAME")


def test_the_csv_type_column_sets_the_type() -> None:
    """dcgm-exporter writes `# TYPE` from its counters CSV: a field listed as counter is a counter."""
    family = DcgmFamily("last_xid", "DCGM_FI_DEV_XID_ERRORS", MetricType.COUNTER, "XIDs.")
    text = ExpositionRenderer(Dialect.DCGM, families=(family,)).render(snapshot((reading(gpu(0)),)))
    assert "# TYPE DCGM_FI_DEV_XID_ERRORS counter" in text.text.decode().splitlines()
    assert "# HELP DCGM_FI_DEV_XID_ERRORS XIDs." in text.text.decode().splitlines()


def test_a_field_is_published_under_the_name_the_csv_spells_it() -> None:
    """dcgm-exporter's rendermetrics writes the counter's FieldName, the CSV's record[0]: a former spelling or a 1.x
    name is published as it is listed. A measurement the shipped alerts read is published under the catalogue's name
    too; others only under the CSV's."""
    families = (
        DcgmFamily("clock_event_reasons", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", MetricType.GAUGE, "Throttle."),
        DcgmFamily("sm_clock", "dcgm_sm_clock", MetricType.GAUGE, "SM clock frequency (in MHz)."),
    )
    renderer = ExpositionRenderer(Dialect.DCGM, families=families, canonical_too={"clock_event_reasons"})
    text = renderer.render(snapshot((reading(gpu(0)),))).text
    names = set(_families(text))
    assert {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "dcgm_sm_clock"} <= names
    assert "DCGM_FI_DEV_SM_CLOCK" not in names
    (legacy,) = _series(text, "dcgm_sm_clock")
    assert list(legacy.labels) == GPU_LABELS and legacy.value == 1980


def test_label_fields_follow_the_node_name_in_name_order_and_skip_what_the_gpu_lacks() -> None:
    """dcgm-exporter's template ranges over a counter's Labels map (sorted keys) after Hostname; a field whose value
    is blank (DCGM could not read it) gives no label."""
    g = dataclasses.replace(gpu(0), brand="NVIDIA", inforom_image_version="G520.0200.00.05", inforom_power_version=None)
    fields = (
        ("serial", "DCGM_FI_DEV_SERIAL"),
        ("driver_version", "DCGM_FI_DRIVER_VERSION"),
        ("brand", "DCGM_FI_DEV_BRAND"),
        ("inforom_power_version", "DCGM_FI_DEV_POWER_INFOROM_VER"),
        ("inforom_image_version", "DCGM_FI_DEV_INFOROM_IMAGE_VER"),
    )
    text = ExpositionRenderer(Dialect.DCGM, label_fields=fields).render(snapshot((reading(g),))).text
    (sample,) = _series(text, "DCGM_FI_DEV_GPU_TEMP")
    assert list(sample.labels)[5:] == [
        "Hostname",
        "DCGM_FI_DEV_BRAND",
        "DCGM_FI_DEV_INFOROM_IMAGE_VER",
        "DCGM_FI_DEV_SERIAL",
        "DCGM_FI_DRIVER_VERSION",
    ]
    assert sample.labels["DCGM_FI_DEV_SERIAL"] == g.serial
    assert sample.labels["DCGM_FI_DEV_INFOROM_IMAGE_VER"] == "G520.0200.00.05"


def test_an_xid_outside_the_table_is_an_unknown_error() -> None:
    text = render_exposition(snapshot((reading(gpu(0), last_xid=4242),)), Dialect.DCGM)
    (sample,) = _series(text, "DCGM_FI_DEV_XID_ERRORS")
    assert (sample.labels["err_code"], sample.labels["err_msg"]) == ("4242", "Unknown Error")


def test_memory_in_mib_is_an_integer() -> None:
    text = render_exposition(snapshot((reading(gpu(0), fb_used=5 * MIB - 1),)), Dialect.DCGM)
    line = next(ln for ln in text.decode().splitlines() if ln.startswith("DCGM_FI_DEV_FB_USED{"))
    assert line.endswith(" 4")


def test_mig_series_carry_the_parent_gpu_and_the_instance() -> None:
    parent = gpu(2, mig=True)
    instance = mig(parent, 1, profile="3g.40gb", gi=2)
    text = render_exposition(snapshot((reading(parent, gpu_temp=50), reading(instance))), Dialect.DCGM)
    (sample,) = [s for s in _series(text, "DCGM_FI_DEV_FB_USED") if "GPU_I_ID" in s.labels]
    assert list(sample.labels) == MIG_LABELS
    assert sample.labels["gpu"] == "2"
    assert sample.labels["UUID"] == parent.uuid
    assert sample.labels["device"] == "nvidia2"
    assert sample.labels["GPU_I_PROFILE"] == "3g.40gb"
    assert sample.labels["GPU_I_ID"] == "2"
    # the parent's own series stay without MIG labels
    (temp,) = _series(text, "DCGM_FI_DEV_GPU_TEMP")
    assert "GPU_I_ID" not in temp.labels


def test_attributed_device_series_carry_pod_labels_last() -> None:
    g = gpu(0)
    text = render_exposition(snapshot((reading(g),), (use(pod("train-0", "ml", "trainer"), g.uuid),)), Dialect.DCGM)
    (sample,) = _series(text, "DCGM_FI_DEV_GPU_UTIL")
    assert list(sample.labels) == GPU_LABELS + POD_LABELS
    assert (sample.labels["container"], sample.labels["namespace"], sample.labels["pod"]) == (
        "trainer",
        "ml",
        "train-0",
    )


def test_a_shared_gpu_gets_one_copy_of_each_series_per_pod() -> None:
    g = gpu(1)
    pods = tuple(
        use(pod(f"infer-{i}", "serve"), g.uuid, ShareMethod.PROCESS, util=10.0 * i, sharing=4) for i in range(4)
    )
    text = render_exposition(snapshot((reading(g),), pods), Dialect.DCGM)
    samples = _series(text, "DCGM_FI_DEV_GPU_UTIL")
    assert sorted(s.labels["pod"] for s in samples) == ["infer-0", "infer-1", "infer-2", "infer-3"]
    assert {s.value for s in samples} == {87.0}  # the device's figure, as dcgm-exporter's shared mode reports it


def test_mig_instance_attribution_goes_to_the_instance_series_only() -> None:
    parent = gpu(2, mig=True)
    a, b = mig(parent, 0), mig(parent, 1)
    pods = (use(pod("mig-job", "research"), a.uuid, ShareMethod.MIG),)
    text = render_exposition(snapshot((reading(parent, gpu_temp=50), reading(a), reading(b)), pods), Dialect.DCGM)
    by_instance = {s.labels["GPU_I_ID"]: s for s in _series(text, "DCGM_FI_DEV_FB_USED")}
    assert by_instance[str(a.gpu_instance_id)].labels["pod"] == "mig-job"
    assert "pod" not in by_instance[str(b.gpu_instance_id)].labels
    assert "pod" not in _series(text, "DCGM_FI_DEV_GPU_TEMP")[0].labels


def test_a_field_the_hardware_cannot_give_is_absent_not_zero() -> None:
    text = render_exposition(snapshot((reading(gpu(0), gpu_temp=40),)), Dialect.DCGM).decode()
    assert "DCGM_FI_DEV_GPU_TEMP{" in text
    assert "DCGM_FI_DEV_GPU_UTIL" not in text
    assert "DCGM_FI_PROF_SM_ACTIVE" not in text


def test_a_lost_gpu_reports_up_0_and_nothing_else() -> None:
    lost = gpu(3)
    devices = (reading(gpu(0)), DeviceReading(lost, False, errors={"GPU_IS_LOST": 1}))
    text = render_exposition(snapshot(devices), Dialect.DCGM)
    on_lost = [
        s for f in text_string_to_metric_families(text.decode()) for s in f.samples if s.labels.get("gpu") == "3"
    ]
    assert {(s.name, s.value) for s in on_lost} == {("gpu_pulse_gpu_up", 0.0), ("gpu_pulse_nvml_errors_total", 1.0)}
    up = {s.labels["gpu"]: s.value for s in _series(text, "gpu_pulse_gpu_up")}
    assert up == {"0": 1.0, "3": 0.0}
    assert list(_series(text, "gpu_pulse_gpu_up")[0].labels) == GPU_LABELS


@pytest.mark.parametrize("dialect", list(Dialect))
def test_a_lost_gpu_keeps_the_xid_it_fell_off_the_bus_with(dialect: Dialect) -> None:
    """The collector keeps a lost GPU's XIDs on its down reading: they are served next to `up 0`, without pods."""
    lost = gpu(3)
    down = DeviceReading(lost, False, {"last_xid": 79.0}, {"xid_errors": {"79": 1.0}}, errors={"GPU_IS_LOST": 1})
    text = render_exposition(snapshot((reading(gpu(0)), down), (use(pod("train-0"), lost.uuid),)), dialect)
    on_lost = {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k in ("xid", "pod"))), s.value)
        for f in text_string_to_metric_families(text.decode())
        for s in f.samples
        if s.labels.get("gpu") == "3" and "XID" in s.name.upper()
    }
    if dialect is Dialect.DCGM:
        assert on_lost == {("DCGM_FI_DEV_XID_ERRORS", (), 79.0), ("gpu_pulse_xid_errors_total", (("xid", "79"),), 1.0)}
    else:
        assert on_lost == {("nvidia_gpu_last_xid", (), 79.0), ("nvidia_gpu_xid_errors_total", (("xid", "79"),), 1.0)}


@pytest.mark.parametrize("dialect", list(Dialect))
def test_a_hung_call_shows_in_a_self_metric(dialect: Dialect) -> None:
    stuck = gpu(1)
    down = DeviceReading(stuck, False, stalled=StalledCall("power_usage", 12.5))
    text = render_exposition(snapshot((reading(gpu(0)), down)), dialect)
    (sample,) = _series(text, "gpu_pulse_nvml_stalled_call_seconds")
    assert sample.labels == {"gpu": "1", "uuid": stuck.uuid, "call": "power_usage"}
    assert sample.value == 12.5
    up_name = "gpu_pulse_gpu_up" if dialect is Dialect.DCGM else "nvidia_gpu_up"
    assert {s.labels["gpu"]: s.value for s in _series(text, up_name)} == {"0": 1.0, "1": 0.0}


def test_whole_node_parses_and_every_series_is_unique() -> None:
    text = render_exposition(node_with_everything(), Dialect.DCGM)
    seen = set()
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in seen, key
            seen.add(key)
    assert len(seen) > 100
