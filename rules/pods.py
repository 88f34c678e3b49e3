"""Pod, container and namespace recording rules, read from the per-pod series both dialects publish alike, and the
allocation figures: devices held, busy GPU-equivalents, idle devices and allocation efficiency.
"""

from __future__ import annotations

from rules.examples import (
    FINETUNE_ON_MIG,
    GIB,
    INFER_ON_SHARED,
    MIG_3G,
    MIG_NODE,
    MIG_PARENT,
    NODE,
    NOTEBOOK_ON_SHARED,
    TRAIN_ON_GPU0,
    TRAIN_ON_GPU2,
    expect,
    in_namespace,
    normalized_input,
    pod_of,
)
from rules.model import ExprCase, InputSeries, Recording, RuleTest, Sample
from rules.names import (
    BY_NAMESPACE,
    BY_NODE,
    BY_POD,
    BY_POD_DEVICE,
    DEV_MEM_TOTAL,
    POD_ENERGY,
    POD_INFO,
    POD_MEMORY,
    POD_POWER,
    POD_SHARING,
    POD_UTIL,
)
from rules.series import PodEdge, PodKey, TestDevice, pod_series, ramp, selector, steady

# Recorded first in the pod group, then read by the rules after them in the same evaluation: the allocation and the
# busy share of each (pod, device) edge, so that no rule rebuilds them from the raw series again.
EDGE_ALLOCATED = "namespace_pod_device:gpu_pulse_pod_allocated_devices:max"
EDGE_BUSY = "namespace_pod_device:gpu_pulse_pod_gpu_utilization_ratio:sum"
# Per (pod, device): the allocation left unused, at least 0. Clamped per edge, not per namespace: on a time-sliced GPU
# a pod can use more than its 1/n (nothing in time-slicing stops it), and netting that against another pod's idle
# share would understate idle devices and lift allocation efficiency above 1.
EDGE_IDLE = f"clamp_min({EDGE_ALLOCATED} - {EDGE_BUSY}, 0)"
POD_CONTAINER_MEMORY = "namespace_pod_container:gpu_pulse_pod_gpu_memory_used_bytes:sum"
POD_MEMORY_SUM = "namespace_pod:gpu_pulse_pod_gpu_memory_used_bytes:sum"
POD_POWER_SUM = "namespace_pod:gpu_pulse_pod_gpu_power_watts:sum"
POD_ENERGY_RATE = "namespace_pod:gpu_pulse_pod_gpu_energy_joules:rate5m"
NAMESPACE_BUSY = "namespace:gpu_pulse_pod_gpu_utilization_ratio:sum"
NAMESPACE_SHARES = "namespace_share:gpu_pulse_pod_device_info:count"


def _alloc_inputs() -> tuple[InputSeries, ...]:
    """Train holds two whole GPUs; infer and notebook share GPU1 (2 pods); finetune holds a MIG instance."""
    return (
        *(pod_series(POD_SHARING, e, steady(1, 3)) for e in (TRAIN_ON_GPU0, TRAIN_ON_GPU2, FINETUNE_ON_MIG)),
        pod_series(POD_SHARING, INFER_ON_SHARED, steady(2, 3)),
        pod_series(POD_SHARING, NOTEBOOK_ON_SHARED, steady(2, 3)),
    )


