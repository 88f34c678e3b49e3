"""For any snapshot the renderer can be given, the real parsers read back exactly the samples it should contain.

The expected samples come from a plain reading of the catalogue (exporter/catalogue.py) and dcgm-exporter's names,
written here independently of the renderer: names, label sets and values (native * scale, floored where the dialect
publishes integers; a bitmask as one 0/1 series per bit). Values are arbitrary floats (NaN, infinities, huge and tiny),
label values contain quotes, backslashes, line feeds and any Unicode. Both the text format (prometheus_client.parser)
and OpenMetrics (prometheus_client.openmetrics.parser) are read back.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.catalogue import KEPT_WHILE_DOWN, MEASUREMENTS, Dialect, MetricType
from exporter.exposition import ExpositionRenderer
from exporter.exposition.xid_names import xid_name
from exporter.snapshot import (
    CollectorStatus,
    DeviceReading,
    GpuIdentity,
    MigIdentity,
    PodDeviceUse,
    PodRef,
    ShareMethod,
    Snapshot,
)

Expected = tuple[str, frozenset[tuple[str, str]], float]

odd_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(
    ['"', "\\", "\n", '\\"', "a\\nb", "}", "{", ",", "=", " ", "é日本", "\t", "\\\\n"]
)
numbers = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**64), 2**64)
KEYS = [m.key for m in MEASUREMENTS]


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    devices: list[DeviceReading] = []
    gpus: list[GpuIdentity] = []
    for i in range(draw(st.integers(0, 3))):
        mig_count = draw(st.integers(0, 2))
        ident = GpuIdentity(
            index=i,
            uuid=f"GPU-{i}-{draw(odd_text)}",
            model=draw(odd_text),
            pci_bus_id=draw(odd_text),
            minor_number=draw(st.integers(0, 255)),
            serial=draw(st.none() | odd_text),
            driver_version=draw(odd_text),
            cuda_driver_version=draw(odd_text),
            vbios_version=draw(st.none() | odd_text),
            mig_enabled=mig_count > 0,
        )
        gpus.append(ident)
        devices.append(_reading(draw, ident))
        for j in range(mig_count):
            child = MigIdentity(ident, j, f"MIG-{i}-{j}-{draw(odd_text)}", j, 0, draw(odd_text))
            devices.append(_reading(draw, child))
    uuids = [d.uuid for d in devices] + ["GPU-vanished"]
    pods: dict[tuple[str, str, str, str], PodDeviceUse] = {}
    for _ in range(draw(st.integers(0, 4)) if devices else 0):
        ref = PodRef(
            namespace=draw(odd_text),
            name=draw(odd_text),
            container=draw(odd_text),
            labels=draw(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), odd_text, max_size=2)),
        )
        device = draw(st.sampled_from(uuids))
        pods[(ref.namespace, ref.name, ref.container, device)] = PodDeviceUse(
            pod=ref,
            device_uuid=device,
            share=draw(st.sampled_from(list(ShareMethod))),
            utilization_percent=draw(st.none() | st.floats()),
            memory_used_bytes=draw(st.none() | st.integers(0, 2**50)),
            power_milliwatts=draw(st.none() | st.floats()),
            energy_millijoules=draw(st.none() | st.floats()),
            sharing_pods=draw(st.integers(1, 8)),
        )
    names = draw(st.lists(odd_text, max_size=3, unique=True))
    collectors = tuple(CollectorStatus(n, draw(st.booleans()), draw(st.floats()), draw(numbers)) for n in names)
    kubelet_up = draw(st.none() | st.booleans())
    return Snapshot(
        taken_at=draw(st.floats()),
        node=draw(odd_text),
        devices=tuple(devices),
        pods=tuple(pods.values()),
        collectors=collectors,
        kubelet_up=kubelet_up,
        kubelet_mapping_age_seconds=None if kubelet_up is None else draw(st.none() | st.floats()),
    )


def _reading(draw: st.DrawFn, ident: GpuIdentity | MigIdentity) -> DeviceReading:
    values = draw(st.dictionaries(st.sampled_from(KEYS), numbers, max_size=12))
    vectors = {"xid_errors": draw(st.dictionaries(odd_text, numbers, max_size=3))} if draw(st.booleans()) else {}
    errors = draw(st.dictionaries(odd_text, numbers, max_size=2))
    return DeviceReading(ident, draw(st.booleans()), values, vectors, (), errors)


# ---- the reference: what the exposition must contain ----------------------------------------------------------------
def _labels(pairs: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset(pairs.items())


def device_labels(reading: DeviceReading, node: str, dialect: Dialect) -> dict[str, str]:
    gpu, ident = reading.gpu, reading.identity
    if dialect is Dialect.DCGM:
        labels = {
            "gpu": str(gpu.index),
            "UUID": gpu.uuid,
            "pci_bus_id": gpu.pci_bus_id,
            "device": f"nvidia{gpu.index}",
            "modelName": gpu.model,
        }
        if isinstance(ident, MigIdentity):
            labels |= {"GPU_I_PROFILE": ident.profile, "GPU_I_ID": str(ident.gpu_instance_id)}
        return labels | {"Hostname": node, "DCGM_FI_DRIVER_VERSION": gpu.driver_version}
    labels = {"gpu": str(gpu.index), "uuid": gpu.uuid, "model": gpu.model, "node": node}
    if isinstance(ident, MigIdentity):
        labels |= {"gpu_instance": str(ident.gpu_instance_id), "mig_profile": ident.profile}
    return labels


def _counter_ok(value: float) -> bool:
    return not math.isnan(value) and value >= 0


def _published(native: float, scale: float, integer: bool) -> float:
    value = float(native) * scale
    return float(math.floor(value)) if integer and math.isfinite(value) else value


def expected(snapshot: Snapshot, dialect: Dialect, selection: frozenset[str] | None) -> Iterator[Expected]:
    node = snapshot.node
    holders: dict[str, list[PodRef]] = {}
    for use in snapshot.pods:
        holders.setdefault(use.device_uuid, []).append(use.pod)
    down = {d.uuid for d in snapshot.devices if not d.up}
    by_uuid = {d.uuid: d for d in snapshot.devices}
    for reading in snapshot.devices:
        if reading.is_mig:
            continue
        up_name = "gpu_pulse_gpu_up" if dialect is Dialect.DCGM else "nvidia_gpu_up"
        yield up_name, _labels(device_labels(reading, node, dialect)), 1.0 if reading.up else 0.0
    for reading in snapshot.devices:
        lost = not reading.up or reading.gpu.uuid in down
        if lost and reading.is_mig:
            continue
        base = device_labels(reading, node, dialect)
        variants = [base]
        if lost:  # a lost GPU keeps only its XIDs, without pods
            reading = replace(
                reading,
                values={k: v for k, v in reading.values.items() if k in KEPT_WHILE_DOWN},
                vectors={k: v for k, v in reading.vectors.items() if k in KEPT_WHILE_DOWN},
            )
        elif dialect is Dialect.DCGM and reading.uuid in holders:
            variants = [
                base | {"container": p.container, "namespace": p.namespace, "pod": p.name}
                for p in holders[reading.uuid]
            ]
        if dialect is Dialect.PROMETHEUS and not lost:
            gpu = reading.gpu
            info = {
                "gpu": str(gpu.index),
                "uuid": gpu.uuid,
                "model": gpu.model,
                "node": node,
                "pci_bus_id": gpu.pci_bus_id,
                "device": f"nvidia{gpu.minor_number}",
                "driver_version": gpu.driver_version,
                "cuda_version": gpu.cuda_driver_version,
                "nvml_version": gpu.nvml_version,
                "brand": gpu.brand or "",
                "serial": gpu.serial or "",
                "vbios_version": gpu.vbios_version or "",
                "mig_mode": "enabled" if gpu.mig_enabled else "disabled",
            }
            if isinstance(reading.identity, MigIdentity):
                mig = reading.identity
                info |= {"gpu_instance": str(mig.gpu_instance_id), "mig_profile": mig.profile, "mig_uuid": mig.uuid}
            yield "nvidia_gpu_info", _labels(info), 1.0
        for m in MEASUREMENTS:
            r = m.rendering(dialect)
            if r is None or (selection is not None and m.key not in selection):
                continue
            counter = r.type is MetricType.COUNTER
            if m.vector:
                if r.vector_label is None:
                    continue
                for key, native in reading.vectors.get(m.key, {}).items():
                    value = _published(native, r.scale, r.integer)
                    if counter and not _counter_ok(value):
                        continue
                    for labels in variants:
                        yield r.name, _labels(labels | dict(r.const_labels) | {r.vector_label: key}), value
                continue
            if m.key not in reading.values:
                continue
            native = reading.values[m.key]
            if r.bits is not None:
                if not math.isfinite(native):
                    continue
                for labels in variants:
                    for bit_name, bit in r.bits.items():
                        on = 1.0 if int(native) & bit else 0.0
                        yield r.name, _labels(labels | dict(r.const_labels) | {r.bit_label: bit_name}), on
                continue
            value = _published(native, r.scale, r.integer)
            if counter and not _counter_ok(value):
                continue
            extra: dict[str, str] = {}
            if r.xid_labels:  # dcgm-exporter 4.x: the XID also as err_code, and its name
                if not math.isfinite(native):
                    continue
                extra = {"err_code": str(int(native)), "err_msg": xid_name(int(native))}
            for labels in variants:
                yield r.name, _labels(labels | dict(r.const_labels) | extra), value
    for use in snapshot.pods:
        device = by_uuid.get(use.device_uuid)
        labels = {
            "node": node,
            "namespace": use.pod.namespace,
            "pod": use.pod.name,
            "container": use.pod.container,
            "gpu": "" if device is None else str(device.gpu.index),
            "uuid": use.device_uuid if device is None else device.gpu.uuid,
            "gpu_instance": str(device.identity.gpu_instance_id)
            if device is not None and isinstance(device.identity, MigIdentity)
            else "",
            "mig_profile": device.identity.profile
            if device is not None and isinstance(device.identity, MigIdentity)
            else "",
            "share": str(use.share),
        } | {f"label_{k}": v for k, v in use.pod.labels.items()}
        figures = [  # (name, value, scale, digits: shares are published to the precision of their source)
            ("gpu_pulse_pod_device_info", 1.0, 1.0, None),
            ("gpu_pulse_pod_gpu_utilization_ratio", use.utilization_percent, 0.01, 5),
            ("gpu_pulse_pod_gpu_memory_used_bytes", use.memory_used_bytes, 1.0, None),
            ("gpu_pulse_pod_gpu_power_watts", use.power_milliwatts, 0.001, 3),
            ("gpu_pulse_pod_gpu_energy_joules_total", use.energy_millijoules, 0.001, 3),
            ("gpu_pulse_pod_gpu_sharing_pods", use.sharing_pods, 1.0, None),
        ]
        for name, value, scale, digits in figures:
            if value is None:
                continue
            published = float(value) / round(1 / scale) if scale < 1 else float(value) * scale
            # the exporter refuses a negative counter by its raw value: -5e-324 mJ is -0.0 J, which looks >= 0
            if name.endswith("_total") and not (_counter_ok(float(value)) and _counter_ok(published)):
                continue
            if digits is not None:
                published = round(published, digits)
            yield name, _labels(labels), published
    yield "gpu_pulse_exporter_build_info", _labels({"version": "v", "dialect": str(dialect)}), 1.0
    yield "gpu_pulse_snapshot_timestamp_seconds", frozenset(), snapshot.taken_at
    yield "gpu_pulse_poll_interval_seconds", frozenset(), 1.0
    for status in snapshot.collectors:
        labels = _labels({"collector": status.name})
        yield "gpu_pulse_collector_success", labels, 1.0 if status.success else 0.0
        yield "gpu_pulse_collector_duration_seconds", labels, status.duration_seconds
        if _counter_ok(status.errors_total):
            yield "gpu_pulse_collector_errors_total", labels, float(status.errors_total)
    for reading in snapshot.devices:
        for error, count in reading.errors.items():
            if _counter_ok(count):
                labels = _labels({"gpu": str(reading.gpu.index), "uuid": reading.uuid, "error": error})
                yield "gpu_pulse_nvml_errors_total", labels, float(count)
    if snapshot.kubelet_up is not None:
        yield "gpu_pulse_kubelet_up", frozenset(), 1.0 if snapshot.kubelet_up else 0.0
        if snapshot.kubelet_mapping_age_seconds is not None:
            yield "gpu_pulse_kubelet_mapping_age_seconds", frozenset(), snapshot.kubelet_mapping_age_seconds


# ---- comparison ---------------------------------------------------------------------------------------------------
def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or math.isclose(a, b, rel_tol=1e-12)


def _compare(got: list[Expected], want: list[Expected]) -> None:
    got_map = {(n, labels): v for n, labels, v in got}
    want_map = {(n, labels): v for n, labels, v in want}
    assert len(got_map) == len(got), "a series appears twice"
    assert got_map.keys() == want_map.keys(), got_map.keys() ^ want_map.keys()
    for key, value in want_map.items():
        assert _same(got_map[key], value), (key, got_map[key], value)


COUNTERS_WITHOUT_TOTAL = frozenset(
    r.name
    for m in MEASUREMENTS
    for r in (m.dcgm, m.prometheus)
    if r is not None and r.type is MetricType.COUNTER and not r.name.endswith("_total")
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(), st.sampled_from(list(Dialect)), st.none() | st.frozensets(st.sampled_from(KEYS)))
def test_parsers_read_back_exactly_the_expected_samples(
    snapshot: Snapshot, dialect: Dialect, selection: frozenset[str] | None
) -> None:
    rendered = ExpositionRenderer(dialect, selection=selection, interval_seconds=1.0, version="v").render(snapshot)
    want = list(expected(snapshot, dialect, selection))
    # the text parser reports a counter `X` that lacks `_total` (dcgm-exporter's names) as `X_total`
    from_text = [
        (
            s.name.removesuffix("_total") if s.name.removesuffix("_total") in COUNTERS_WITHOUT_TOTAL else s.name,
            _labels(s.labels),
            s.value,
        )
        for family in parse_text(rendered.text.decode())
        for s in family.samples
    ]
    _compare(from_text, want)
    from_openmetrics = [
        (s.name, _labels(s.labels), s.value)
        for f in parse_openmetrics(rendered.openmetrics.decode())
        for s in f.samples
    ]
    _compare(from_openmetrics, want)
    assert rendered.samples == len(want)


@settings(max_examples=50, deadline=None)
@given(st.lists(snapshots(), min_size=2, max_size=4), st.sampled_from(list(Dialect)))
def test_one_renderer_over_changing_snapshots_matches_a_fresh_one(batch: list[Snapshot], dialect: Dialect) -> None:
    """The label caches kept between snapshots never leak one snapshot's labels into the next."""
    kept = ExpositionRenderer(dialect, version="v")
    for snapshot in batch:
        assert kept.render(snapshot) == ExpositionRenderer(dialect, version="v").render(snapshot)
