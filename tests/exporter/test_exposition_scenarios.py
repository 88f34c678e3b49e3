"""Every built-in scenario through the real pipeline (simulated GPUs -> pynvml -> NvmlCollector -> loop -> renderer):
the parsers read it, promtool finds nothing in the prometheus dialect, the dcgm dialect keeps dcgm-exporter's labels,
and faults show as they should."""

from __future__ import annotations

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from exporter.catalogue import Dialect
from exporter.loop import Published
from simulation import BUILTIN_SCENARIOS
from tests.exporter.test_exposition_prometheus import promtool_check
from tests.support.snapshots import simulated_node

DCGM_GPU = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
DCGM_MIG = DCGM_GPU | {"GPU_I_PROFILE", "GPU_I_ID"}
DCGM_POD = {"container", "namespace", "pod"}


def _published(scenario: str, dialect: Dialect, cycles: int = 2) -> Published:
    with simulated_node(scenario, dialect) as node:
        for _ in range(cycles):
            published = node.loop.poll_once()
        assert published is not None
        return published


def _samples(text: bytes) -> list[Sample]:
    return [s for f in text_string_to_metric_families(text.decode()) for s in f.samples]


@pytest.mark.parametrize("scenario", BUILTIN_SCENARIOS)
def test_prometheus_dialect_is_promtool_clean(scenario: str) -> None:
    published = _published(scenario, Dialect.PROMETHEUS)
    result = promtool_check(published.text)
    assert result.returncode == 0 and not result.stdout and not result.stderr, result
    assert sum(len(f.samples) for f in parse_openmetrics(published.openmetrics.decode())) == len(
        _samples(published.text)
    )


@pytest.mark.parametrize("scenario", BUILTIN_SCENARIOS)
def test_dcgm_dialect_has_dcgm_exporters_labels(scenario: str) -> None:
    published = _published(scenario, Dialect.DCGM)
    device_series = [s for s in _samples(published.text) if s.name.startswith("DCGM_FI_")]
    assert device_series
    for sample in device_series:
        names = set(sample.labels) - DCGM_POD
        if sample.name == "DCGM_FI_DEV_XID_ERRORS":  # dcgm-exporter 4.x: the XID also as err_code, and its name
            names -= {"err_code", "err_msg"}
        assert names in (DCGM_GPU, DCGM_MIG), sample
        assert not (DCGM_POD & set(sample.labels)) or DCGM_POD <= set(sample.labels)
    if any(d.is_mig for d in published.snapshot.devices):
        assert any("GPU_I_ID" in s.labels for s in device_series)
    list(parse_openmetrics(published.openmetrics.decode()))


def test_a_lost_gpu_reports_up_0_and_the_others_keep_reporting() -> None:
    with simulated_node("faulty", Dialect.PROMETHEUS) as node:
        node.loop.poll_once()
        node.simulator.lose_gpu(1)
        published = node.loop.poll_once()
        assert published is not None
    samples = _samples(published.text)
    up = {s.labels["gpu"]: s.value for s in samples if s.name == "nvidia_gpu_up"}
    assert up == {"0": 1, "1": 0, "2": 1, "3": 1}
    on_lost = {s.name for s in samples if s.labels.get("gpu") == "1"}
    # nothing but its state, its errors, and the XIDs it reported (79 as it fell off the bus)
    assert on_lost <= {
        "nvidia_gpu_up",
        "gpu_pulse_nvml_errors_total",
        "nvidia_gpu_last_xid",
        "nvidia_gpu_xid_errors_total",
    }
    lost_errors = [s for s in samples if s.name == "gpu_pulse_nvml_errors_total" and s.labels.get("gpu") == "1"]
    assert any(s.labels["error"] == "GPU_IS_LOST" for s in lost_errors)
    for other in ("0", "2", "3"):
        assert any(s.name == "nvidia_gpu_temperature_celsius" and s.labels["gpu"] == other for s in samples)
    assert promtool_check(published.text).returncode == 0


def test_fields_the_gpu_cannot_give_are_absent_not_zero() -> None:
    published = _published("faulty", Dialect.PROMETHEUS)
    on_gpu2 = {s.name for s in _samples(published.text) if s.labels.get("gpu") == "2"}
    assert "nvidia_gpu_temperature_celsius" in on_gpu2
    assert "nvidia_gpu_memory_temperature_celsius" not in on_gpu2  # NOT_SUPPORTED in this scenario
    assert "nvidia_gpu_encoder_utilization_ratio" not in on_gpu2
