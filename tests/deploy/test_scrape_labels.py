"""The shipped ServiceMonitor, applied by a real Prometheus to a real exporter: device series carry the workload's
pod or none, never the exporter pod's own `namespace`/`pod`.

The Prometheus Operator turns a ServiceMonitor endpoint into a scrape job whose relabelling first names the target by
the exporter's pod (`namespace`, `service`, `pod`, `container`, `endpoint`: prometheus-operator pkg/prometheus/
promcfg.go, generateServiceMonitorConfig), then applies the endpoint's own `relabelings`. This test builds that job
for a real exporter (the target labels the Operator would set, then the shipped relabelings) and reads back what a
real Prometheus stored, in both dialects. And the job label: a renamed release's targets (nameOverride,
fullnameOverride) are stored under the job names the shipped rules select.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.catalogue import Dialect
from rules.jobs import DEFAULT_ADAPTER_JOB, DEFAULT_EXPORTER_JOB
from tests.deploy.rendering import find, helm_render, one
from tests.support.exporters import ExporterProcess, start_exporter
from tests.support.processes import ChildProcesses
from tests.support.prometheus import PrometheusServer, start_prometheus, wait_ready
from tests.support.tools import require_tool
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

# what the Operator sets for a target of the exporter's Service (promcfg.go), the exporter pod's own identity
OPERATOR_TARGET = {
    "namespace": "gpu-pulse",
    "service": "gpu-pulse-exporter",
    "pod": "gpu-pulse-exporter-x7k2p",
    "container": "exporter",
    "endpoint": "metrics",
    "__meta_kubernetes_pod_node_name": "shared-node-1",
}
_KEYS = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
Servers = dict[str, PrometheusServer]
POD_SERIES = "gpu_pulse_pod_gpu_utilization_ratio"


def as_relabel_config(relabeling: dict[str, Any]) -> dict[str, Any]:
    """A ServiceMonitor relabeling in prometheus.yml's spelling."""
    return {_KEYS.get(key, key): value for key, value in relabeling.items()}


