"""Waste and right-sizing recording rules: GPUs held, busy, measured, idle and idle-held, per pod, workload and
namespace, in GPUs (a whole GPU 1, a MIG instance its profile's share of its GPU, a time-sliced GPU 1/n per pod), the
figures the GPU waste dashboard integrates over its time range and `gpu-pulse-report` over its window.

The accounting is the report's (report/accumulate.py), on the table and thresholds both share (toolkit/migprofiles.py,
toolkit/thresholds.py): the MIG shares come from the same table, recorded once as a constant series per profile name,
and the idle threshold is the report's default. The group runs every 5 minutes: hour-scale figures need no more, and
it reads the per-pod series once per run.
"""

from __future__ import annotations

from fractions import Fraction

from rules.dialect import Vocabulary
from rules.examples import (
    FINETUNE_ON_MIG,
    INFER_ON_SHARED,
    MIG_3G,
    NOTEBOOK_ON_SHARED,
    TRAIN_ON_GPU0,
    TRAIN_ON_GPU2,
    expect,
    in_namespace,
    pod_of,
)
from rules.model import ExprCase, Group, InputSeries, Recording, RuleTest, Sample
from rules.names import BY_NAMESPACE, BY_POD, BY_WORKLOAD, OWNER, POD_INFO, POD_SHARING, POD_UTIL
from rules.series import PodEdge, device_series, plain_series, pod_series, selector, steady
from toolkit.migprofiles import FALLBACK_COMPUTE_SLICES, PROFILE_GPU_FRACTIONS
from toolkit.thresholds import Thresholds

GROUP = "gpu-pulse.waste.rules"
INTERVAL = "5m"
IDLE_UTILIZATION = Thresholds.model_validate({}).idle_utilization
BY_EDGE = "cluster, namespace, pod, uuid, gpu_instance"
TABLE = "mig_profile:gpu_pulse_mig_gpu_share:ratio"
PREFIX = "namespace_pod:gpu_pulse_pod_"
HELD, BUSY, MEASURED, IDLE, IDLE_HELD = (
    f"{PREFIX}held_gpus:sum",
    f"{PREFIX}busy_gpus:sum",
    f"{PREFIX}measured_gpus:sum",
    f"{PREFIX}idle_gpus:sum",
    f"{PREFIX}idle_held_gpus:sum",
)
SM_ACTIVE = f"{PREFIX}sm_active_ratio:avg"
# Per (pod, device) edge, recorded once at the head of the group and read by the per-pod rules after them in the same
# evaluation: the share of a GPU the device is, the GPUs the pod holds through it, and its utilization.
EDGE_GPUS = "namespace_pod_device:gpu_pulse_pod_device_gpus:max"
EDGE_HELD = "namespace_pod_device:gpu_pulse_pod_held_gpus:share"
EDGE_UTIL = "namespace_pod_device:gpu_pulse_pod_gpu_utilization_ratio:max"
SAMPLES = 11  # input samples: one a minute for ten minutes, so the 5-minute group has run at the test's eval time
EVAL = "10m"


def _number(value: Fraction) -> str:
    return repr(float(value))


def _table_expr() -> str:
    branches = [
        f'label_replace(vector({_number(share)}), "mig_profile", "{name}", "", "")'
        for name, share in sorted(PROFILE_GPU_FRACTIONS.items())
    ]
    return " or ".join(branches)


