"""Workload recording rules: pods to their Deployment, StatefulSet, Job ... through kube-state-metrics, and per-workload
GPU figures. Without kube-state-metrics a pod is its own workload, labelled workload_type="unknown".
"""

from __future__ import annotations

from rules.examples import (
    FINETUNE_ON_MIG,
    GIB,
    GPU1,
    INFER_ON_SHARED,
    NOTEBOOK_ON_SHARED,
    TRAIN_ON_GPU0,
    TRAIN_ON_GPU2,
    expect,
    pod_of,
)
from rules.model import ExprCase, InputSeries, Recording, RuleTest
from rules.names import BY_POD, BY_WORKLOAD, OWNER, POD_INFO, POD_MEMORY, POD_POWER, POD_UTIL
from rules.pods import POD_MEMORY_SUM, POD_POWER_SUM
from rules.series import PodEdge, PodKey, plain_series, pod_series, steady


def _owner_expr() -> str:
    """One series per pod with GPU series: its workload and workload_type (a Kubernetes kind, or `unknown`).

    Deployments are reached through the pod's ReplicaSet (kube_replicaset_owner); other controllers are the pod's own
    owner; a pod without owner is its own workload (`Pod`). Pods with GPU series that kube-state-metrics does not
    report (it is absent, or lags), or reports with no controller among its owners, are their own workload with
    workload_type="unknown": never guessed from names.
    """
    rs_owner = (
        "max by (cluster, namespace, replicaset, owner_kind, owner_name)"
        ' (kube_replicaset_owner{owner_kind="Deployment"})'
    )
    # The pod's own series are narrowed to the labels the branches read before any label_replace or join: each of
    # those builds a new label set per series, and kube_pod_owner carries uid, owner_is_controller and the scrape's
    # labels besides, which the outer `max by` drops anyway (one label set per pod and owner either way).
    by_rs = f'max by ({BY_POD}, owner_name) (kube_pod_owner{{owner_kind="ReplicaSet"}})'
    deployment = (
        f'label_replace({by_rs}, "replicaset", "$1", "owner_name", "(.*)")'
        " * on (cluster, namespace, replicaset) group_left (owner_kind, owner_name)"
        f" topk by (cluster, namespace, replicaset) (1, {rs_owner})"
    )
    owned = (
        f"max by ({BY_POD}, owner_kind, owner_name)"
        ' (kube_pod_owner{owner_kind!="<none>", owner_is_controller!="false"})'
    )
    ownerless = _relabel('kube_pod_owner{owner_kind="<none>"}', "workload_type", "Pod", "owner_kind", ".*")
    ownerless = _relabel(ownerless, "workload", "$1", "pod", "(.*)")
    # Every GPU pod: `or` adds only those no branch before named, so kube_pod_owner is not read again to leave the
    # others out (a pod whose every owner is a non-controller one is `unknown` too).
    unknown = f"group by ({BY_POD}) ({POD_INFO})"
    unknown = _relabel(_relabel(unknown, "workload_type", "unknown", "owner_kind", ""), "workload", "$1", "pod", "(.*)")
    # Each branch names its own workload: the pods without owner (all of them without kube-state-metrics) get their
    # two labels once, not an owner_kind/owner_name pair first and the workload labels from those after.
    union = (
        f"{_workload(deployment)} or on ({BY_POD}) {_workload(owned)} or on ({BY_POD}) {ownerless}"
        f" or on ({BY_POD}) {unknown}"
    )
    # Only the pods with GPU series: kube-state-metrics reports every pod of the cluster, and every reader of the map
    # joins GPU figures, so the others' owners would be selected by each join and matched by none
    # (docs/decisions/2026-11-29-rules-on-prometheus-3.md).
    return f"max by ({BY_POD}, workload, workload_type) ({union}) and on ({BY_POD}) {POD_INFO}"


def _workload(owners: str) -> str:
    """`owners` (kube_pod_owner-like series) with workload and workload_type copied from owner_name and owner_kind."""
    return _relabel(
        _relabel(owners, "workload", "$1", "owner_name", "(.*)"), "workload_type", "$1", "owner_kind", "(.*)"
    )