@pytest.fixture(scope="module")
def scraped(rendered: dict[str, list[dict[str, Any]]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """A Prometheus per dialect with the shipped relabelings, and one without the labeldrop (the referee)."""
    workdir = tmp_path_factory.mktemp("scrape-labels")
    processes = ChildProcesses(workdir)
    monitor = one(rendered["prometheus-operator"], "ServiceMonitor", "gpu-pulse-exporter")
    (endpoint,) = monitor["spec"]["endpoints"]
    shipped = [as_relabel_config(r) for r in endpoint["relabelings"]]
    without_drop = [r for r in shipped if r.get("action") != "labeldrop"]
    assert len(without_drop) < len(shipped), "the shipped relabelings drop the exporter pod's target labels"
    try:
        exporters: dict[Dialect, ExporterProcess] = {
            dialect: start_exporter(processes, f"node-{dialect}", "shared", dialect=dialect) for dialect in Dialect
        }
        jobs = {
            "dcgm": (exporters[Dialect.DCGM], shipped),
            "prometheus": (exporters[Dialect.PROMETHEUS], shipped),
            "prometheus-without-drop": (exporters[Dialect.PROMETHEUS], without_drop),
        }
        servers: Servers = {}
        for name, (exporter, relabelings) in jobs.items():
            config = {
                "global": {"scrape_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "gpu-pulse-exporter",
                        "honor_labels": endpoint["honorLabels"],
                        "static_configs": [{"targets": [exporter.address], "labels": OPERATOR_TARGET}],
                        "relabel_configs": relabelings,
                    }
                ],
            }
            dialect = Dialect.DCGM if name == "dcgm" else Dialect.PROMETHEUS
            binary = require_tool("prometheus")
            servers[name] = start_prometheus(binary, config, workdir, processes, f"prometheus-{name}", dialect)
        for server in servers.values():
            wait_ready(server)
        for name, server in servers.items():
            wait_for(lambda server=server: bool(server.query(POD_SERIES)), f"{name} scraped", 60)  # type: ignore[misc]
        yield servers
    finally:
        processes.stop_all()


def test_prometheus_dialect_device_series_carry_no_pod(scraped: Servers) -> None:
    devices = scraped["prometheus"].query('{__name__=~"nvidia_gpu_.+"}')
    assert devices
    for series in devices:
        assert not {"pod", "namespace", "container"} & series["metric"].keys(), series["metric"]


def test_without_the_labeldrop_the_exporter_pod_would_claim_every_gpu(scraped: Servers) -> None:
    """The referee: the Operator's target labels alone put the exporter's pod on every prometheus-dialect device
    series, which is the defect the shipped relabeling removes."""
    devices = scraped["prometheus-without-drop"].query("nvidia_gpu_memory_used_bytes")
    assert devices and all(s["metric"]["pod"] == OPERATOR_TARGET["pod"] for s in devices)


def test_pod_series_keep_the_workloads_pod(scraped: Servers) -> None:
    for name in ("dcgm", "prometheus"):
        series = scraped[name].query("gpu_pulse_pod_gpu_utilization_ratio")
        pods = {s["metric"]["pod"] for s in series}
        assert pods and OPERATOR_TARGET["pod"] not in pods
        assert all("exported_pod" not in s["metric"] for s in series)


def test_dcgm_dialect_device_series_carry_the_workload_or_nothing(scraped: Servers) -> None:
    server = scraped["dcgm"]
    series = server.query("DCGM_FI_DEV_FB_USED")
    workloads = {s["metric"]["pod"] for s in server.query("gpu_pulse_pod_gpu_utilization_ratio")}
    assert series
    assert {s["metric"].get("pod") for s in series} - {None} <= workloads
    assert all(s["metric"].get("namespace") != OPERATOR_TARGET["namespace"] for s in series)


# -- the job label of renamed releases -----------------------------------------------------------------------------


def _sanitized(label: str) -> str:
    """A Kubernetes label name as Prometheus' service discovery and the Operator write it after their prefix."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def operator_job_relabelings(monitor: dict[str, Any]) -> list[dict[str, Any]]:
    """The job relabelings the Prometheus Operator writes for a ServiceMonitor (prometheus-operator
    pkg/prometheus/promcfg.go, generateServiceMonitorConfig): the Service's name, then, with a jobLabel, the value of
    that Service label where the Service has it (regex `(.+)`)."""
    rules: list[dict[str, Any]] = [
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"}
    ]
    if monitor["spec"].get("jobLabel"):
        source = f"__meta_kubernetes_service_label_{_sanitized(monitor['spec']['jobLabel'])}"
        rules.append({"source_labels": [source], "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
    return rules


def _monitor_jobs(objects: list[dict[str, Any]], variant: str) -> list[dict[str, Any]]:
    """A scrape job per ServiceMonitor of a rendering, as the Operator would write it for the Service it selects: the
    Service's name and labels as discovery gives them, the Operator's job relabelings, then the monitor's own. The
    target is a closed port: a failed scrape still records `up` with the target's labels."""
    jobs = []
    for monitor in find(objects, "ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        (service,) = [s for s in find(objects, "Service") if selector.items() <= s["metadata"]["labels"].items()]
        discovered = {"__meta_kubernetes_service_name": service["metadata"]["name"], "variant": variant}
        discovered |= {f"__meta_kubernetes_service_label_{_sanitized(k)}": v
                       for k, v in service["metadata"]["labels"].items()}  # fmt: skip
        (endpoint,) = monitor["spec"]["endpoints"]
        jobs.append({
            "job_name": f"serviceMonitor/{variant}/{monitor['metadata']['name']}/0",
            "static_configs": [{"targets": ["127.0.0.1:1"], "labels": discovered}],
            "relabel_configs": operator_job_relabelings(monitor)
            + [as_relabel_config(r) for r in endpoint.get("relabelings", [])],
        })  # fmt: skip
    return jobs


def test_renamed_releases_keep_the_job_names_a_real_prometheus_stores(tmp_path: Path) -> None:
    """With fullnameOverride or nameOverride, Prometheus stores the exporters' and the adapter's targets under the
    job names the shipped rules select; the referee, the same monitors without jobLabel, under the renamed Services'
    names."""
    monitors = {"serviceMonitor": {"enabled": True}}
    acme = helm_render({"fullnameOverride": "acme-gpu"} | monitors)
    pulse = helm_render({"nameOverride": "pulse"} | monitors, release="ml")
    referee = json.loads(json.dumps(acme))
    for monitor in find(referee, "ServiceMonitor"):
        del monitor["spec"]["jobLabel"]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "500ms"},
        "scrape_configs": _monitor_jobs(acme, "acme") + _monitor_jobs(pulse, "pulse")
        + _monitor_jobs(referee, "referee"),
    }  # fmt: skip
    processes = ChildProcesses(tmp_path)
    try:
        server = start_prometheus(require_tool("prometheus"), config, tmp_path, processes, "jobs", Dialect.DCGM)
        wait_ready(server)
        wait_for(lambda: len(server.query("up")) == 6, "every target scraped once", 60)
        jobs: dict[str, set[str]] = {}
        for series in server.query("up"):
            jobs.setdefault(series["metric"]["variant"], set()).add(series["metric"]["job"])
    finally:
        processes.stop_all()
    stable = {DEFAULT_EXPORTER_JOB, DEFAULT_ADAPTER_JOB}
    assert jobs == {"acme": stable, "pulse": stable, "referee": {"acme-gpu-exporter", "acme-gpu-adapter"}}
