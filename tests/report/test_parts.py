"""The report's parts that stand alone: the window, sketches, recommendations, prices, the page."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from report.accumulate import EdgeSteps, pod_steps
from report.model import Action, Placement, WorkloadFigures, WorkloadKey
from report.recommend import hours_under, recommend
from report.sketch import bytes_sketch, ratio_sketch
from report.window import MAX_STEPS, Window, choose_step
from toolkit.thresholds import Thresholds


@given(st.integers(min_value=60, max_value=400 * 86400), st.integers(min_value=1_600_000_000, max_value=2_000_000_000))
def test_the_window_is_on_the_step_grid_and_bounded(seconds: int, end: int) -> None:
    window = Window.ending(end, seconds)
    assert window.end % window.step == 0 and window.end <= end
    assert window.steps <= MAX_STEPS or window.step == 86400
    assert window.time_of(window.steps - 1) == window.end
    assert all(window.index_of(window.time_of(i)) == i for i in (0, window.steps - 1))
    slices = window.slices(97)
    assert slices[0][0] == 0 and slices[-1][1] == window.steps - 1
    assert all(b - a + 1 <= 97 for a, b in slices)


def test_a_week_is_sampled_every_five_minutes() -> None:
    assert choose_step(7 * 86400) == 300 and choose_step(12 * 3600) == 60 and choose_step(30 * 86400) == 1800


@given(st.lists(st.floats(min_value=0, max_value=1), min_size=1, max_size=300), st.floats(min_value=0.01, max_value=1))
def test_a_quantile_is_never_below_the_true_one_nor_3_percent_above(values: list[float], q: float) -> None:
    sketch = ratio_sketch()
    sketch.add(np.array(values))
    true = float(np.quantile(np.array(values), q, method="inverted_cdf"))
    found = sketch.quantile(q)
    assert found is not None
    assert found >= true or (true <= 0.001 and found == 0.0)
    assert found <= max(true * 1.03, 0.001) + 1e-12


def test_a_sketch_ignores_gaps_and_merges() -> None:
    a, b = bytes_sketch(), bytes_sketch()
    a.add(np.array([np.nan, 2.0**30]))
    b.add(np.array([3 * 2.0**30]))
    a.merge(b)
    assert a.count == 2 and a.peak == 3 * 2.0**30 and a.quantile(1.0) == 3 * 2.0**30
    assert ratio_sketch().quantile(0.5) is None


def figures(**changes: object) -> WorkloadFigures:
    base: dict[str, object] = dict(
        key=WorkloadKey("ns", "w", "Deployment"), pods=1, models=(("NVIDIA H100 80GB HBM3", 100.0),),
        devices_per_pod=1, placement=Placement.WHOLE, profile=None, gpu_share=1.0, held_gpu_hours=100.0,
        known_gpu_hours=100.0, busy_gpu_hours=50.0, idle_gpu_hours=50.0, idle_held_gpu_hours=0.0, cost=0.0,
        utilization_p50=0.5, utilization_p95=0.6, utilization_p99=0.7, gpu_need_p99=0.7, sm_active_p50=None,
        sm_active_p95=None, memory_peak=40e9, memory_p99=30e9, gpu_memory_bytes=80e9,
    )  # fmt: skip
    base.update(changes)
    return WorkloadFigures(**base)  # type: ignore[arg-type]


def test_each_rule_of_the_recommendation() -> None:
    t = Thresholds.model_validate({})
    assert recommend(figures(held_gpu_hours=0.5), t).action is Action.KEEP
    assert recommend(figures(known_gpu_hours=0.0), t).action is Action.KEEP
    assert recommend(figures(idle_held_gpu_hours=95.0), t).action is Action.RECLAIM
    assert recommend(figures(), t).action is Action.KEEP  # 0.7 x 1.2 > 4/7: no smaller profile
    fit = recommend(figures(gpu_need_p99=0.1, memory_p99=5e9), t)
    assert (fit.action, fit.profile) == (Action.MIG, "1g.10gb")
    assert fit.saving_gpu_hours == pytest.approx(100 * 6 / 7)
    # the memory p99 with headroom decides: 9e9 x 1.2 does not fit 10 GB, 1g.20gb does
    assert recommend(figures(gpu_need_p99=0.1, memory_p99=9e9), t).profile == "1g.20gb"
    shared = recommend(figures(models=(("NVIDIA L4", 100.0),), utilization_p95=0.2, memory_p99=5e9), t)
    assert (shared.action, shared.share_with) == (Action.SHARE, 4)  # 1 / (0.2 x 1.2) = 4.2, at most max_sharing
    assert shared.saving_gpu_hours == pytest.approx(75)
    tight = recommend(figures(models=(("NVIDIA L4", 100.0),), utilization_p95=0.2, memory_p99=30e9), t)
    assert tight.action is Action.SHARE and tight.share_with == 2  # 80e9 / (30e9 x 1.2) = 2.2
    assert recommend(figures(devices_per_pod=2, gpu_need_p99=0.1, memory_p99=1e9), t).action is Action.KEEP
    mig = recommend(figures(placement=Placement.MIG, profile="3g.40gb", gpu_need_p99=0.1, memory_p99=5e9), t)
    assert mig.profile == "1g.10gb" and mig.saving_gpu_hours == pytest.approx(100 * (1 - (1 / 7) / (3 / 7)))
    assert math.isclose(
        recommend(figures(held_gpu_hours=100.0, cost=250.0, gpu_need_p99=0.1, memory_p99=5e9), t).saving_cost,
        250 * 6 / 7,
    )


def test_pod_steps_fold_devices_into_pods() -> None:
    """Pod 0 holds two whole GPUs (one idle) for two steps; pod 1 half of a time-sliced GPU in the second step only;
    pod 2 a 3g MIG instance whose utilization is unknown in the first step. The same example as rules/waste.py's."""
    nan = np.nan
    edges = EdgeSteps(
        pod_starts=np.array([0, 2, 3]),
        sharing=np.array([[1, 1], [1, 1], [nan, 2], [1, 1]], dtype=float),
        utilization=np.array([[0.75, 0.75], [0.03125, 0.03125], [nan, 0.5], [nan, 0.5]]),
        memory=np.array([[30e9, 30e9], [10e9, 10e9], [nan, 2e9], [5e9, nan]]),
        fraction=np.array([1, 1, 1, 3 / 7]),
    )
    steps = pod_steps(edges, 0.05)
    np.testing.assert_allclose(steps.held, [[2, 2], [nan, 0.5], [3 / 7, 3 / 7]])
    np.testing.assert_allclose(steps.known, [[2, 2], [nan, 0.5], [0, 3 / 7]])
    np.testing.assert_allclose(steps.busy, [[0.78125, 0.78125], [nan, 0.5], [0, 0.5 * 3 / 7]])
    np.testing.assert_allclose(steps.idle, [[1.21875, 1.21875], [nan, 0], [0, 3 / 7 - 0.5 * 3 / 7]])
    np.testing.assert_allclose(steps.idle_held, [[1, 1], [nan, 0], [0, 0]])
    np.testing.assert_allclose(steps.utilization, [[0.390625, 0.390625], [nan, 0.5], [nan, 0.5]])
    np.testing.assert_allclose(steps.gpu_need, [[nan, nan], [nan, 0.5], [nan, 0.5 * 3 / 7]])
    np.testing.assert_allclose(steps.memory, [[40e9, 40e9], [nan, 2e9], [5e9, nan]])
    assert steps.devices.tolist() == [[2, 2], [0, 1], [1, 1]]


