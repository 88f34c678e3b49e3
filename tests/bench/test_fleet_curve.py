"""bench/fleet_curve.py: the line fitted through the fleet benchmark's figures, and what it projects."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from fleet_curve import FIGURES, curve, fit, flat_figures

sizes = st.lists(st.integers(min_value=50, max_value=5000), min_size=2, max_size=6, unique=True)
coefficients = st.floats(min_value=-100, max_value=100, allow_nan=False)


@given(sizes, coefficients, st.floats(min_value=0.001, max_value=10, allow_nan=False))
def test_points_on_a_line_give_that_line_back(nodes: list[int], intercept: float, slope: float) -> None:
    line = fit([(float(n), intercept + slope * n) for n in nodes])
    assert math.isclose(line.slope, slope, rel_tol=1e-6, abs_tol=1e-9)
    assert math.isclose(line.intercept, intercept, rel_tol=1e-6, abs_tol=1e-5)
    assert line.worst_error < 1e-6 or min(abs(intercept + slope * n) for n in nodes) < 1e-3
    goal = intercept + slope * 12_500
    reached = line.reaches(goal)
    assert reached is not None and math.isclose(reached, 12_500, rel_tol=1e-6)


def test_a_flat_or_falling_figure_never_reaches_its_goal_and_one_size_is_no_line() -> None:
    assert fit([(250.0, 3.0), (2000.0, 3.0)]).reaches(5.0) is None
    assert fit([(250.0, 3.0), (2000.0, 1.0)]).reaches(5.0) is None
    with pytest.raises(ValueError, match="two different sizes"):
        fit([(250.0, 1.0), (250.0, 2.0)])


def test_the_curve_names_the_first_resource_to_run_out(capsys: pytest.CaptureFixture[str]) -> None:
    """CPU grows 0.1 core per 1,000 nodes from 0.05 (its 1-core goal at 9,500 nodes), RSS 100 MiB per 1,000 nodes
    from 50 (its 400 MiB goal at 3,500): memory runs out first."""
    runs = [
        {"nodes": n, "cpu_cores_max": 0.05 + 0.0001 * n, "rss_mib_max": 50 + 0.1 * n, "p99_large_ms": math.nan}
        for n in (250, 500, 1000, 2000)
    ]
    report = curve(runs, 12_500)
    assert report["first_goal_reached"] == (pytest.approx(3500), "adapter RSS, largest replica")
    assert report["fits"]["cpu_cores_max"]["projected"] == pytest.approx(1.3)
    assert "p99_large_ms" not in report["fits"]  # no figure at any size: no line
    assert {f.key for f in FIGURES} >= set(report["fits"])
    assert "first to reach its goal: adapter RSS, largest replica, at about 3,500 nodes" in capsys.readouterr().out


def test_a_fleet_runs_figures_are_read_under_the_curves_keys() -> None:
    run = {
        "nodes": 250,
        "cpu_cores_per_replica": [0.1, 0.3],
        "rss_mib_per_replica": [120.0, 110.0],
        "answers_large": {"p50_ms": 5.0, "p99_ms": 12.0, "answers": 200},
        "answers_ten": {"p50_ms": 2.0, "p99_ms": 6.0, "answers": 800},
        "baseline": {"p50_ms": 1.0, "p99_ms": 4.0, "answers": 2000},
        "figure_age_s": {"p99": 2.5, "max_age": 5.0},
        "requests_per_exporter_per_minute": {"mean": 0.5, "max": 2.0},
        "documents_per_exporter_per_minute": {"mean": 60.0, "max": 61.0},
    }
    figures = flat_figures(run)
    assert {f.key: figures[f.key] for f in FIGURES} == {
        "cpu_cores_max": 0.3,
        "rss_mib_max": 120.0,
        "p99_large_ms": 12.0,
        "p99_ten_ms": 6.0,
        "baseline_p99_ms": 4.0,
        "figure_age_p99_s": 2.5,
        "requests_per_exporter_per_minute": 0.5,
        "documents_per_exporter_per_minute": 60.0,
    }


def test_a_loose_fit_is_shown_but_not_projected() -> None:
    runs = [{"nodes": n, "p99_large_ms": p99} for n, p99 in ((250, 9.0), (500, 7.0), (1000, 15.0), (2000, 8.0))]
    report = curve(runs, 12_500)
    assert report["fits"]["p99_large_ms"]["projected"] is None and report["first_goal_reached"] is None
