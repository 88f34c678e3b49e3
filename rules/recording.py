"""Recording rules: `level:metric:operations` names, levels `node_gpu` (one GPU or MIG instance), `node`,
`namespace_pod_container`, `namespace_pod_device` (a pod's share of one GPU or MIG instance), `namespace_pod`,
`namespace_workload_pod`, `namespace_workload`, `namespace`, `cluster`. Every aggregation keeps `cluster`, so the same
rules serve one cluster (no such label) and many.

Allocation is counted in devices: a whole GPU or a MIG instance is one device; a GPU shared by time-slicing or MPS is
split evenly among the pods holding it.

Rules are priced like code (bench/fleet_prometheus.py; docs/decisions/2026-11-27-rules-at-fleet-size.md): what several
rules need is recorded once and read after (rules of a group run in order, so a rule reads what an earlier one of its
group recorded in the same evaluation), aggregations run before renames, joins are against recorded per-pod series,
not raw ones, and each level is split by what its series are for: state and utilization every minute, accounting
(allocation, memory, power, energy, workloads) every two minutes, waste every five.
"""

from __future__ import annotations

from dataclasses import dataclass

from rules.devices import device_rules, node_rules
from rules.dialect import Vocabulary
from rules.inference import INTERVAL as INFERENCE_INTERVAL
from rules.inference import engine_owner_rule, inference_rules
from rules.model import Group, Recording
from rules.pods import edge_rules, namespace_rules, pod_rules
from rules.promql import metric_names
from rules.waste import waste_group
from rules.workloads import workload_rules

# What the groups of state and utilization run at: whether a GPU answers and how busy GPUs, pods and namespaces are,
# the series the dashboards' current-state panels read. Prometheus' own default evaluation interval.
INTERVAL = "1m"
# What the accounting groups run at: allocation (and the busy and idle devices counted against it), memory, power,
# energy and the workload roll-ups. Allocation changes when pods are scheduled, energy is a 5-minute rate, and
# memory, power and workloads are read by dashboards and the report over hours; no alert and no autoscaling answer
# reads any of them (the alerts and the adapter's default queries read the exporter's series). Why two minutes:
# docs/decisions/2026-11-28-two-rule-cadences.md; their dashboard panels step at this interval (dashboards/grafana.py).
ACCOUNTING_INTERVAL = "2m"


@dataclass(frozen=True, slots=True)
class Part:
    """One group of a level: the rules whose recorded names carry one of `families`, evaluated every `interval`."""

    suffix: str  # the group is `<level>.<suffix>.rules`
    interval: str
    families: tuple[str, ...]


# The device level: state and utilization stay in `gpu-pulse.device.rules`; memory, power, energy and the devices a
# node offers (counted from the framebuffer totals) are accounting.
DEVICE_PARTS = (Part("memory-power", ACCOUNTING_INTERVAL, ("memory", "power", "energy", "allocatable")),)
# The pod level: the utilization averages stay in `gpu-pulse.pod.rules`; allocation, with the busy sums and the idle
# devices worked out against it, and memory, power and energy are accounting.
POD_PARTS = (
    Part("memory-power", ACCOUNTING_INTERVAL, ("memory", "power", "energy")),
    Part("allocation", ACCOUNTING_INTERVAL, ("allocated", "idle", "device_info", "utilization_ratio:sum")),
)


def split_by_family(name: str, rules: tuple[Recording, ...], parts: tuple[Part, ...]) -> tuple[Group, ...]:
    """`rules` as the level's own group `name` (every minute) and one group per part, each in the rules' order; a
    rule belongs to the first part whose family its name carries. ValueError if a rule would read a series another
    group of the level records (it would read it as of that group's last evaluation, not this one's) or a group
    would be empty."""
    stem = name.removesuffix(".rules")
    assigned: dict[str, list[Recording]] = {name: []}
    intervals = {name: INTERVAL}
    for part in parts:
        assigned[f"{stem}.{part.suffix}.rules"] = []
        intervals[f"{stem}.{part.suffix}.rules"] = part.interval
    for rule in rules:
        home = next((p for p in parts if any(family in rule.record for family in p.families)), None)
        assigned[name if home is None else f"{stem}.{home.suffix}.rules"].append(rule)
    for group, members in assigned.items():
        if not members:
            raise ValueError(f"{group} would have no rule")
        elsewhere = {r.record for other, rs in assigned.items() if other != group for r in rs}
        for rule in members:
            if read := metric_names(rule.expr) & elsewhere:
                raise ValueError(f"{rule.record} reads {sorted(read)}, recorded in another group of {name}")
    return tuple(Group(group, tuple(members), interval=intervals[group]) for group, members in assigned.items())


def recording_groups(vocab: Vocabulary) -> tuple[Group, ...]:
    return (
        *split_by_family("gpu-pulse.device.rules", device_rules(vocab) + node_rules(), DEVICE_PARTS),
        *split_by_family("gpu-pulse.pod.rules", edge_rules() + pod_rules() + namespace_rules(), POD_PARTS),
        Group("gpu-pulse.workload.rules", (*workload_rules(), engine_owner_rule()), interval=ACCOUNTING_INTERVAL),
        Group("gpu-pulse.inference.rules", inference_rules(), interval=INFERENCE_INTERVAL),
        waste_group(vocab),
    )


def recording_intervals(vocab: Vocabulary) -> dict[str, str]:
    """Each recorded series' name and the interval of the group that writes it."""
    return {
        rule.record: group.interval or INTERVAL
        for group in recording_groups(vocab)
        for rule in group.rules
        if isinstance(rule, Recording)
    }
