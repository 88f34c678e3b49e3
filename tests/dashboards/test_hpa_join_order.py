"""The autoscaling board's HPA panels join the owner series to the HPAs first (dashboards/autoscaling.py, for speed at
fleet size: docs/performance.md); promtool shows they give what the former order gave, series and values."""

from __future__ import annotations

from pathlib import Path

from tests.support.dashboard_queries import panel_targets, substitute, variable_names
from tests.support.promql_cases import assert_promql_cases

# the former order, substituted as tests.support.dashboard_queries substitutes (every variable All)
TARGET = (
    "max by (cluster, namespace, horizontalpodautoscaler, workload) (label_replace(kube_horizontalpodautoscaler_info{"
    'cluster=~".*", namespace=~".*", horizontalpodautoscaler=~".*"}, "workload", "$1", "scaletargetref_name", "(.*)"))'
)
FORMER_PER_POD = (
    '100 * namespace_pod:gpu_pulse_pod_gpu_utilization_ratio:avg{cluster=~".*", namespace=~".*"}'
    " * on (cluster, namespace, pod) group_left (workload) namespace_workload_pod:gpu_pulse_kube_pod_owner:relabel"
    f" * on (cluster, namespace, workload) group_left (horizontalpodautoscaler) {TARGET}"
)
FORMER = {
    "GPU utilization the HPA reads, and its target": (
        f"avg by (cluster, namespace, horizontalpodautoscaler) ({FORMER_PER_POD})"
    ),
    "gpu_utilization per pod of the scale target": FORMER_PER_POD,
}

UTILIZATION = "namespace_pod:gpu_pulse_pod_gpu_utilization_ratio:avg"
OWNER = "namespace_workload_pod:gpu_pulse_kube_pod_owner:relabel"
# two namespaces with a Deployment `w1` each, one scaled by an HPA each; a StatefulSet nobody scales; a pod no
# owner series names
SERIES = {
    f'{UTILIZATION}{{cluster="c", namespace="a", pod="w1-x"}}': "0.5+0x10",
    f'{UTILIZATION}{{cluster="c", namespace="a", pod="w1-y"}}': "0.3+0.01x10",
    f'{UTILIZATION}{{cluster="c", namespace="a", pod="w2-z"}}': "0.9+0x10",
    f'{UTILIZATION}{{cluster="c", namespace="a", pod="lone"}}': "0.7+0x10",
    f'{UTILIZATION}{{cluster="c", namespace="b", pod="w1-q"}}': "0.1+0x10",
    f'{OWNER}{{cluster="c", namespace="a", pod="w1-x", workload="w1", workload_type="Deployment"}}': "1+0x10",
    f'{OWNER}{{cluster="c", namespace="a", pod="w1-y", workload="w1", workload_type="Deployment"}}': "1+0x10",
    f'{OWNER}{{cluster="c", namespace="a", pod="w2-z", workload="w2", workload_type="StatefulSet"}}': "1+0x10",
    f'{OWNER}{{cluster="c", namespace="b", pod="w1-q", workload="w1", workload_type="Deployment"}}': "1+0x10",
    'kube_horizontalpodautoscaler_info{cluster="c", namespace="a", horizontalpodautoscaler="h1", '
    'scaletargetref_kind="Deployment", scaletargetref_name="w1"}': "1+0x10",
    'kube_horizontalpodautoscaler_info{cluster="c", namespace="b", horizontalpodautoscaler="h2", '
    'scaletargetref_kind="Deployment", scaletargetref_name="w1"}': "1+0x10",
}


def test_the_hpa_panels_give_what_the_former_join_order_gave(tmp_path: Path) -> None:
    names = variable_names("gpu-pulse-autoscaling")
    shipped = {
        title: substitute(expr, names)
        for title, expr in panel_targets("gpu-pulse-autoscaling")
        if "group_left" in expr  # the panel's other target is the HPA's own figure
    }
    cases = []
    for title, former in FORMER.items():
        now = shipped[title]
        assert now != former, title  # the board reads the new order
        cases += [
            {"expr": f"({former}) unless ({now})", "eval_time": "5m", "exp_samples": []},
            {"expr": f"({now}) unless ({former})", "eval_time": "5m", "exp_samples": []},
            {"expr": f"({now}) != ({former})", "eval_time": "5m", "exp_samples": []},
        ]
    counts = {"GPU utilization the HPA reads, and its target": 2, "gpu_utilization per pod of the scale target": 3}
    cases += [
        {"expr": f"count({shipped[title]})", "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": n}]}
        for title, n in counts.items()
    ]
    assert_promql_cases(tmp_path, SERIES, cases)
