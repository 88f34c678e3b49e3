"""The namespace board's per-pod and per-workload panels draw the TOP pods or workloads with the highest mean over the
time range (dashboards/namespace.py, for fleet size: docs/performance.md); promtool shows that they draw what the
former queries drew where that is TOP or fewer, the TOP highest where there are more, and only the chosen workloads'."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dashboards.namespace import TOP, TOP_GPUS
from tests.support.dashboard_queries import panel_targets, substitute, variable_names
from tests.support.promql_cases import assert_promql_cases

STEM = "gpu-pulse-namespace"
POWER = "namespace_pod:gpu_pulse_pod_gpu_power_watts:sum"
OWNER = "namespace_workload_pod:gpu_pulse_kube_pod_owner:relabel"
WORKLOAD_POWER = "namespace_workload:gpu_pulse_pod_gpu_power_watts:sum"
SHARED_UTIL = "gpu_pulse_pod_gpu_utilization_ratio"
POD = "cluster, namespace, pod"


def _panel(title: str, values: dict[str, str] | None = None) -> str:
    (expr,) = [e for t, e in panel_targets(STEM) if t == title]
    return substitute(expr, variable_names(STEM), values=values)


def _former_power_by_pod(workload: str = ".*") -> str:
    """The panel before: every pod of the chosen workloads, joined to its owner series."""
    return (
        f'{POWER}{{cluster=~".*", namespace=~".*"}} * on ({POD}) group_left (workload)'
        f' {OWNER}{{cluster=~".*", namespace=~".*", workload=~"{workload}"}}'
    )


def _pods(count: int) -> dict[str, str]:
    """`count` pods in namespace `a`, pod i drawing 100 + i W, each its own workload but pod 0 and 1 (workload `w`)."""
    series = {}
    for i in range(count):
        pod = f"p{i:02d}"
        workload = "w" if i < 2 else pod
        series[f'{POWER}{{cluster="c", namespace="a", pod="{pod}"}}'] = f"{100 + i}+0x10"
        series[f'{OWNER}{{cluster="c", namespace="a", pod="{pod}", workload="{workload}", workload_type="t"}}'] = (
            "1+0x10"
        )
        series[f'{WORKLOAD_POWER}{{cluster="c", namespace="a", workload="{pod}", workload_type="t"}}'] = (
            f"{100 + i}+0x10"
        )
    return series


def _shared(gpus: int) -> dict[str, str]:
    """`gpus` shared GPUs on node n, GPU g holding two pods that use 0.0g and 0.1 of it."""
    series = {}
    for g in range(gpus):
        for pod, use in ((f"x{g:02d}", g / 100), (f"y{g:02d}", 0.1)):
            labels = f'job="j", cluster="c", namespace="a", pod="{pod}", container="m", node="n", gpu="{g}"'
            series[f'{SHARED_UTIL}{{{labels}, share="process"}}'] = f"{use}+0x10"
    return series


def _count(expr: str, n: int) -> dict[str, Any]:
    return {"expr": f"count({expr})", "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": n}]}


def _none(expr: str) -> dict[str, Any]:
    return {"expr": expr, "eval_time": "5m", "exp_samples": []}


def _same(now: str, former: str, on: str) -> list[dict[str, Any]]:
    """`now` draws the lines `former` drew (matched `on` the labels the legend shows), with the same values."""
    return [
        _none(f"({former}) unless on ({on}) ({now})"),
        _none(f"({now}) unless on ({on}) ({former})"),
        _none(f"({now}) != on ({on}) ({former})"),
    ]


def test_up_to_top_pods_are_drawn_as_before(tmp_path: Path) -> None:
    now = _panel("Power by pod")
    assert "group_left" not in now
    chosen = _panel("Power by pod", {"workload": "w"})
    cases = [
        *_same(now, _former_power_by_pod(), POD),
        _count(now, TOP),
        *_same(chosen, _former_power_by_pod("w"), POD),
        _count(chosen, 2),
    ]
    assert_promql_cases(tmp_path, _pods(TOP), cases)


def test_more_pods_than_top_draw_the_top_highest(tmp_path: Path) -> None:
    now = _panel("Power by pod")
    highest = f'{POWER}{{pod=~"p(0[5-9]|[1-9][0-9])"}}'  # pods 5 to TOP + 4: the TOP highest of TOP + 5
    cases = [_count(now, TOP), *_same(now, highest, POD)]
    workloads = _panel("Power by workload")
    cases += [_count(workloads, TOP), _none(f'{workloads} and on (workload) {WORKLOAD_POWER}{{workload=~"p0[0-4]"}}')]
    assert_promql_cases(tmp_path, _pods(TOP + 5), cases)


def test_shared_gpu_splits_draw_every_pod_of_the_busiest_gpus(tmp_path: Path) -> None:
    now = _panel("Utilization split of shared GPUs")
    former = f'sum by (node, gpu, namespace, pod) ({SHARED_UTIL}{{share="process"}})'
    cases = [
        _count(now, 2 * TOP_GPUS),
        *_same(now, f'{former} and on (gpu) {SHARED_UTIL}{{gpu=~"([3-9]|1[0-2])"}}', "node, gpu, namespace, pod"),
    ]
    assert_promql_cases(tmp_path, _shared(TOP_GPUS + 3), cases)
