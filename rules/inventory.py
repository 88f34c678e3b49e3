"""The series gpu-pulse and its neighbours publish: what rules and dashboards may read.

Exporter names come from the catalogue; adapter names from the collectors the adapter's parts register; the rest are the
few external series (Prometheus, kube-state-metrics, kube-apiserver, a team's own SLO series) the rules and dashboards
build on.
"""

from __future__ import annotations

from prometheus_client.core import Metric

from adapter.self_metric_families import self_metric_families
from exporter import catalogue
from exporter.catalogue import Dialect
from rules.inference_alerts import TTFT_SLO_OVERRIDE
from rules.names import POD_INFERENCE_SERIES

EXTERNAL_NAMES = frozenset(
    {
        "up",  # Prometheus, per scrape target
        "ALERTS",  # Prometheus, firing and pending alerts
        "kube_pod_owner",  # kube-state-metrics
        "kube_replicaset_owner",
        "kube_horizontalpodautoscaler_info",
        "kube_horizontalpodautoscaler_spec_min_replicas",
        "kube_horizontalpodautoscaler_spec_max_replicas",
        "kube_horizontalpodautoscaler_spec_target_metric",
        "kube_horizontalpodautoscaler_status_current_replicas",
        "kube_horizontalpodautoscaler_status_desired_replicas",
        "kube_node_labels",  # kube-state-metrics, with the node labels its --metric-labels-allowlist names
        "aggregator_unavailable_apiservice",  # kube-apiserver (kube-aggregator)
        TTFT_SLO_OVERRIDE,  # a workload's own SLO, a rule the team writes (rules/inference_alerts.py)
    }
)

_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "summary": ("_count", "_sum")}


def exporter_names(dialect: Dialect) -> frozenset[str]:
    """Every series name the exporter can publish in `dialect`, according to the catalogue."""
    renderings = (m.rendering(dialect) for m in catalogue.MEASUREMENTS)
    names = {r.name for r in renderings if r is not None}
    names.add(catalogue.DCGM_UP if dialect is Dialect.DCGM else catalogue.PROM_UP)
    if dialect is Dialect.PROMETHEUS:
        names.add(catalogue.PROM_INFO)
    names |= {
        catalogue.POD_UTILIZATION,
        catalogue.POD_MEMORY_USED,
        catalogue.POD_POWER,
        catalogue.POD_ENERGY,
        catalogue.POD_DEVICE_INFO,
        catalogue.POD_SHARING,
        catalogue.SELF_BUILD_INFO,
        catalogue.SELF_COLLECTOR_SUCCESS,
        catalogue.SELF_COLLECTOR_DURATION,
        catalogue.SELF_COLLECTOR_ERRORS,
        catalogue.SELF_SNAPSHOT_TIMESTAMP,
        catalogue.SELF_POLL_INTERVAL,
        catalogue.SELF_NVML_ERRORS,
        catalogue.SELF_KUBELET_UP,
        catalogue.SELF_KUBELET_MAPPING_AGE,
        catalogue.SELF_CONNECTIONS,
        catalogue.SELF_CONNECTIONS_MAX,
        catalogue.SELF_CONNECTIONS_ACCEPTED,
        catalogue.SELF_CONNECTIONS_CLOSED,
        *POD_INFERENCE_SERIES,
    }
    return frozenset(names)


def _sample_names(family: Metric) -> set[str]:
    suffixes = _SUFFIXES.get(family.type)
    if suffixes is None:
        return {family.name}
    base = family.name.removesuffix("_total")
    return {base + s for s in suffixes}


def adapter_names() -> frozenset[str]:
    """Sample names of the adapter's self-metrics, every part's (adapter/self_metric_families.py)."""
    names: set[str] = set()
    for family in self_metric_families().collect():
        names |= _sample_names(family)
    return frozenset(names)


def readable_names(dialect: Dialect) -> frozenset[str]:
    """What a rule or dashboard over exporters of `dialect` may read (besides recorded series)."""
    return exporter_names(dialect) | adapter_names() | EXTERNAL_NAMES
