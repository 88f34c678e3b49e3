"""Everything the end-to-end test runs, started once, all on loopback, each process on port 0 with its address read
back from its log (tests/support/loopback.py):

- five exporter processes on simulated GPUs (cluster.py), prometheus dialect but the DRA node's (dcgm), 1 s interval,
  one of them (e2e-mig) on a clock a minute ahead;
- the Kubernetes API test server (on a thread) with the pods of all three nodes and their owners;
- a real `prometheus` scraping the exporters, both adapters and the control-plane stand-ins every second, with the
  shipped rules of the prometheus dialect, evaluated every second (the adapters' addresses in a file_sd file, written
  once both serve: the prometheus source's adapter needs Prometheus' address first);
- the real adapter twice, over TLS with client-certificate authentication and SubjectAccessReview authorization:
  `--source direct` (exporters by `--exporter-endpoints`) and `--source prometheus`;
- a kubeconfig per adapter for kubectl, as the HPA's service account.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from exporter.catalogue import Dialect
from simulation.kubeapi import KubeApiServer
from simulation.scenario import Scenario
from tests.e2e.cluster import (
    CHAT,
    CLOCK_OFFSETS,
    DIALECTS,
    EMBED,
    LLM_SERVE,
    load_scenarios,
    populate,
    write_scenarios,
)
from tests.support.adapters import (
    HPA_USER,
    METRICS_POLICY,
    AdapterProcess,
    ClientIdentity,
    ClusterTrust,
    adapter_ready,
    start_adapter,
)
from tests.support.exporters import ExporterProcess, serving, start_exporter
from tests.support.kubeapi import kube_api_on_a_thread
from tests.support.kubestate import ControlPlaneMetrics, DeclaredHpa
from tests.support.processes import ChildProcesses
from tests.support.prometheus import PrometheusServer, rule_file_evaluated_every_time, start_prometheus, wait_ready
from tests.support.waiting import patience, wait_for

INTERVAL = 1.0  # exporter poll interval, prometheus scrape and rule evaluation interval (seconds)
DIRECT_MAX_AGE = 3 * INTERVAL + 2  # the adapter's default for the direct source, given explicitly
PROMETHEUS_MAX_AGE = 10.0
CLUSTER = "e2e"
TARGET_UTILIZATION = 60
KEDA_HYSTERESIS = ("--keda-deactivate-after=3", "--keda-activity-interval=0.5")
HPAS = tuple(
    DeclaredHpa(w.namespace, w.name, w.name, target_average=TARGET_UTILIZATION) for w in (LLM_SERVE, CHAT, EMBED)
)


@dataclass
class E2EStack:
    workdir: Path
    processes: ChildProcesses
    scenarios: dict[str, Scenario]
    exporters: dict[str, ExporterProcess]
    kube: KubeApiServer
    prometheus: PrometheusServer
    direct: AdapterProcess
    via_prometheus: AdapterProcess
    hpa: ClientIdentity
    kubeconfigs: dict[str, Path]  # adapter name -> kubeconfig of the HPA's identity
    began: float  # wall clock when the first process was started
    timings: dict[str, float] = field(default_factory=dict)
    keda: str = ""  # host:port of the direct adapter's KEDA external scaler (TLS, client certificates of the CA)

    @property
    def adapters(self) -> tuple[AdapterProcess, AdapterProcess]:
        return self.direct, self.via_prometheus

    def wall_time_of(self, node: str, scenario_seconds: float) -> float:
        """The latest wall-clock time at which the node's scenario can reach `scenario_seconds` (its exporter
        started the simulator after being launched, and before serving)."""
        return self.exporters[node].launched_at + self.timings[f"serving:{node}"] + scenario_seconds


def _target_groups(targets: list[tuple[str, dict[str, str]]]) -> list[dict[str, Any]]:
    return [{"targets": [address], "labels": {"cluster": CLUSTER, **labels}} for address, labels in targets]


def _scrape_config(
    exporters: dict[str, ExporterProcess], adapters_file: Path, control_plane: str, ca_file: Path, rules: Path
) -> dict[str, Any]:
    def job(name: str, targets: list[tuple[str, dict[str, str]]], **extra: Any) -> dict[str, Any]:
        return {"job_name": name, "honor_labels": True, "static_configs": _target_groups(targets), **extra}

    interval = f"{INTERVAL:g}s"
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "rule_files": [str(rules)],
        "scrape_configs": [
            job("gpu-pulse-exporter", [(e.address, {"node": node}) for node, e in exporters.items()]),
            {
                "job_name": "gpu-pulse-adapter",
                "honor_labels": True,
                "file_sd_configs": [{"files": [str(adapters_file)], "refresh_interval": interval}],
                "scheme": "https",
                "tls_config": {"ca_file": str(ca_file)},
            },
            job("kube-state-metrics", [(control_plane, {})], metrics_path="/ksm"),
            job("apiserver", [(control_plane, {})], metrics_path="/apiserver"),
        ],
    }


def _all_targets_up(prometheus: PrometheusServer, expected: int) -> bool:
    return len(prometheus.query("up == 1")) == expected


@contextmanager
def running_e2e_stack(prometheus_binary: str, workdir: Path) -> Iterator[E2EStack]:
    began = time.time()
    timings: dict[str, float] = {}
    processes = ChildProcesses(workdir)
    with ExitStack() as cleanup:
        cleanup.callback(processes.stop_all)
        scenarios = load_scenarios(write_scenarios(workdir / "scenarios"))
        paths = {node: workdir / "scenarios" / f"{node}.yaml" for node in scenarios}
        exporters = {
            node: start_exporter(
                processes,
                node,
                paths[node],
                interval=INTERVAL,
                dialect=DIALECTS.get(node, Dialect.PROMETHEUS),
                clock_offset=CLOCK_OFFSETS.get(node, 0.0),
            )
            for node in scenarios
        }
        kube = cleanup.enter_context(kube_api_on_a_thread(bookmark_interval=0.5))
        kube.set_authorization(METRICS_POLICY)
        populate(kube, scenarios)
        trust = ClusterTrust.create(workdir / "trust")
        hpa = trust.client(HPA_USER)
        for node, exporter in exporters.items():
            count = len(scenarios[node].pods)
            wait_for(partial(serving, processes, exporter, count), f"exporter {node} serving its pods", patience(60))
            timings[f"serving:{node}"] = time.time() - exporter.launched_at
        # KEDA's external scaler on the direct adapter (tests/e2e/test_keda.py)
        keda_args = ["--keda-listen=127.0.0.1:0", "--keda-tls", f"--keda-client-ca-file={trust.ca_file}",
                     *KEDA_HYSTERESIS]  # fmt: skip
        endpoints = ",".join(f"{node}={e.url}" for node, e in exporters.items())
        direct = start_adapter(
            processes, "adapter-direct", trust, kube.url, max_age=DIRECT_MAX_AGE,
            args=["--source=direct", f"--exporter-endpoints={endpoints}", *keda_args],
        )  # fmt: skip
        control_plane = ControlPlaneMetrics(kube.url, HPAS, api_service_available=direct.ready)
        cleanup.callback(control_plane.stop)
        control_plane_address = control_plane.start()
        rules = rule_file_evaluated_every_time(Dialect.PROMETHEUS, workdir)  # the 5-minute waste group too
        adapters_file = workdir / "adapter-targets.json"
        adapters_file.write_text("[]", encoding="utf-8")
        config = _scrape_config(exporters, adapters_file, control_plane_address, trust.ca_file, rules)
        prometheus = start_prometheus(prometheus_binary, config, workdir, processes, "prometheus", Dialect.PROMETHEUS)
        via_prometheus = start_adapter(
            processes, "adapter-prometheus", trust, kube.url, max_age=PROMETHEUS_MAX_AGE,
            args=["--source=prometheus", f"--prometheus-url={prometheus.url}"],
        )  # fmt: skip
        adapters = [(a.url.removeprefix("https://"), {"source": a.name}) for a in (direct, via_prometheus)]
        staged = adapters_file.with_suffix(".tmp")  # replaced whole: Prometheus never reads half a file
        staged.write_text(json.dumps(_target_groups(adapters)), encoding="utf-8")
        staged.replace(adapters_file)
        wait_ready(prometheus)
        for adapter in (direct, via_prometheus):
            wait_for(partial(adapter_ready, processes, adapter), f"adapter {adapter.name} ready", patience(60))
        expected_targets = len(exporters) + len(adapters) + 2
        wait_for(
            lambda: _all_targets_up(prometheus, expected_targets), "prometheus scraping every target", patience(30)
        )
        timings["stack ready"] = time.time() - began
        kubeconfigs = {a.name: trust.kubeconfig(hpa, a.url, f"hpa-{a.name}") for a in (direct, via_prometheus)}
        yield E2EStack(
            workdir, processes, scenarios, exporters, kube, prometheus, direct, via_prometheus, hpa, kubeconfigs,
            began, timings, direct.keda_address,
        )  # fmt: skip
        for adapter in (direct, via_prometheus):  # a clean stop on SIGTERM, after everything the tests did
            code = processes.stop(adapter.name)
            assert code == 0, f"{adapter.name} exited with {code} on SIGTERM:\n{processes.log_tail(adapter.name)}"