@given(
    st.dictionaries(
        st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30),
        st.floats(min_value=0, max_value=1e6, allow_nan=False),
        max_size=8,
    ),
    st.floats(min_value=0, max_value=1e6, allow_nan=False),
)
def test_a_prices_file_reads_back(per_hour: dict[str, float], default: float) -> None:
    import tempfile
    from pathlib import Path

    import yaml

    from report.prices import load_prices

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "prices.yaml"
        path.write_text(yaml.safe_dump({"currency": "EUR", "per_hour": per_hour, "default": default}), encoding="utf-8")
        prices = load_prices(path)
    assert dict(prices.per_hour) == per_hour and prices.default == default and prices.currency == "EUR"
    for model, price in per_hour.items():
        assert prices.of(model) == price
    assert prices.of("\x00 not a model") == default


def test_hostile_names_are_escaped_in_the_page() -> None:
    from report.model import Distribution, Recommendation, Report, Timeline, WorkloadResult
    from report.page import report_html

    hostile = '<script>alert("x")</script>'
    f = figures(key=WorkloadKey(hostile, hostile, "Deployment"), models=((hostile, 100.0),))
    rec = Recommendation(Action.RECLAIM, 100.0, 0.0, (f"because {hostile}",))
    result = WorkloadResult(f, rec, Distribution((0.5,), (3,)), Distribution((2.0**30,), (3,)))
    page = report_html(
        Report(
            prometheus_url=f"http://p/{hostile}", generated_at=0.0, start=0, end=3600, step=60, currency=hostile,
            priced=True, thresholds={"headroom": 0.2}, owners=hostile,
            timeline=Timeline((60, 120), (1, 1), (1, 1), (0.5, 0.5)),
            workloads=(result,), namespaces=((hostile, 1.0, 1.0, 0.5, 0.5),), queries=1, bytes_read=1, notes=(hostile,),
        )
    )  # fmt: skip
    assert "<script" not in page and "&lt;script&gt;" in page


