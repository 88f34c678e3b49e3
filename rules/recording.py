"""Recording rules: `level:metric:operations` names, levels `node_gpu` (one GPU or MIG instance), `node`,
`namespace_pod_container`, `namespace_pod_device` (a pod's share of one GPU or MIG instance), `namespace_pod`,
`namespace_workload_pod`, `namespace_workload`, `namespace`, `cluster`. Every aggregation keeps `cluster`, so the same
rules serve one cluster (no such label) and many.

Allocation is counted in devices: a whole GPU or a MIG instance is one device; a GPU shared by time-slicing or MPS is
split evenly among the pods holding it.

Rules are priced like code (docs/performance.md, bench/fleet_prometheus.py): what several rules need is recorded once
and read after (rules of a group run in order, so a rule reads what an earlier one of its group recorded in the same
evaluation), aggregations run before renames, joins are against recorded per-pod series, not raw ones, and the device
and pod levels are two groups each (state, utilization, allocation and energy; memory and power), so that no group's
evaluation comes near its interval.
"""

from __future__ import annotations

from rules.devices import device_rules, node_rules
from rules.dialect import Vocabulary
from rules.model import Group, Recording
from rules.pods import edge_rules, namespace_rules, pod_rules
from rules.promql import metric_names
from rules.waste import waste_group
from rules.workloads import workload_rules

# The recording groups run every minute (Prometheus' own default) whatever the global evaluation interval: their
# readers lose nothing by it. Dashboards read them at `$__rate_interval` (four 15-s scrapes) or coarser steps, the
# report over hours, the energy rates over 5 minutes; the adapter and the alerts read the exporter's series, not these.
# At fleet size (docs/performance.md) an evaluation of a group is seconds of work, so a minute leaves it room.
INTERVAL = "1m"


# The families of the second group of the device and pod levels: memory and power (and the devices a node offers,
# counted from the framebuffer totals); energy stays with state, utilization and allocation, which evens the work
# out. A group's rules run one after another, so a group's evaluation lasts as long as all its rules together; at
# fleet size (docs/performance.md) the device and pod levels in one group each came near a tenth of the interval.
# Their rules form independent chains per family (a node or namespace sum reads the per-GPU or per-pod series of its
# own family), so they split in two groups per level with no rule reading what the other group records: every result
# stays what it was, and each group's evaluation takes about half as long.
_MEMORY_POWER = ("memory", "power", "allocatable")


def split_by_family(name: str, rules: tuple[Recording, ...]) -> tuple[Group, Group]:
    """`rules` as two groups, `name` (state, utilization, allocation, energy) and `name`'s memory and power group, in
    their order; ValueError if a rule would read a series the other group records (one evaluation late, then)."""
    memory_power = tuple(r for r in rules if any(family in r.record for family in _MEMORY_POWER))
    others = tuple(r for r in rules if r not in memory_power)
    for part, sibling in ((others, memory_power), (memory_power, others)):
        recorded = {r.record for r in sibling}
        for rule in part:
            if read := metric_names(rule.expr) & recorded:
                raise ValueError(f"{rule.record} reads {sorted(read)}, recorded in the other group of {name}")
    stem = name.removesuffix(".rules")
    return Group(name, others, interval=INTERVAL), Group(f"{stem}.memory-power.rules", memory_power, interval=INTERVAL)


def recording_groups(vocab: Vocabulary) -> tuple[Group, ...]:
    return (
        *split_by_family("gpu-pulse.device.rules", device_rules(vocab) + node_rules()),
        *split_by_family("gpu-pulse.pod.rules", edge_rules() + pod_rules() + namespace_rules()),
        Group("gpu-pulse.workload.rules", workload_rules(), interval=INTERVAL),
        waste_group(vocab),
    )
