"""The start-up lines: what is served beyond a --collectors file, and what was asked for that this node does not
serve, with the reason and the devices."""

from __future__ import annotations

from dataclasses import replace

from exporter.catalogue import Dialect
from exporter.collectors_file import parse_selection
from exporter.fields_report import added_beyond, requested, unserved_line
from exporter.snapshot import Snapshot
from tests.support.snapshots import gpu, mig, reading

CSV = """\
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
dcgm_fb_used, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_RETIRED_SBE, counter, Retired pages.
DCGM_FI_DEV_POWER_INFOROM_VER, label, Power inforom
DCGM_EXP_GPU_HEALTH_STATUS, gauge, Health.
"""


def test_what_is_served_beyond_the_file_is_named_by_the_dialects_names() -> None:
    selection = parse_selection(CSV)
    added = added_beyond(selection, Dialect.DCGM)
    assert "DCGM_FI_DEV_GPU_TEMP" not in added  # the file has it, under that name
    assert "DCGM_FI_DEV_FB_USED" in added  # the file has it as dcgm_fb_used: the alerts read the current name too
    assert {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_SLOWDOWN_TEMP", "DCGM_FI_DEV_XID_ERRORS"} <= set(added)
    assert "nvidia_gpu_memory_used_bytes" not in added_beyond(selection, Dialect.PROMETHEUS)
    assert added_beyond(None, Dialect.DCGM) == []


def test_one_line_names_each_field_with_its_reason_and_devices() -> None:
    selection = parse_selection(CSV)
    parent = gpu(0, mig=True)
    devices = (
        replace(
            reading(gpu(1)),
            unavailable={"retired_pages_sbe": "not_supported", "inforom_power_version": "not_supported"},
        ),
        replace(reading(parent), unavailable={"gpu_util": "mig_enabled", "retired_pages_sbe": "not_supported"}),
        replace(reading(mig(parent, 0)), unavailable={"gpu_util": "not_per_mig_instance"}),
        replace(reading(gpu(2)), unavailable={"DCGM_EXP_GPU_HEALTH_STATUS": "not_in_nvml", "fb_reserved": "x"}),
    )
    asked = requested(selection, Dialect.DCGM, selection.keys)
    line = unserved_line(Snapshot(1.0, "n", devices), asked)
    assert line is not None and "\n" not in line
    assert line.startswith("requested fields this node does not serve: ")
    assert "DCGM_FI_DEV_RETIRED_SBE [not on this GPU generation, NVML says NOT_SUPPORTED; given on Volta" in line
    assert "GPU 1, GPU 0]" in line or "GPU 0, GPU 1]" in line
    assert "DCGM_FI_DEV_GPU_UTIL [MIG: not on a MIG-enabled GPU; GPU 0]" in line
    assert "DCGM_FI_DEV_GPU_UTIL [MIG: not per MIG instance; every MIG instance]" in line
    assert "DCGM_FI_DEV_POWER_INFOROM_VER [" in line
    assert "DCGM_EXP_GPU_HEALTH_STATUS [not in NVML at all, DCGM computes it: DCGM's health watches" in line
    assert "fb_reserved" not in line and "FB_RESERVED" not in line  # not asked for: not named
    assert unserved_line(Snapshot(1.0, "n", (reading(gpu(1)),)), asked) is None


def test_the_prometheus_dialect_names_a_shared_family_with_the_labels_that_tell_it_apart() -> None:
    # fp64, fp32 and fp16 pipe activity are one family there, told apart by `pipe`: each is named on its own
    keys = {"fp64_active", "fp32_active", "gpu_temp"}
    unavailable = {"fp64_active": "gpm_needs_hopper", "fp32_active": "gpm_needs_hopper"}
    devices = (replace(reading(gpu(0)), unavailable=unavailable),)
    line = unserved_line(Snapshot(1.0, "n", devices), requested(None, Dialect.PROMETHEUS, keys))
    assert line is not None
    assert 'nvidia_gpu_pipe_active_ratio{pipe="fp64"} [not on this GPU generation: GPM is Hopper' in line
    assert 'nvidia_gpu_pipe_active_ratio{pipe="fp32"} [' in line
    assert line.count("nvidia_gpu_pipe_active_ratio") == 2
    assert line.startswith("fields of the default set this node does not serve: ")  # no file asked for them