def edge_rules() -> tuple[Recording, ...]:
    """The per-edge series the pod and namespace allocation rules read (first in the group)."""
    util_inputs = (
        pod_series(POD_UTIL, TRAIN_ON_GPU0, steady(0.75, 3)),
        pod_series(POD_UTIL, INFER_ON_SHARED, steady(0.5, 3)),
        pod_series(POD_UTIL, NOTEBOOK_ON_SHARED, steady(0, 3)),
    )
    return (
        Recording(
            EDGE_ALLOCATED,
            # 1 / min of the pod count is max of 1 / pod count (x -> 1/x is decreasing, and so is its rounding),
            # divided once per (pod, device) after the aggregation, not once per raw series before it
            f"1 / min by ({BY_POD_DEVICE}) ({POD_SHARING})",
            "Devices a pod holds of one GPU or MIG instance: 1, or 1/n of a GPU shared by n pods.",
            (
                RuleTest(
                    "edge allocation",
                    _alloc_inputs(),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                Sample(selector(EDGE_ALLOCATED, _edge(TRAIN_ON_GPU0)), 1),
                                Sample(selector(EDGE_ALLOCATED, _edge(TRAIN_ON_GPU2)), 1),
                                Sample(selector(EDGE_ALLOCATED, _edge(INFER_ON_SHARED)), 0.5),
                                Sample(selector(EDGE_ALLOCATED, _edge(NOTEBOOK_ON_SHARED)), 0.5),
                                Sample(selector(EDGE_ALLOCATED, _edge(FINETUNE_ON_MIG)), 1),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            EDGE_BUSY,
            f"sum by ({BY_POD_DEVICE}) ({POD_UTIL})",
            "Busy share of one GPU or MIG instance that a pod's containers use, 0-1.",
            (
                RuleTest(
                    "edge utilization",
                    util_inputs,
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                Sample(selector(EDGE_BUSY, _edge(TRAIN_ON_GPU0)), 0.75),
                                Sample(selector(EDGE_BUSY, _edge(INFER_ON_SHARED)), 0.5),
                                Sample(selector(EDGE_BUSY, _edge(NOTEBOOK_ON_SHARED)), 0),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


# A time-sliced GPU (two pods of team-a: one using 0.75 of the GPU, more than its half, one idle) and another (team-c's
# pod using 0.8, team-d's idle): the over-use makes up for nobody's idle share.
SLICED_A = TestDevice(node=NODE, gpu=3, uuid="GPU-a3000000-0000-0000-0000-000000000000")
SLICED_B = TestDevice(node=NODE, gpu=4, uuid="GPU-a4000000-0000-0000-0000-000000000000")
OVER_USE = {
    PodEdge(PodKey("team-a", "chat-0", "server"), SLICED_A, share="process"): 0.75,
    PodEdge(PodKey("team-a", "batch-0", "worker"), SLICED_A, share="process"): 0.0,
    PodEdge(PodKey("team-c", "render-0", "main"), SLICED_B, share="process"): 0.8,
    PodEdge(PodKey("team-d", "notebook-0", "main"), SLICED_B, share="process"): 0.0,
}


def _over_use_test(record: str, by_namespace: dict[str, float]) -> RuleTest:
    inputs = tuple(
        series
        for edge, utilization in OVER_USE.items()
        for series in (pod_series(POD_SHARING, edge, steady(2, 3)), pod_series(POD_UTIL, edge, steady(utilization, 3)))
    )
    samples = tuple(expect(record, in_namespace(ns), value) for ns, value in sorted(by_namespace.items()))
    return RuleTest(
        f"{record}: time-sliced GPUs with a pod using more than its share",
        inputs,
        expr_cases=(ExprCase("2m", samples),),
    )


def _edge(edge: PodEdge) -> dict[str, str]:
    """The labels of an edge's recorded series (empty ones left out)."""
    labels = edge.labels()
    return {k: labels[k] for k in ("namespace", "pod", "uuid", "gpu_instance") if labels[k]}


def pod_rules() -> tuple[Recording, ...]:
    util_inputs = (
        pod_series(POD_UTIL, TRAIN_ON_GPU0, steady(0.75, 3)),
        pod_series(POD_UTIL, TRAIN_ON_GPU2, steady(0.25, 3)),
        pod_series(POD_UTIL, INFER_ON_SHARED, steady(0.5, 3)),
    )
    mem_inputs = (
        pod_series(POD_MEMORY, TRAIN_ON_GPU0, steady(30 * GIB, 3)),
        pod_series(POD_MEMORY, TRAIN_ON_GPU2, steady(10 * GIB, 3)),
        pod_series(POD_MEMORY, FINETUNE_ON_MIG, steady(5 * GIB, 3)),
    )
    return (
        Recording(
            "namespace_pod_container:gpu_pulse_pod_gpu_utilization_ratio:avg",
            f"avg by (cluster, namespace, pod, container) ({POD_UTIL})",
            "Mean GPU utilization of a container over the GPUs or MIG instances it holds, 0-1 (its share on a "
            "shared GPU).",
            (
                RuleTest(
                    "container utilization",
                    util_inputs,
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                Sample(
                                    selector(
                                        "namespace_pod_container:gpu_pulse_pod_gpu_utilization_ratio:avg",
                                        pod_of(TRAIN_ON_GPU0) | {"container": "trainer"},
                                    ),
                                    0.5,
                                ),
                                Sample(
                                    selector(
                                        "namespace_pod_container:gpu_pulse_pod_gpu_utilization_ratio:avg",
                                        pod_of(INFER_ON_SHARED) | {"container": "server"},
                                    ),
                                    0.5,
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            POD_CONTAINER_MEMORY,
            f"sum by (cluster, namespace, pod, container) ({POD_MEMORY})",
            "Framebuffer bytes a container uses across its GPUs.",
            (
                RuleTest(
                    "container memory",
                    mem_inputs,
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                Sample(
                                    selector(
                                        "namespace_pod_container:gpu_pulse_pod_gpu_memory_used_bytes:sum",
                                        pod_of(TRAIN_ON_GPU0) | {"container": "trainer"},
                                    ),
                                    40 * GIB,
                                ),
                                Sample(
                                    selector(
                                        "namespace_pod_container:gpu_pulse_pod_gpu_memory_used_bytes:sum",
                                        pod_of(FINETUNE_ON_MIG) | {"container": "trainer"},
                                    ),
                                    5 * GIB,
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "namespace_pod:gpu_pulse_pod_gpu_utilization_ratio:avg",
            f"avg by ({BY_POD}) ({POD_UTIL})",
            "Mean GPU utilization of a pod over its GPUs, 0-1: what the adapter serves as `gpu_utilization` (x100).",
            (
                RuleTest(
                    "pod utilization",
                    util_inputs,
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(
                                    "namespace_pod:gpu_pulse_pod_gpu_utilization_ratio:avg", pod_of(TRAIN_ON_GPU0), 0.5
                                ),
                                expect(
                                    "namespace_pod:gpu_pulse_pod_gpu_utilization_ratio:avg",
                                    pod_of(INFER_ON_SHARED),
                                    0.5,
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            POD_MEMORY_SUM,
            f"sum by ({BY_POD}) ({POD_CONTAINER_MEMORY})",
            "Framebuffer bytes a pod uses across its GPUs: the adapter's `gpu_memory_used_bytes`.",
            (
                RuleTest(
                    "pod memory",
                    mem_inputs,
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(
                                    "namespace_pod:gpu_pulse_pod_gpu_memory_used_bytes:sum",
                                    pod_of(TRAIN_ON_GPU0),
                                    40 * GIB,
                                ),
                                expect(
                                    "namespace_pod:gpu_pulse_pod_gpu_memory_used_bytes:sum",
                                    pod_of(FINETUNE_ON_MIG),
                                    5 * GIB,
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "namespace_pod:gpu_pulse_pod_gpu_memory_utilization:max",
            f"max by ({BY_POD}) (sum by ({BY_POD_DEVICE}) ({POD_MEMORY})"
            f" / on (cluster, uuid, gpu_instance) group_left {DEV_MEM_TOTAL})",
            "The fullest of a pod's GPUs or MIG instances: its framebuffer use over the device's framebuffer, 0-1: "
            "the adapter's `gpu_memory_utilization` (x100).",
            (
                RuleTest(
                    "pod memory ratio, whole GPUs and a MIG instance",
                    (
                        *mem_inputs,
                        normalized_input(DEV_MEM_TOTAL, TRAIN_ON_GPU0.device, steady(80 * GIB, 3)),
                        normalized_input(DEV_MEM_TOTAL, TRAIN_ON_GPU2.device, steady(80 * GIB, 3)),
                        normalized_input(DEV_MEM_TOTAL, MIG_PARENT, steady(40 * GIB, 3)),
                        normalized_input(DEV_MEM_TOTAL, MIG_3G, steady(20 * GIB, 3)),
                    ),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(
                                    "namespace_pod:gpu_pulse_pod_gpu_memory_utilization:max",
                                    pod_of(TRAIN_ON_GPU0),
                                    0.375,
                                ),
                                expect(
                                    "namespace_pod:gpu_pulse_pod_gpu_memory_utilization:max",
                                    pod_of(FINETUNE_ON_MIG),
                                    0.25,
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            POD_POWER_SUM,
            f"sum by ({BY_POD}) ({POD_POWER})",
            "A pod's part of the power its GPUs draw, in watts: the adapter's `gpu_power_watts`.",
            (
                RuleTest(
                    "pod power",
                    (
                        pod_series(POD_POWER, TRAIN_ON_GPU0, steady(300, 3)),
                        pod_series(POD_POWER, TRAIN_ON_GPU2, steady(100.5, 3)),
                    ),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (expect("namespace_pod:gpu_pulse_pod_gpu_power_watts:sum", pod_of(TRAIN_ON_GPU0), 400.5),),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            POD_ENERGY_RATE,
            f"sum by ({BY_POD}) (rate({POD_ENERGY}[5m]))",
            "A pod's part of its GPUs' energy use over the last 5 minutes, in watts.",
            (
                RuleTest(
                    "pod energy rate",
                    (
                        pod_series(POD_ENERGY, TRAIN_ON_GPU0, ramp(1000, 12000, 11)),
                        pod_series(POD_ENERGY, TRAIN_ON_GPU2, ramp(0, 6000, 11)),
                    ),
                    expr_cases=(
                        ExprCase(
                            "10m",
                            (
                                expect(
                                    "namespace_pod:gpu_pulse_pod_gpu_energy_joules:rate5m", pod_of(TRAIN_ON_GPU0), 300
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "namespace_pod:gpu_pulse_pod_allocated_devices:sum",
            f"sum by ({BY_POD}) ({EDGE_ALLOCATED})",
            "Devices a pod holds: 1 per whole GPU or MIG instance, 1/n of a GPU shared by n pods.",
            (
                RuleTest(
                    "pod allocation",
                    _alloc_inputs(),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect("namespace_pod:gpu_pulse_pod_allocated_devices:sum", pod_of(TRAIN_ON_GPU0), 2),
                                expect(
                                    "namespace_pod:gpu_pulse_pod_allocated_devices:sum", pod_of(INFER_ON_SHARED), 0.5
                                ),
                                expect(
                                    "namespace_pod:gpu_pulse_pod_allocated_devices:sum", pod_of(NOTEBOOK_ON_SHARED), 0.5
                                ),
                                expect("namespace_pod:gpu_pulse_pod_allocated_devices:sum", pod_of(FINETUNE_ON_MIG), 1),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


def namespace_rules() -> tuple[Recording, ...]:
    util_inputs = (
        pod_series(POD_UTIL, TRAIN_ON_GPU0, steady(0.75, 3)),
        pod_series(POD_UTIL, TRAIN_ON_GPU2, steady(0.25, 3)),
        pod_series(POD_UTIL, INFER_ON_SHARED, steady(0.5, 3)),
        pod_series(POD_UTIL, NOTEBOOK_ON_SHARED, steady(0, 3)),
    )
    return (
        Recording(
            "namespace:gpu_pulse_pod_gpu_utilization_ratio:avg",
            f"avg by ({BY_NAMESPACE}) ({POD_UTIL})",
            "Mean over every (pod, container, GPU) utilization figure in the namespace, 0-1: the adapter's external "
            "`namespace_gpu_utilization` (x100).",
            (
                RuleTest(
                    "namespace mean utilization",
                    util_inputs,
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(
                                    "namespace:gpu_pulse_pod_gpu_utilization_ratio:avg", in_namespace("team-a"), 0.5
                                ),
                                expect("namespace:gpu_pulse_pod_gpu_utilization_ratio:avg", in_namespace("team-b"), 0),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            NAMESPACE_BUSY,
            f"sum by ({BY_NAMESPACE}) ({EDGE_BUSY})",
            "Busy GPU-equivalents of the namespace: the sum of its pods' utilization figures.",
            (
                RuleTest(
                    "namespace busy devices",
                    util_inputs,
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(
                                    "namespace:gpu_pulse_pod_gpu_utilization_ratio:sum", in_namespace("team-a"), 1.5
                                ),
                                expect("namespace:gpu_pulse_pod_gpu_utilization_ratio:sum", in_namespace("team-b"), 0),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "namespace:gpu_pulse_pod_gpu_memory_used_bytes:sum",
            f"sum by ({BY_NAMESPACE}) ({POD_MEMORY_SUM})",
            "Framebuffer bytes the namespace's pods use.",
            (
                RuleTest(
                    "namespace memory",
                    (
                        pod_series(POD_MEMORY, TRAIN_ON_GPU0, steady(30 * GIB, 3)),
                        pod_series(POD_MEMORY, INFER_ON_SHARED, steady(2 * GIB, 3)),
                    ),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(
                                    "namespace:gpu_pulse_pod_gpu_memory_used_bytes:sum",
                                    in_namespace("team-a"),
                                    32 * GIB,
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "namespace:gpu_pulse_pod_gpu_power_watts:sum",
            f"sum by ({BY_NAMESPACE}) ({POD_POWER_SUM})",
            "The namespace's part of GPU power draw, in watts.",
            (
                RuleTest(
                    "namespace power",
                    (
                        pod_series(POD_POWER, TRAIN_ON_GPU0, steady(300, 3)),
                        pod_series(POD_POWER, INFER_ON_SHARED, steady(50.25, 3)),
                    ),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (expect("namespace:gpu_pulse_pod_gpu_power_watts:sum", in_namespace("team-a"), 350.25),),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "namespace:gpu_pulse_pod_gpu_energy_joules:rate5m",
            f"sum by ({BY_NAMESPACE}) ({POD_ENERGY_RATE})",
            "The namespace's part of GPU energy use over the last 5 minutes, in watts.",
            (
                RuleTest(
                    "namespace energy rate",
                    (
                        pod_series(POD_ENERGY, TRAIN_ON_GPU0, ramp(0, 12000, 11)),
                        pod_series(POD_ENERGY, INFER_ON_SHARED, ramp(0, 3000, 11)),
                    ),
                    expr_cases=(
                        ExprCase(
                            "10m",
                            (expect("namespace:gpu_pulse_pod_gpu_energy_joules:rate5m", in_namespace("team-a"), 250),),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "namespace:gpu_pulse_pod_allocated_devices:sum",
            f"sum by ({BY_NAMESPACE}) ({EDGE_ALLOCATED})",
            "Devices the namespace's pods hold (whole GPUs and MIG instances count 1, a shared GPU 1/n per pod).",
            (
                RuleTest(
                    "namespace allocation",
                    _alloc_inputs(),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect("namespace:gpu_pulse_pod_allocated_devices:sum", in_namespace("team-a"), 2.5),
                                expect("namespace:gpu_pulse_pod_allocated_devices:sum", in_namespace("team-b"), 0.5),
                                expect("namespace:gpu_pulse_pod_allocated_devices:sum", in_namespace("ml"), 1),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "namespace:gpu_pulse_pod_idle_devices:sum",
            f"sum by ({BY_NAMESPACE}) ({EDGE_IDLE})",
            "Allocated but unused devices of the namespace: per pod and device, allocation minus utilization and at "
            "least 0 (a pod using more than its share of a time-sliced GPU does not make up for another's idle "
            "share), over the devices whose use is known. Its average over a range times the range in hours is idle "
            "GPU-hours.",
            (
                RuleTest(
                    "namespace idle devices; MIG without utilization is left out",
                    _alloc_inputs() + util_inputs,
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect("namespace:gpu_pulse_pod_idle_devices:sum", in_namespace("team-a"), 1),
                                expect("namespace:gpu_pulse_pod_idle_devices:sum", in_namespace("team-b"), 0.5),
                            ),
                        ),
                    ),
                ),
                _over_use_test("namespace:gpu_pulse_pod_idle_devices:sum", {"team-a": 0.5, "team-c": 0, "team-d": 0.5}),
            ),
        ),
        Recording(
            "namespace:gpu_pulse_pod_allocated_devices_used:ratio",
            f"sum by ({BY_NAMESPACE}) ({EDGE_ALLOCATED} - {EDGE_IDLE}) / sum by ({BY_NAMESPACE}) "
            f"({EDGE_ALLOCATED} and {EDGE_BUSY})",
            "Allocation efficiency of the namespace: the allocation used, each pod's use of each device counted up to "
            "its allocation (a pod using more than its share of a time-sliced GPU counts its share), over the "
            "allocation measured, 0-1.",
            (
                RuleTest(
                    "namespace allocation efficiency",
                    _alloc_inputs() + util_inputs,
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(
                                    "namespace:gpu_pulse_pod_allocated_devices_used:ratio", in_namespace("team-a"), 0.6
                                ),
                                expect(
                                    "namespace:gpu_pulse_pod_allocated_devices_used:ratio", in_namespace("team-b"), 0
                                ),
                            ),
                        ),
                    ),
                ),
                _over_use_test(
                    "namespace:gpu_pulse_pod_allocated_devices_used:ratio", {"team-a": 0.5, "team-c": 1, "team-d": 0}
                ),
            ),
        ),
        Recording(
            "node:gpu_pulse_pod_allocated_devices:sum",
            f"sum by ({BY_NODE}) (1 / min by (cluster, node, uuid, gpu_instance, namespace, pod) ({POD_SHARING}))",
            "Devices held by pods on the node (compare with node:gpu_pulse_allocatable_devices:count).",
            (
                RuleTest(
                    "node allocation",
                    _alloc_inputs(),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect("node:gpu_pulse_pod_allocated_devices:sum", {"node": NODE}, 3),
                                expect("node:gpu_pulse_pod_allocated_devices:sum", {"node": MIG_NODE}, 1),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            NAMESPACE_SHARES,
            f"count by ({BY_NAMESPACE}, share) ({POD_INFO})",
            "The namespace's (pod, container, device) edges by how each one's share is known: exclusive, mig, process "
            "(NVML per-process samples) or unattributed (a shared GPU without a per-process figure).",
            (
                RuleTest(
                    "namespace edges by share method",
                    tuple(
                        pod_series(POD_INFO, edge, steady(1, 3))
                        for edge in (TRAIN_ON_GPU0, TRAIN_ON_GPU2, INFER_ON_SHARED, NOTEBOOK_ON_SHARED, FINETUNE_ON_MIG)
                    ),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(NAMESPACE_SHARES, in_namespace("team-a") | {"share": "exclusive"}, 2),
                                expect(NAMESPACE_SHARES, in_namespace("team-a") | {"share": "process"}, 1),
                                expect(NAMESPACE_SHARES, in_namespace("team-b") | {"share": "process"}, 1),
                                expect(NAMESPACE_SHARES, in_namespace("ml") | {"share": "mig"}, 1),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )
