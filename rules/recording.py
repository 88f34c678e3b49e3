"""Recording rules: `level:metric:operations` names, levels `node_gpu` (one GPU or MIG instance), `node`,
`namespace_pod_container`, `namespace_pod_device` (a pod's share of one GPU or MIG instance), `namespace_pod`,
`namespace_workload_pod`, `namespace_workload`, `namespace`, `cluster`. Every aggregation keeps `cluster`, so the same
rules serve one cluster (no such label) and many.

Allocation is counted in devices: a whole GPU or a MIG instance is one device; a GPU shared by time-slicing or MPS is
split evenly among the pods holding it.

Rules are priced like code (docs/performance.md, bench/fleet_prometheus.py): what several rules need is recorded once
and read after (rules of a group run in order, so a rule reads what an earlier one of its group recorded in the same
evaluation), aggregations run before renames, and joins are against recorded per-pod series, not raw ones.
"""

from __future__ import annotations

from rules.devices import device_rules, node_rules
from rules.dialect import Vocabulary
from rules.model import Group
from rules.pods import edge_rules, namespace_rules, pod_rules
from rules.waste import waste_group
from rules.workloads import workload_rules

# The recording groups run every minute (Prometheus' own default) whatever the global evaluation interval: their
# readers lose nothing by it. Dashboards read them at `$__rate_interval` (four 15-s scrapes) or coarser steps, the
# report over hours, the energy rates over 5 minutes; the adapter and the alerts read the exporter's series, not these.
# At fleet size (docs/performance.md) an evaluation of a group is seconds of work, so a minute leaves it room.
INTERVAL = "1m"


def recording_groups(vocab: Vocabulary) -> tuple[Group, ...]:
    return (
        Group("gpu-pulse.device.rules", device_rules(vocab) + node_rules(), interval=INTERVAL),
        Group("gpu-pulse.pod.rules", edge_rules() + pod_rules() + namespace_rules(), interval=INTERVAL),
        Group("gpu-pulse.workload.rules", workload_rules(), interval=INTERVAL),
        waste_group(vocab),
    )