def page_of(**changes: object) -> str:
    from report.model import Distribution, Recommendation, Report, Timeline, WorkloadResult
    from report.page import report_html

    result = WorkloadResult(
        figures(), Recommendation(Action.KEEP, 0.0, 0.0, ("kept",)), Distribution((0.5,), (3,)),
        Distribution((2.0**30,), (3,)),
    )  # fmt: skip
    base: dict[str, object] = dict(
        prometheus_url="http://prometheus:9090", generated_at=0.0, start=0, end=3600, step=60, currency="",
        priced=False, thresholds={"headroom": 0.2}, owners="no pods", timeline=Timeline((60,), (1,), (1,), (0.5,)),
        workloads=(result,), namespaces=(("ml", 1.0, 1.0, 0.5, 0.5),), queries=1, bytes_read=1, notes=(),
    )  # fmt: skip
    base.update(changes)
    return report_html(Report(**base))  # type: ignore[arg-type]


def test_a_namespace_whose_utilization_is_unknown_reads_unknown() -> None:
    """A namespace on MIG instances of GPUs without GPM (A100): held, never measured. Its busy share is unknown,
    not 0.0% (which reads as idle), and its busy and idle hours are not 0.0 either."""
    page = page_of(namespaces=(("mig-team", 12.0, 0.0, 0.0, 0.0),))
    row = page[page.index('<td class="text">mig-team</td>') :].split("</tr>")[0]
    assert "unknown" in row and "0.0%" not in row
    assert row.count("<td>unknown</td>") == 3, row


def test_an_empty_window_is_no_verdict() -> None:
    page = page_of(workloads=(), namespaces=(), nothing_to_judge="nothing to judge: no gpu_pulse_pod series")
    assert "Nothing to judge." in page and "no gpu_pulse_pod series" in page
    assert "every one is kept" not in page.lower() and "every workload is kept" not in page.lower()
    assert "<svg" not in page and "GPU-hours held" not in page


@given(st.floats(min_value=0, max_value=1e4, allow_nan=False), st.floats(min_value=1e-6, max_value=1e4))
def test_hours_under_a_limit_never_reads_as_the_limit_nor_as_nothing(value: float, limit: float) -> None:
    if value >= limit:
        return
    shown = hours_under(value, limit)
    number = float(shown.removesuffix(" GPU-hours").replace(",", ""))
    assert number < limit
    assert number > 0 or value == 0


def test_a_slice_held_briefly_is_not_rounded_to_nothing() -> None:
    t = Thresholds.model_validate({"min_gpu_hours": 0.05})
    why = recommend(figures(held_gpu_hours=0.048, known_gpu_hours=0.048), t).why[0]
    assert why.startswith("it held 0.048 GPU-hours, under the 0.05 needed"), why


def test_a_profile_fits_by_the_memory_an_instance_really_has() -> None:
    """Issue 43: a pod with memory p99 31.5 GiB on an H100 80GB needs 37.8 GiB with the headroom. A 3g.40gb instance
    holds 39.50 GiB (`nvidia-smi mig -lgip`), not the 40e9 bytes (37.25 GiB) of its name: it fits."""
    t = Thresholds.model_validate({})
    fit = recommend(figures(gpu_need_p99=0.3, memory_p99=31.5 * 2**30), t)
    assert (fit.action, fit.profile) == (Action.MIG, "3g.40gb"), fit.why
    assert fit.profile_memory_bytes == 39.5 * 2**30
    assert "39.50 GiB" in fit.why[1]