def _relabel(expr: str, target: str, replacement: str, source: str, regex: str) -> str:
    return f'label_replace({expr}, "{target}", "{replacement}", "{source}", "{regex}")'


def _ksm_inputs() -> tuple[InputSeries, ...]:
    ksm = {"job": "kube-state-metrics"}
    return (
        plain_series(
            "kube_pod_owner",
            ksm
            | {
                "namespace": "team-a",
                "pod": "infer-1",
                "owner_kind": "ReplicaSet",
                "owner_name": "infer-7c9f8",
                "owner_is_controller": "true",
            },
            steady(1, 3),
        ),
        plain_series(
            "kube_replicaset_owner",
            ksm
            | {"namespace": "team-a", "replicaset": "infer-7c9f8", "owner_kind": "Deployment", "owner_name": "infer"},
            steady(1, 3),
        ),
        plain_series(
            "kube_pod_owner",
            ksm
            | {
                "namespace": "team-a",
                "pod": "train-0",
                "owner_kind": "StatefulSet",
                "owner_name": "train",
                "owner_is_controller": "true",
            },
            steady(1, 3),
        ),
        plain_series(
            "kube_pod_owner",
            ksm
            | {
                "namespace": "team-b",
                "pod": "notebook-1",
                "owner_kind": "<none>",
                "owner_name": "<none>",
                "owner_is_controller": "<none>",
            },
            steady(1, 3),
        ),
        # a pod without GPUs (kube-state-metrics reports every pod): not in the map
        plain_series(
            "kube_pod_owner",
            ksm
            | {
                "namespace": "team-a",
                "pod": "web-5d4f9-x2k7q",
                "owner_kind": "ReplicaSet",
                "owner_name": "web-5d4f9",
                "owner_is_controller": "true",
            },
            steady(1, 3),
        ),
        plain_series(
            "kube_replicaset_owner",
            ksm | {"namespace": "team-a", "replicaset": "web-5d4f9", "owner_kind": "Deployment", "owner_name": "web"},
            steady(1, 3),
        ),
    )


