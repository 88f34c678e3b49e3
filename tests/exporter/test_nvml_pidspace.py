"""Whose PIDs NVML's lists and samples carry: the driver table, the namespace check, and what may be matched."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.nvml.pidspace import PROC_PID_INIT_INO, PidNamespace, lists_translated, own_pid_namespace
from simulation.driver import translates_pids


@pytest.mark.parametrize(
    ("version", "translated"),
    [
        ("470.256.02", False),
        ("535.104.05", False),
        ("535.104.12", False),
        ("535.113.01", True),
        ("535.43.23", False),
        ("535.43.24", True),
        ("545.23.06", True),
        ("550.54.15", True),
        ("570.86.15", True),
        ("580.65.06", True),
        ("535.113.01-custom", True),
        ("", None),
        ("not a version", None),
    ],
)
def test_which_drivers_list_processes_in_the_callers_namespace(version: str, translated: bool | None) -> None:
    assert lists_translated(version) is translated


@given(major=st.integers(0, 999), minor=st.integers(0, 999), patch=st.integers(0, 999))
def test_the_exporter_and_the_simulator_read_the_same_fact_from_gpu_rmapi(major: int, minor: int, patch: int) -> None:
    """Two tables written apart (the exporter never imports the simulator), checked against each other."""
    version = f"{major}.{minor}.{patch}"
    assert lists_translated(version) is translates_pids(version)


@given(st.text(max_size=40))
def test_any_version_text_is_read_or_refused_without_raising(text: str) -> None:
    assert lists_translated(text) in (True, False, None)


@pytest.mark.parametrize(
    ("host", "driver", "match"),
    [
        (True, "550.54.15", True),  # hostPID: lists and samples both host PIDs
        (True, "", True),
        (False, "535.104.05", True),  # an old driver lists host PIDs, as the samples are
        (False, "550.54.15", False),  # namespace PIDs beside host-PID samples
        (False, "garbage", False),  # unknown driver: never risk the wrong pod
        (None, "535.104.05", False),  # unknown namespace: the same
    ],
)
def test_samples_are_matched_only_where_both_sides_carry_the_same_pids(
    host: bool | None, driver: str, match: bool
) -> None:
    assert PidNamespace(host).samples_match_lists(driver) is match


def test_this_process_namespace_is_read_from_its_namespace_link(tmp_path: Path) -> None:
    found = own_pid_namespace()
    link = Path("/proc/self/ns/pid")
    assert found.host == (link.stat().st_ino == PROC_PID_INIT_INO)
    assert own_pid_namespace(str(tmp_path / "no-such-link")) == PidNamespace(None)
    assert "unknown" in PidNamespace(None).describe() and "hostPID" in PidNamespace(False).describe()
