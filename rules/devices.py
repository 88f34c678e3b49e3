"""Device and node recording rules: each dialect's device series normalized into `node_gpu:*` (base units, the same
labels in both dialects), and node aggregates over them. MIG instances keep their own `node_gpu` series; node sums
count whole GPUs only, so a MIG-enabled GPU's memory is not counted twice.
"""

from __future__ import annotations

from rules.dialect import Vocabulary
from rules.examples import (
    GIB,
    GPU0,
    GPU1,
    MIG_1G,
    MIG_3G,
    MIG_NODE,
    MIG_PARENT,
    NODE,
    expect,
    normalized_input,
    normalized_up,
)
from rules.model import ExprCase, Recording, RuleTest
from rules.names import (
    BY_CLUSTER,
    BY_NODE,
    CLUSTER_SNAPSHOT_AGE_MAX,
    CLUSTER_SNAPSHOT_AGE_MEDIAN,
    CLUSTER_UTIL_COUNT,
    CLUSTER_UTIL_SUM,
    DEV_ENERGY,
    DEV_MEM_TOTAL,
    DEV_MEM_USED,
    DEV_POWER,
    DEV_UP,
    DEV_UTIL,
    SNAPSHOT,
    SNAPSHOT_AGE,
)
from rules.series import device_series, plain_series, ramp, steady, up_series


def _device(vocab: Vocabulary, key: str, expr_name: str | None = None) -> str:
    """One normalized series per device, in base units (dcgm: de-duplicated across the per-pod copies)."""
    return vocab.to_base_unit(key, vocab.device_max(expr_name or vocab.name(key)))


