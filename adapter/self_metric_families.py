"""Every self-metric family an adapter serves, as a replica shows them the moment it starts (nothing counted yet).

The families are registered by the parts that own them as each is built (adapter/parts.py); this gathers the same
collectors over parts at rest, so that rules and dashboards (rules/inventory.py) can be held to the names a running
adapter serves without starting one. tests/adapter/test_adapter_parts.py holds the two to the same families.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from adapter.api.selfmetrics import AdapterMetrics, ConnectionsCollector
from adapter.auth.selfmetrics import token_review_collector, trust_reload_collector
from adapter.keda.admission import CallAdmission
from adapter.keda.callers import PeerDirectory
from adapter.keda.front import ScalerFront
from adapter.keda.selfmetrics import AdmissionCollector, FrontCollector, KedaMetrics, ScalerCollector
from adapter.podcache.selfmetrics import PodCacheCollector
from adapter.sources.feedmetrics import NodeFeedsCollector
from adapter.sources.nodeanswer import NodeAnswer
from toolkit.connections import ConnectionStats


@dataclass(frozen=True)
class _AtStart:
    """Each part's live figures before it has done anything: what its collector reads the moment it is registered."""

    size: int = 0
    synced: bool = False
    documents: int = 0
    connections: int = 0
    failures: int = 0
    streams: int = 0
    workloads: int = 0

    def current_answers(self) -> list[NodeAnswer]:
        return []

    def stats(self) -> ConnectionStats:
        return ConnectionStats(open=0, limit=0, accepted=0, refused=0, evicted=0, header_timeouts=0, idle_timeouts=0)


def self_metric_families(source: str = "direct") -> CollectorRegistry:
    """A registry holding every family an adapter with the `source` serves, KEDA's scaler included."""
    metrics = AdapterMetrics(source=source)
    registry = metrics.registry
    at_start = _AtStart()
    KedaMetrics(registry)
    for collector in (
        PodCacheCollector(at_start),
        NodeFeedsCollector(at_start),
        ConnectionsCollector(at_start),
        token_review_collector(at_start),
        trust_reload_collector(at_start),
        ScalerCollector(at_start),
        AdmissionCollector(CallAdmission()),
        FrontCollector(ScalerFront(lambda: 0, PeerDirectory())),
    ):
        registry.register(collector)
    return registry
