"""What each simulated GPU generation can give, and what it cannot and why: the collector's `unavailable` verdicts over
every built-in scenario, checked against the capability matrix in docs/capabilities.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.catalogue import Dialect
from exporter.exposition import render_exposition
from exporter.snapshot import DeviceReading, Snapshot
from simulation import BUILTIN_SCENARIOS
from tests.exporter.collecting import collecting
from tests.support.clocks import ManualClock

DOC = Path(__file__).resolve().parents[2] / "docs" / "capabilities.md"
UTILIZATION = ("gpu_util", "gr_engine_active", "sm_active", "tensor_active", "dram_active")


def _devices(scenario: str) -> tuple[DeviceReading, ...]:
    clock = ManualClock()
    with collecting(scenario, clock) as (_, collector):
        collector.collect()
        clock.advance(1.0)
        return collector.collect().devices


def _row(devices: tuple[DeviceReading, ...], mig: bool) -> tuple[str, str, str, str] | None:
    """(model, device kind, utilization it gives, what it cannot give with the reasons), for the first such device."""
    device = next((d for d in devices if d.is_mig == mig), None)
    if device is None:
        return None
    gives = ", ".join(k for k in UTILIZATION if k in device.values) or "none"
    cannot = ", ".join(f"{k} ({device.unavailable[k]})" for k in sorted(device.unavailable)) or "-"
    kind = "MIG instance" if mig else ("GPU, MIG on" if device.gpu.mig_enabled else "GPU")
    return device.gpu.model, kind, gives, cannot


@pytest.mark.parametrize("scenario", BUILTIN_SCENARIOS)
def test_the_capability_matrix_says_what_each_generation_gives(scenario: str) -> None:
    devices = _devices(scenario)
    text = DOC.read_text()
    for mig in (False, True):
        row = _row(devices, mig)
        if row is None:
            continue
        line = "| " + " | ".join(row) + " |"
        assert line in text, f"docs/capabilities.md lacks the row of {scenario}:\n{line}"


def test_a100_mig_instances_have_no_utilization_and_say_why() -> None:
    devices = _devices("a100-mig")
    instance = next(d for d in devices if d.is_mig)
    assert not {"gpu_util", "gr_engine_active", "sm_active"} & instance.values.keys()
    assert instance.unavailable["gpu_util"] == "not_per_mig_instance"
    assert instance.unavailable["gr_engine_active"] == "gpm_needs_hopper"
    parent = next(d for d in devices if not d.is_mig and d.gpu.mig_enabled)
    assert parent.unavailable["gpu_util"] == "mig_enabled"


@pytest.mark.parametrize(("scenario", "gpm"), [("l4x2", False), ("a10x4", False), ("a100x8", False), ("h200x8", True)])
def test_gpm_is_hopper_and_newer(scenario: str, gpm: bool) -> None:
    gpu = _devices(scenario)[0]
    assert ("gr_engine_active" in gpu.values) is gpm
    assert ("gr_engine_active" in gpu.unavailable) is not gpm
    assert "gpu_util" in gpu.values, "NVML's own utilization is there on every generation without MIG"


@pytest.mark.parametrize("dialect", list(Dialect))
def test_what_a_device_cannot_give_is_an_info_series(dialect: Dialect) -> None:
    devices = _devices("a100-mig")
    text = render_exposition(Snapshot(1.0, "n", devices), dialect).decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("gpu_pulse_device_unavailable_info{")]
    instance = next(d for d in devices if d.is_mig)
    pattern = re.compile(
        r'gpu_pulse_device_unavailable_info\{gpu="0",uuid="[^"]+",gpu_instance="'
        + str(instance.identity.gpu_instance_id)  # type: ignore[union-attr]
        + r'",measurement="gpu_util",reason="not_per_mig_instance"\} 1'
    )
    assert any(pattern.fullmatch(line) for line in lines)