def device_rules(vocab: Vocabulary) -> tuple[Recording, ...]:
    energy = vocab.name("total_energy")
    return (
        Recording(
            DEV_UP,
            vocab.device_max(vocab.up),
            "1 while the GPU answers NVML, 0 once it is lost; one series per physical GPU.",
            (
                RuleTest(
                    "node_gpu up",
                    (up_series(vocab, GPU0, steady(1, 5)), up_series(vocab, GPU1, steady(1, 2).then(steady(0, 3)))),
                    expr_cases=(
                        ExprCase(
                            "4m",
                            (expect(DEV_UP, GPU0.normalized(), 1), expect(DEV_UP, GPU1.normalized(), 0)),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            DEV_UTIL,
            _device(vocab, "gpu_util"),
            "GPU utilization of each whole GPU, 0-1 (MIG-enabled GPUs do not report it).",
            (
                RuleTest(
                    "node_gpu utilization",
                    device_series(vocab, "gpu_util", GPU0, steady(50, 3))
                    + device_series(vocab, "gpu_util", GPU1, steady(25, 3)),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (expect(DEV_UTIL, GPU0.normalized(), 0.5), expect(DEV_UTIL, GPU1.normalized(), 0.25)),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            DEV_MEM_USED,
            _device(vocab, "fb_used"),
            "Framebuffer bytes allocated on each GPU and on each MIG instance (`gpu_instance` set).",
            (
                RuleTest(
                    "node_gpu memory used, whole and MIG",
                    device_series(vocab, "fb_used", GPU1, steady(4 * GIB, 3))
                    + device_series(vocab, "fb_used", MIG_PARENT, steady(12 * GIB, 3))
                    + device_series(vocab, "fb_used", MIG_3G, steady(10 * GIB, 3)),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(DEV_MEM_USED, GPU1.normalized(), 4 * GIB),
                                expect(DEV_MEM_USED, MIG_PARENT.normalized(), 12 * GIB),
                                expect(DEV_MEM_USED, MIG_3G.normalized(), 10 * GIB),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            DEV_MEM_TOTAL,
            _device(vocab, "fb_total"),
            "Framebuffer size in bytes of each GPU and MIG instance.",
            (
                RuleTest(
                    "node_gpu memory total",
                    device_series(vocab, "fb_total", GPU0, steady(80 * GIB, 3))
                    + device_series(vocab, "fb_total", MIG_1G, steady(5 * GIB, 3)),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect(DEV_MEM_TOTAL, GPU0.normalized(), 80 * GIB),
                                expect(DEV_MEM_TOTAL, MIG_1G.normalized(), 5 * GIB),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            DEV_POWER,
            _device(vocab, "power_usage"),
            "Power draw of each GPU in watts.",
            (
                RuleTest(
                    "node_gpu power",
                    device_series(vocab, "power_usage", GPU1, steady(350500, 3)),
                    expr_cases=(ExprCase("2m", (expect(DEV_POWER, GPU1.normalized(), 350.5),)),),
                ),
            ),
        ),
        Recording(
            DEV_ENERGY,
            vocab.to_base_unit("total_energy", vocab.device_max(f"rate({energy}[5m])")),
            "Energy use of each GPU over the last 5 minutes, in joules per second (watts).",
            (
                RuleTest(
                    "node_gpu energy rate",
                    # 300 W: 300,000 mJ per second, 18,000,000 mJ per one-minute sample
                    device_series(vocab, "total_energy", GPU0, ramp(5_000_000_000, 18_000_000, 11)),
                    expr_cases=(ExprCase("10m", (expect(DEV_ENERGY, GPU0.normalized(), 300),)),),
                ),
            ),
        ),
    )


def node_rules() -> tuple[Recording, ...]:
    whole = '{gpu_instance=""}'
    ups = (
        normalized_up(GPU0, steady(1, 3)),
        normalized_up(GPU1, steady(0, 3)),
        normalized_up(MIG_PARENT, steady(1, 3)),
    )
    node1, node2 = {"node": NODE}, {"node": MIG_NODE}
    return (
        Recording(
            "node:nvidia_gpu_up:sum",
            f"sum by ({BY_NODE}) ({DEV_UP})",
            "GPUs on the node that answer NVML.",
            (
                RuleTest(
                    "node GPUs up",
                    ups,
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect("node:nvidia_gpu_up:sum", node1, 1),
                                expect("node:nvidia_gpu_up:sum", node2, 1),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "node:nvidia_gpu_up:count",
            f"count by ({BY_NODE}) ({DEV_UP})",
            "GPUs the node's exporter knows, up or not.",
            (
                RuleTest(
                    "node GPUs known",
                    ups,
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect("node:nvidia_gpu_up:count", node1, 2),
                                expect("node:nvidia_gpu_up:count", node2, 1),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            "node:nvidia_gpu_utilization_ratio:avg",
            f"avg by ({BY_NODE}) ({DEV_UTIL}{whole})",
            "Mean utilization of the node's whole GPUs, 0-1.",
            (
                RuleTest(
                    "node utilization",
                    (
                        normalized_input(DEV_UTIL, GPU0, steady(0.5, 3)),
                        normalized_input(DEV_UTIL, GPU1, steady(0.25, 3)),
                    ),
                    expr_cases=(ExprCase("2m", (expect("node:nvidia_gpu_utilization_ratio:avg", node1, 0.375),)),),
                ),
            ),
        ),
        *cluster_utilization_rules(),
        *cluster_snapshot_age_rules(),
        Recording(
            "node:nvidia_gpu_memory_used_bytes:sum",
            f"sum by ({BY_NODE}) ({DEV_MEM_USED}{whole})",
            "Framebuffer bytes allocated on the node's GPUs (MIG instances are counted in their GPU's figure).",
            (
                RuleTest(
                    "node memory used, MIG instances not counted twice",
                    (
                        normalized_input(DEV_MEM_USED, MIG_PARENT, steady(12 * GIB, 3)),
                        normalized_input(DEV_MEM_USED, MIG_3G, steady(10 * GIB, 3)),
                    ),
                    expr_cases=(ExprCase("2m", (expect("node:nvidia_gpu_memory_used_bytes:sum", node2, 12 * GIB),)),),
                ),
            ),
        ),
        Recording(
            "node:nvidia_gpu_memory_total_bytes:sum",
            f"sum by ({BY_NODE}) ({DEV_MEM_TOTAL}{whole})",
            "Framebuffer bytes of all the node's GPUs.",
            (
                RuleTest(
                    "node memory total",
                    (
                        normalized_input(DEV_MEM_TOTAL, GPU0, steady(80 * GIB, 3)),
                        normalized_input(DEV_MEM_TOTAL, GPU1, steady(80 * GIB, 3)),
                    ),
                    expr_cases=(ExprCase("2m", (expect("node:nvidia_gpu_memory_total_bytes:sum", node1, 160 * GIB),)),),
                ),
            ),
        ),
        Recording(
            "node:nvidia_gpu_memory_used:ratio",
            "node:nvidia_gpu_memory_used_bytes:sum / node:nvidia_gpu_memory_total_bytes:sum",
            "Share of the node's framebuffer that is allocated, 0-1.",
            (
                RuleTest(
                    "node memory ratio",
                    (
                        normalized_input(DEV_MEM_USED, GPU0, steady(20 * GIB, 3)),
                        normalized_input(DEV_MEM_USED, GPU1, steady(60 * GIB, 3)),
                        normalized_input(DEV_MEM_TOTAL, GPU0, steady(80 * GIB, 3)),
                        normalized_input(DEV_MEM_TOTAL, GPU1, steady(80 * GIB, 3)),
                    ),
                    expr_cases=(ExprCase("2m", (expect("node:nvidia_gpu_memory_used:ratio", node1, 0.5),)),),
                ),
            ),
        ),
        Recording(
            "node:nvidia_gpu_power_watts:sum",
            f"sum by ({BY_NODE}) ({DEV_POWER})",
            "Power draw of the node's GPUs, in watts.",
            (
                RuleTest(
                    "node power",
                    (
                        normalized_input(DEV_POWER, GPU0, steady(300, 3)),
                        normalized_input(DEV_POWER, GPU1, steady(150.5, 3)),
                    ),
                    expr_cases=(ExprCase("2m", (expect("node:nvidia_gpu_power_watts:sum", node1, 450.5),)),),
                ),
            ),
        ),
        Recording(
            "node:nvidia_gpu_energy_joules:rate5m",
            f"sum by ({BY_NODE}) ({DEV_ENERGY})",
            "Energy use of the node's GPUs over the last 5 minutes, in watts.",
            (
                RuleTest(
                    "node energy rate",
                    (
                        normalized_input(DEV_ENERGY, GPU0, steady(300, 3)),
                        normalized_input(DEV_ENERGY, GPU1, steady(100, 3)),
                    ),
                    expr_cases=(ExprCase("2m", (expect("node:nvidia_gpu_energy_joules:rate5m", node1, 400),)),),
                ),
            ),
        ),
        Recording(
            "node:gpu_pulse_allocatable_devices:count",
            f'count by ({BY_NODE}) ({DEV_MEM_TOTAL}{{gpu_instance!=""}}'
            f' or ({DEV_MEM_TOTAL}{whole} unless on (cluster, uuid) {DEV_MEM_TOTAL}{{gpu_instance!=""}}))',
            "Devices pods can be given: whole GPUs without MIG, plus every MIG instance.",
            (
                RuleTest(
                    "allocatable devices: MIG parents are replaced by their instances",
                    (
                        normalized_input(DEV_MEM_TOTAL, GPU0, steady(80 * GIB, 3)),
                        normalized_input(DEV_MEM_TOTAL, MIG_PARENT, steady(40 * GIB, 3)),
                        normalized_input(DEV_MEM_TOTAL, MIG_3G, steady(20 * GIB, 3)),
                        normalized_input(DEV_MEM_TOTAL, MIG_1G, steady(5 * GIB, 3)),
                    ),
                    expr_cases=(
                        ExprCase(
                            "2m",
                            (
                                expect("node:gpu_pulse_allocatable_devices:count", node1, 1),
                                expect("node:gpu_pulse_allocatable_devices:count", node2, 2),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


def cluster_utilization_rules() -> tuple[Recording, ...]:
    """The sum and the count of the whole GPUs' utilization per cluster: the fleet's mean utilization is their
    quotient (summed over the clusters chosen), the same mean as `avg` over every GPU's series, read from one series
    per cluster instead of one per GPU (docs/decisions/2026-11-28-namespace-board-top-20.md)."""
    inputs = (
        normalized_input(DEV_UTIL, GPU0, steady(0.5, 3)),
        normalized_input(DEV_UTIL, GPU1, steady(0.25, 3)),
        normalized_input(DEV_UTIL, MIG_3G, steady(0.9, 3)),  # a MIG instance (GPM): not a whole GPU, left out
    )
    return (
        Recording(
            CLUSTER_UTIL_SUM,
            f'sum by ({BY_CLUSTER}) ({DEV_UTIL}{{gpu_instance=""}})',
            f"Busy whole GPUs of the cluster: the sum of their utilization; over `{CLUSTER_UTIL_COUNT}`, the mean "
            "utilization of the whole GPUs.",
            (
                RuleTest(
                    "cluster utilization sum",
                    inputs,
                    expr_cases=(ExprCase("2m", (expect(CLUSTER_UTIL_SUM, {}, 0.75),)),),
                ),
            ),
        ),
        Recording(
            CLUSTER_UTIL_COUNT,
            f'count by ({BY_CLUSTER}) ({DEV_UTIL}{{gpu_instance=""}})',
            "Whole GPUs of the cluster that report a utilization (MIG-enabled GPUs do not).",
            (
                RuleTest(
                    "cluster utilization count",
                    inputs,
                    expr_cases=(ExprCase("2m", (expect(CLUSTER_UTIL_COUNT, {}, 2),)),),
                ),
            ),
        ),
    )


def cluster_snapshot_age_rules() -> tuple[Recording, ...]:
    """How old the exporters' snapshots were at their last scrape, the oldest and the median per cluster: the overview
    board draws the fleet's from two series per cluster instead of working out every exporter's age at each step of
    its range (dashboards/overview.py)."""
    ages = (
        plain_series(SNAPSHOT, {"instance": "10.0.0.11:9400", "node": NODE}, ramp(0, 60, 6)),  # fresh: 0 s
        plain_series(SNAPSHOT, {"instance": "10.0.0.12:9400", "node": MIG_NODE}, ramp(-30, 60, 6)),  # 30 s behind
        # a poll loop stuck from minute 3: 120 s old at minute 5
        plain_series(
            SNAPSHOT, {"instance": "10.0.0.13:9400", "node": "gpu-node-3"}, ramp(0, 60, 4).then(steady(180, 2))
        ),
    )
    return (
        Recording(
            CLUSTER_SNAPSHOT_AGE_MAX,
            f"max by ({BY_CLUSTER}) ({SNAPSHOT_AGE})",
            "Seconds the oldest exporter's snapshot had been taken when it was last scraped; above a few poll "
            "intervals a poll loop is stuck or too slow.",
            (
                RuleTest(
                    "oldest snapshot", ages, expr_cases=(ExprCase("5m", (expect(CLUSTER_SNAPSHOT_AGE_MAX, {}, 120),)),)
                ),
            ),
        ),
        Recording(
            CLUSTER_SNAPSHOT_AGE_MEDIAN,
            f"quantile by ({BY_CLUSTER}) (0.5, {SNAPSHOT_AGE})",
            "Seconds the median exporter's snapshot had been taken when it was last scraped.",
            (
                RuleTest(
                    "median snapshot",
                    ages,
                    expr_cases=(ExprCase("5m", (expect(CLUSTER_SNAPSHOT_AGE_MEDIAN, {}, 30),)),),
                ),
            ),
        ),
    )