def fraction_expr() -> str:
    """Per (pod, device): the share of a GPU the device is: 1 whole; a MIG profile's share from the table; a profile
    the table lacks, its GPU-instance slices out of 7, or 1 (toolkit.migprofiles.gpu_fraction)."""
    whole = f'max by ({BY_EDGE}) ({POD_SHARING}{{mig_profile=""}} * 0 + 1)'
    known = f'max by ({BY_EDGE}) ({POD_SHARING}{{mig_profile!=""}} * 0 + on (mig_profile) group_left () {TABLE})'
    branches = [whole, known]
    slices = "|".join(str(n) for n in range(1, FALLBACK_COMPUTE_SLICES))
    for n in range(1, FALLBACK_COMPUTE_SLICES):
        regex = f"([0-9]+c\\\\.)?{n}g\\\\..*"
        share = _number(Fraction(n, FALLBACK_COMPUTE_SLICES))
        branches.append(
            f'max by ({BY_EDGE}) (({POD_SHARING}{{mig_profile=~"{regex}"}} unless on (mig_profile) {TABLE}) * 0 '
            f"+ {share})"
        )
    rest = f"([0-9]+c\\\\.)?({slices})g\\\\..*"
    branches.append(
        f'max by ({BY_EDGE}) (({POD_SHARING}{{mig_profile!=""}} unless on (mig_profile) {TABLE}) unless '
        f'{POD_SHARING}{{mig_profile=~"{rest}"}}) * 0 + 1'
    )
    return "(" + " or ".join(branches) + ")"


def _util() -> str:
    return f"max by ({BY_EDGE}) ({POD_UTIL})"


# ---- the promtool example: whole GPUs (one idle), a time-sliced GPU (one pod idle), a MIG instance --------------
UTIL = {
    TRAIN_ON_GPU0: 0.75,
    TRAIN_ON_GPU2: 0.03125,
    INFER_ON_SHARED: 0.5,
    NOTEBOOK_ON_SHARED: 0.0,
    FINETUNE_ON_MIG: 0.5,
}
SHARING = {TRAIN_ON_GPU0: 1, TRAIN_ON_GPU2: 1, INFER_ON_SHARED: 2, NOTEBOOK_ON_SHARED: 2, FINETUNE_ON_MIG: 1}


def _edge_fraction(edge: PodEdge) -> float:
    return float(PROFILE_GPU_FRACTIONS[edge.device.mig[1]]) if edge.device.mig else 1.0


def _inputs() -> tuple[InputSeries, ...]:
    series: list[InputSeries] = []
    for edge, n in SHARING.items():
        series.append(pod_series(POD_SHARING, edge, steady(n, SAMPLES)))
        series.append(pod_series(POD_UTIL, edge, steady(UTIL[edge], SAMPLES)))
    return tuple(series)


def _expected(edge_value: dict[PodEdge, float]) -> dict[tuple[str, str], float]:
    per_pod: dict[tuple[str, str], float] = {}
    for edge, value in edge_value.items():
        key = (edge.pod.namespace, edge.pod.pod)
        per_pod[key] = per_pod.get(key, 0.0) + value
    return per_pod


def _edge_figures() -> dict[str, dict[PodEdge, float]]:
    held = {e: _edge_fraction(e) / n for e, n in SHARING.items()}
    busy = {e: UTIL[e] * _edge_fraction(e) for e in SHARING}
    idle_held = {e: (held[e] if UTIL[e] <= IDLE_UTILIZATION else 0.0) for e in SHARING}
    return {"held": held, "busy": busy, "measured": held, "idle_held": idle_held}


def _pod_figures() -> dict[str, dict[tuple[str, str], float]]:
    figures = {name: _expected(values) for name, values in _edge_figures().items()}
    figures["idle"] = {k: max(0.0, figures["measured"][k] - figures["busy"][k]) for k in figures["held"]}
    return figures


POD_EDGES = {(e.pod.namespace, e.pod.pod): e for e in SHARING}


def _pod_case(record: str, figure: str) -> RuleTest:
    values = _pod_figures()[figure]
    samples = tuple(expect(record, pod_of(POD_EDGES[key]), value) for key, value in sorted(values.items()))
    return RuleTest(f"{record}: whole, time-sliced and MIG devices", _inputs(), expr_cases=(ExprCase(EVAL, samples),))


def _namespace_case(record: str, figure: str) -> RuleTest:
    by_namespace: dict[str, float] = {}
    for (namespace, _), value in _pod_figures()[figure].items():
        by_namespace[namespace] = by_namespace.get(namespace, 0.0) + value
    samples = tuple(expect(record, in_namespace(ns), v) for ns, v in sorted(by_namespace.items()))
    return RuleTest(f"{record} by namespace", _inputs(), expr_cases=(ExprCase(EVAL, samples),))


WORKLOADS = {("team-a", "train-0"): ("train", "StatefulSet"), ("team-a", "infer-1"): ("infer", "Deployment")}


def _workload_case(record: str, pod_record: str, figure: str) -> RuleTest:
    values = _pod_figures()[figure]
    inputs = [
        plain_series(pod_record, {"namespace": ns, "pod": pod}, steady(values[(ns, pod)], SAMPLES))
        for ns, pod in WORKLOADS
    ]
    inputs += [
        plain_series(OWNER, {"namespace": ns, "pod": pod, "workload": w, "workload_type": t}, steady(1, SAMPLES))
        for (ns, pod), (w, t) in WORKLOADS.items()
    ]
    samples = tuple(
        expect(record, {"namespace": ns, "workload": w, "workload_type": t}, values[(ns, pod)])
        for (ns, pod), (w, t) in sorted(WORKLOADS.items())
    )
    return RuleTest(f"{record} through the pods' owners", tuple(inputs), expr_cases=(ExprCase(EVAL, samples),))


def _sm_rule(vocab: Vocabulary) -> Recording:
    name = vocab.name("sm_active")
    device = vocab.device_max(vocab.to_base_unit("sm_active", name), ("cluster", "uuid", "gpu_instance"))
    expr = (
        f"avg by ({BY_POD}) ({device} * on (cluster, uuid, gpu_instance) "
        f'group_right max by ({BY_EDGE}) ({POD_INFO}{{share=~"exclusive|mig"}}))'
    )
    inputs = (
        *device_series(vocab, "sm_active", TRAIN_ON_GPU0.device, steady(40, SAMPLES)),
        *device_series(vocab, "sm_active", MIG_3G, steady(60, SAMPLES)),
        pod_series(POD_INFO, TRAIN_ON_GPU0, steady(1, SAMPLES)),
        pod_series(POD_INFO, FINETUNE_ON_MIG, steady(1, SAMPLES)),
    )
    return Recording(
        SM_ACTIVE,
        expr,
        "SM activity (GPM, Hopper and newer) of the whole GPUs and MIG instances a pod holds alone, mean over them, "
        "0-1: what the report's SM activity percentiles read.",
        (
            RuleTest(
                "pod SM activity from its whole GPU and its MIG instance",
                inputs,
                expr_cases=(
                    ExprCase(
                        EVAL,
                        (
                            expect(SM_ACTIVE, pod_of(TRAIN_ON_GPU0), 0.4),
                            expect(SM_ACTIVE, pod_of(FINETUNE_ON_MIG), 0.6),
                        ),
                    ),
                ),
            ),
        ),
    )


def _edge_rules() -> list[Recording]:
    """The per-edge series the per-pod rules read, with a promtool case each."""
    figures = _edge_figures()
    gpus = {e: _edge_fraction(e) for e in SHARING}
    rules = []
    for record, expr, meaning, values in (
        (EDGE_GPUS, fraction_expr(), "The share of a GPU a pod's device is: 1 whole, a MIG instance its "
         "profile's.", gpus),
        (EDGE_HELD, f"{EDGE_GPUS} / on ({BY_EDGE}) max by ({BY_EDGE}) ({POD_SHARING})",
         "GPUs a pod holds through one device: its share of a GPU over the pods sharing it.", figures["held"]),
        (EDGE_UTIL, _util(), "Utilization of one device a pod holds (its share on a shared GPU), 0-1.", UTIL),
    ):  # fmt: skip
        samples = tuple(Sample(selector(record, _edge_labels(e)), v) for e, v in values.items())
        test = RuleTest(
            f"{record}: whole, time-sliced and MIG devices", _inputs(), expr_cases=(ExprCase(EVAL, samples),)
        )
        rules.append(Recording(record, expr, meaning, (test,)))
    return rules


def _edge_labels(edge: PodEdge) -> dict[str, str]:
    labels = edge.labels()
    return {k: labels[k] for k in ("namespace", "pod", "uuid", "gpu_instance") if labels[k]}


def waste_rules(vocab: Vocabulary) -> tuple[Recording, ...]:
    share, util = EDGE_HELD, EDGE_UTIL
    measured = f"({share} and on ({BY_EDGE}) {util})"
    pod_exprs = {
        HELD: (f"sum by ({BY_POD}) ({share})", "held", "GPUs a pod holds: 1 per whole GPU, a MIG instance's share of "
               "its GPU (1g of 7 is 1/7), 1/n of a GPU time-sliced by n pods."),
        BUSY: (f"sum by ({BY_POD}) ({util} * on ({BY_EDGE}) {EDGE_GPUS})", "busy", "Busy GPUs of a pod: each "
               "device's utilization times its share of a GPU (a pod's utilization on a shared GPU is already its "
               "part of the whole GPU)."),
        MEASURED: (f"sum by ({BY_POD}) {measured}", "measured", "GPUs a pod holds whose utilization is known (MIG "
                   "instances without GPM and unattributed shares are left out)."),
        IDLE: (f"clamp_min({MEASURED} - {BUSY}, 0)", "idle", "Idle GPUs of a pod: measured minus busy. Its "
               "average over a range times the range in hours is idle GPU-hours."),
        IDLE_HELD: (f"sum by ({BY_POD}) ({share} * on ({BY_EDGE}) ({util} <= bool {IDLE_UTILIZATION}))", "idle_held",
                    f"GPUs a pod holds whose utilization is at most {IDLE_UTILIZATION:g} (the report's idle "
                    "threshold): its share of the measured GPUs over time decides reclaim."),
    }  # fmt: skip
    rules: list[Recording] = [
        Recording(
            TABLE,
            _table_expr(),
            "The share of a GPU one MIG instance of each profile holds (compute slices of the GPU's, from NVIDIA's "
            "MIG user guide: toolkit/migprofiles.py), 0-1.",
            (
                RuleTest(
                    "MIG profile shares",
                    (),
                    expr_cases=(
                        ExprCase(
                            "0m",
                            tuple(
                                Sample(selector(TABLE, {"mig_profile": name}), float(share))
                                for name, share in sorted(PROFILE_GPU_FRACTIONS.items())
                            ),
                        ),
                    ),
                ),
            ),
        ),
        *_edge_rules(),
    ]
    for record, (expr, figure, meaning) in pod_exprs.items():
        rules.append(Recording(record, expr, meaning, (_pod_case(record, figure),)))
    rules.append(_sm_rule(vocab))
    join = f"* on ({BY_POD}) group_left (workload, workload_type) {OWNER}"
    for record, (_, figure, _) in pod_exprs.items():
        name = record.removeprefix("namespace_pod:")
        workload = f"namespace_workload:{name}"
        rules.append(
            Recording(
                workload,
                f"sum by ({BY_WORKLOAD}) ({record} {join})",
                f"The sum of `{record}` over a workload's pods.",
                (_workload_case(workload, record, figure),),
            )
        )
        namespace = f"namespace:{name}"
        rules.append(
            Recording(
                namespace,
                f"sum by ({BY_NAMESPACE}) ({record})",
                f"The sum of `{record}` over a namespace's pods.",
                (_namespace_case(namespace, figure),),
            )
        )
    return tuple(rules)


def waste_group(vocab: Vocabulary) -> Group:
    return Group(GROUP, waste_rules(vocab), interval=INTERVAL)