def workload_rules() -> tuple[Recording, ...]:
    info = tuple(
        pod_series(POD_INFO, e, steady(1, 3))
        for e in (TRAIN_ON_GPU0, INFER_ON_SHARED, NOTEBOOK_ON_SHARED, FINETUNE_ON_MIG)
    )

    def owner(pod: PodEdge, workload: str, kind: str) -> dict[str, str]:
        return pod_of(pod) | {"workload": workload, "workload_type": kind}

    def owner_series(pod: PodEdge, workload: str, kind: str) -> InputSeries:
        return plain_series(OWNER, owner(pod, workload, kind), steady(1, 3))

    join = f"* on ({BY_POD}) group_left (workload, workload_type) {OWNER}"
    return (
        Recording(
            OWNER,
            _owner_expr(),
            "1 per pod with GPU series, labelled with its `workload` and `workload_type` (Deployment, StatefulSet, "
            "Job, DaemonSet, ReplicaSet, Pod; `unknown` where kube-state-metrics does not report the pod or its "
            "controller).",
            (
                RuleTest(
                    "pod owners: through the ReplicaSet, direct, none, unknown to kube-state-metrics; GPU pods only",
                    _ksm_inputs() + info,
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(OWNER, owner(INFER_ON_SHARED, "infer", "Deployment"), 1),
                                expect(OWNER, owner(TRAIN_ON_GPU0, "train", "StatefulSet"), 1),
                                expect(OWNER, owner(NOTEBOOK_ON_SHARED, "notebook-1", "Pod"), 1),
                                expect(OWNER, owner(FINETUNE_ON_MIG, "finetune-0", "unknown"), 1),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "namespace_workload:gpu_pulse_pod_gpu_utilization_ratio:avg",
            f"avg by ({BY_WORKLOAD}) ({POD_UTIL} {join})",
            "Mean GPU utilization of a workload's pods over their GPUs, 0-1.",
            (
                RuleTest(
                    "workload utilization",
                    (
                        pod_series(POD_UTIL, TRAIN_ON_GPU0, steady(0.75, 3)),
                        pod_series(POD_UTIL, TRAIN_ON_GPU2, steady(0.25, 3)),
                        pod_series(POD_UTIL, PodEdge(PodKey("team-a", "train-1", "trainer"), GPU1), steady(0.5, 3)),
                        owner_series(TRAIN_ON_GPU0, "train", "StatefulSet"),
                        plain_series(
                            OWNER,
                            {
                                "namespace": "team-a",
                                "pod": "train-1",
                                "workload": "train",
                                "workload_type": "StatefulSet",
                            },
                            steady(1, 3),
                        ),
                    ),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(
                                    "namespace_workload:gpu_pulse_pod_gpu_utilization_ratio:avg",
                                    {"namespace": "team-a", "workload": "train", "workload_type": "StatefulSet"},
                                    0.5,
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "namespace_workload:gpu_pulse_pod_gpu_memory_used_bytes:sum",
            f"sum by ({BY_WORKLOAD}) ({POD_MEMORY_SUM} {join})",
            "Framebuffer bytes a workload's pods use.",
            (
                RuleTest(
                    "workload memory",
                    (
                        pod_series(POD_MEMORY, TRAIN_ON_GPU0, steady(30 * GIB, 3)),
                        pod_series(POD_MEMORY, INFER_ON_SHARED, steady(3 * GIB, 3)),
                        owner_series(TRAIN_ON_GPU0, "train", "StatefulSet"),
                        owner_series(INFER_ON_SHARED, "infer", "Deployment"),
                    ),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(
                                    "namespace_workload:gpu_pulse_pod_gpu_memory_used_bytes:sum",
                                    {"namespace": "team-a", "workload": "infer", "workload_type": "Deployment"},
                                    3 * GIB,
                                ),
                                expect(
                                    "namespace_workload:gpu_pulse_pod_gpu_memory_used_bytes:sum",
                                    {"namespace": "team-a", "workload": "train", "workload_type": "StatefulSet"},
                                    30 * GIB,
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "namespace_workload:gpu_pulse_pod_gpu_power_watts:sum",
            f"sum by ({BY_WORKLOAD}) ({POD_POWER_SUM} {join})",
            "A workload's part of GPU power draw, in watts.",
            (
                RuleTest(
                    "workload power",
                    (
                        pod_series(POD_POWER, TRAIN_ON_GPU0, steady(200, 3)),
                        pod_series(POD_POWER, TRAIN_ON_GPU2, steady(100, 3)),
                        owner_series(TRAIN_ON_GPU0, "train", "StatefulSet"),
                    ),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(
                                    "namespace_workload:gpu_pulse_pod_gpu_power_watts:sum",
                                    {"namespace": "team-a", "workload": "train", "workload_type": "StatefulSet"},
                                    300,
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "namespace_workload:gpu_pulse_pod_allocated_devices:sum",
            f"sum by ({BY_WORKLOAD}) (namespace_pod:gpu_pulse_pod_allocated_devices:sum {join})",
            "Devices a workload's pods hold.",
            (
                RuleTest(
                    "workload allocation",
                    (
                        plain_series(
                            "namespace_pod:gpu_pulse_pod_allocated_devices:sum", pod_of(TRAIN_ON_GPU0), steady(2, 3)
                        ),
                        plain_series(
                            "namespace_pod:gpu_pulse_pod_allocated_devices:sum", pod_of(INFER_ON_SHARED), steady(0.5, 3)
                        ),
                        owner_series(TRAIN_ON_GPU0, "train", "StatefulSet"),
                        owner_series(INFER_ON_SHARED, "infer", "Deployment"),
                    ),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(
                                    "namespace_workload:gpu_pulse_pod_allocated_devices:sum",
                                    {"namespace": "team-a", "workload": "train", "workload_type": "StatefulSet"},
                                    2,
                                ),
                                expect(
                                    "namespace_workload:gpu_pulse_pod_allocated_devices:sum",
                                    {"namespace": "team-a", "workload": "infer", "workload_type": "Deployment"},
                                    0.5,
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )
