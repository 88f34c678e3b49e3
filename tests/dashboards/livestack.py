"""A live monitoring stack on loopback: simulated exporters (the real exporter on the NVML simulator, both dialects),
a simulated kube-state-metrics and kube-apiserver /metrics (external services), a stand-in for the exporter's serving
engine series (the simulated nodes run no engine), and one real `prometheus` per dialect with the shipped recording
rules loaded, scraping every second.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from exporter.catalogue import Dialect
from tests.support.exporters import start_exporter
from tests.support.loopback import http_get
from tests.support.processes import ChildProcesses
from tests.support.prometheus import PrometheusServer, rule_file_evaluated_every_time, start_prometheus, wait_ready
from tests.support.waiting import patience, wait_for

CLUSTER = "sim"
EXPORTER_JOB = "gpu-pulse-exporter"

# (dialect, scenario, node name): the prometheus-dialect stack covers whole GPUs, MIG on Ampere, shared GPUs and
# faults (XIDs); the dcgm-dialect stack covers MIG on Hopper (GPM per instance), shared GPUs (pod labels) and faults
# (its XID counter); both have a Volta node, the only generation that retires pages.
EXPORTERS = (
    (Dialect.PROMETHEUS, "h100x8", "gpu-h100"),
    (Dialect.PROMETHEUS, "a100-mig", "gpu-a100-mig"),
    (Dialect.PROMETHEUS, "shared", "gpu-shared"),
    (Dialect.PROMETHEUS, "faulty", "gpu-faulty"),
    (Dialect.PROMETHEUS, "v100x8", "gpu-v100"),
    (Dialect.DCGM, "h100-mig", "gpu-h100-mig"),
    (Dialect.DCGM, "shared", "gpu-shared"),
    (Dialect.DCGM, "faulty", "gpu-faulty"),
    (Dialect.DCGM, "v100x8", "gpu-v100"),
)


@dataclass
class SimulatedKube:
    """kube-state-metrics and kube-apiserver /metrics for the pods the exporters' simulated kubelets report.

    Pods are read from each exporter's /pods at scrape time, as kube-state-metrics follows the API. The first pod of
    a namespace belongs to a Deployment (through a ReplicaSet) scaled by an HPA on gpu_utilization, the second to a
    StatefulSet, the rest have no owner.
    """

    exporters: list[str]
    server: ThreadingHTTPServer | None = None

    def pods(self) -> list[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        for url in self.exporters:
            try:
                document = json.loads(http_get(f"{url}/pods"))
            except (OSError, ValueError):
                continue
            found |= {(p["namespace"], p["name"]) for p in document.get("pods", [])}
        return sorted(found)

    def kube_state_metrics(self) -> str:
        lines: list[str] = []
        by_namespace: dict[str, list[str]] = {}
        for namespace, pod in self.pods():
            by_namespace.setdefault(namespace, []).append(pod)
        for namespace, pods in by_namespace.items():
            for i, pod in enumerate(pods):
                base = pod.rsplit("-", 1)[0] or pod
                if i == 0:
                    rs = f"{base}-5d8f7c"
                    lines.append(_owner(namespace, pod, "ReplicaSet", rs, "true"))
                    lines.append(
                        f'kube_replicaset_owner{{namespace="{namespace}",replicaset="{rs}",owner_kind="Deployment",'
                        f'owner_name="{base}",owner_is_controller="true"}} 1'
                    )
                    hpa = f'namespace="{namespace}",horizontalpodautoscaler="{base}"'
                    lines += [
                        f'kube_horizontalpodautoscaler_info{{{hpa},scaletargetref_api_version="apps/v1",'
                        f'scaletargetref_kind="Deployment",scaletargetref_name="{base}"}} 1',
                        f"kube_horizontalpodautoscaler_spec_min_replicas{{{hpa}}} 1",
                        f"kube_horizontalpodautoscaler_spec_max_replicas{{{hpa}}} 8",
                        f"kube_horizontalpodautoscaler_status_current_replicas{{{hpa}}} 1",
                        f"kube_horizontalpodautoscaler_status_desired_replicas{{{hpa}}} 2",
                        f'kube_horizontalpodautoscaler_spec_target_metric{{{hpa},metric_name="gpu_utilization",'
                        f'metric_target_type="average"}} 60',
                    ]
                elif i == 1:
                    lines.append(_owner(namespace, pod, "StatefulSet", base, "true"))
                else:
                    lines.append(_owner(namespace, pod, "<none>", "<none>", "<none>"))
        return "\n".join(lines) + "\n"

    def engines(self) -> str:
        """The exporter's `gpu_pulse_pod_inference_*` series (issue 37's contract: the per-pod series' labels plus
        `engine` and `model`) for the first pod of each namespace, as if a vLLM engine served in it: the simulated
        nodes run no engine, so this stands in for what an exporter reading one publishes."""
        lines: list[str] = []
        seen: set[str] = set()
        for url in self.exporters:
            try:
                document = json.loads(http_get(f"{url}/pods"))
            except (OSError, ValueError):
                continue
            for pod in sorted(document.get("pods", []), key=lambda p: (p["namespace"], p["name"])):
                if pod["namespace"] in seen:
                    continue
                seen.add(pod["namespace"])
                labels = (
                    f'node="{document["node"]}",namespace="{pod["namespace"]}",pod="{pod["name"]}",'
                    'engine="vllm",model="example-model"'
                )
                lines += [
                    f"gpu_pulse_pod_inference_queued_requests{{{labels}}} 3",
                    f"gpu_pulse_pod_inference_running_requests{{{labels}}} 12",
                    f"gpu_pulse_pod_inference_kv_cache_utilization_ratio{{{labels}}} 0.62",
                    f'gpu_pulse_pod_inference_engine_state{{{labels},state="ready"}} 1',
                    # the exporter's own total of the engine's counter: 40 tokens a second, never falling
                    f"gpu_pulse_pod_inference_generated_tokens_total{{{labels}}} {int(time.time() * 40)}",
                ]
                for quantile, ttft, itl in (("0.5", 0.08, 0.012), ("0.9", 0.3, 0.025), ("0.99", 1.2, 0.09)):
                    lines.append(
                        f'gpu_pulse_pod_inference_time_to_first_token_seconds{{{labels},quantile="{quantile}"}} {ttft}'
                    )
                    lines.append(
                        f'gpu_pulse_pod_inference_inter_token_latency_seconds{{{labels},quantile="{quantile}"}} {itl}'
                    )
        return "\n".join(lines) + "\n"

    @staticmethod
    def apiserver() -> str:
        names = ("v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io")
        return "".join(f'aggregator_unavailable_apiservice{{name="{n}"}} 0\n' for n in names)

    def start(self) -> int:
        kube = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                paths = {"/ksm": kube.kube_state_metrics, "/apiserver": kube.apiserver, "/engines": kube.engines}
                body = paths.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                data = body().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        port: int = self.server.server_address[1]
        return port

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _owner(namespace: str, pod: str, kind: str, name: str, controller: str) -> str:
    return (
        f'kube_pod_owner{{namespace="{namespace}",pod="{pod}",uid="uid-{pod}",owner_kind="{kind}",'
        f'owner_name="{name}",owner_is_controller="{controller}"}} 1'
    )


@dataclass
class LiveStack:
    prometheus: dict[Dialect, PrometheusServer]
    exporters: dict[tuple[Dialect, str], str]  # (dialect, node) -> base URL


def _scrape_config(dialect: Dialect, exporters: list[tuple[str, str]], kube_port: int, rules: Path) -> dict[str, Any]:
    def job(name: str, targets: list[tuple[str, dict[str, str]]], path: str = "/metrics") -> dict[str, Any]:
        return {
            "job_name": name,
            "honor_labels": True,
            "scrape_interval": "1s",
            "metrics_path": path,
            "static_configs": [
                {"targets": [address], "labels": {"cluster": CLUSTER, **labels}} for address, labels in targets
            ],
        }

    scrape = [job(EXPORTER_JOB, [(address, {"node": node}) for node, address in exporters])]
    scrape.append(job("kube-state-metrics", [(f"127.0.0.1:{kube_port}", {})], "/ksm"))
    scrape.append(job("apiserver", [(f"127.0.0.1:{kube_port}", {})], "/apiserver"))
    scrape.append(job("engine-figures-stand-in", [(f"127.0.0.1:{kube_port}", {})], "/engines"))
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": scrape,
    }


def _serving(url: str) -> Callable[[], bool]:
    return lambda: b"gpu_pulse_snapshot_timestamp_seconds" in http_get(f"{url}/metrics")


def _scraped(server: PrometheusServer, expected: int) -> Callable[[], bool]:
    return lambda: len(server.query(f'up{{job="{EXPORTER_JOB}"}} == 1')) == expected


def _evaluated_after_scrapes(server: PrometheusServer, expected: int, scrapes: int) -> Callable[[], bool]:
    """Every exporter scraped `scrapes` times, and every rule group evaluated since: enough samples for the rate
    windows ($__rate_interval = 10s) and recorded series built from them."""

    def ready() -> bool:
        counts = server.query(f'count_over_time(up{{job="{EXPORTER_JOB}"}}[5m]) >= {scrapes}')
        if len(counts) != expected:
            return False
        return all(not group["lastEvaluation"].startswith("0001-") for group in server.rule_groups())

    return ready


@contextmanager
def running_stack(prometheus_binary: str, workdir: Path) -> Iterator[LiveStack]:
    """Start the stack, yield it once every exporter is scraped and the rules have run, then stop everything."""
    processes = ChildProcesses(workdir)
    kube: SimulatedKube | None = None
    try:
        exporters = {
            # every field: the node board charts each one (the default set's reach is held by test_field_sets)
            (dialect, node): start_exporter(
                processes, node, scenario, dialect=dialect, process_name=f"exporter-{dialect}-{node}", field_set="all"
            )
            for dialect, scenario, node in EXPORTERS
        }
        exporter_urls = {key: exporter.url for key, exporter in exporters.items()}
        kube = SimulatedKube(list(exporter_urls.values()))
        kube_port = kube.start()
        for url in exporter_urls.values():
            wait_for(_serving(url), f"exporter {url}", patience(30))
        servers: dict[Dialect, PrometheusServer] = {}
        for dialect in Dialect:
            targets = [(node, url.removeprefix("http://")) for (d, node), url in exporter_urls.items() if d is dialect]
            rules = rule_file_evaluated_every_time(dialect, workdir)
            config = _scrape_config(dialect, targets, kube_port, rules)
            servers[dialect] = start_prometheus(
                prometheus_binary, config, workdir, processes, f"prometheus-{dialect}", dialect
            )
        for server in servers.values():
            wait_ready(server)
            expected = sum(1 for d, _, _ in EXPORTERS if d is server.dialect)
            wait_for(_scraped(server, expected), f"{server.dialect} exporters scraped", patience(20))
        for server in servers.values():
            # rate windows ($__rate_interval = 10s) and the rule groups need a few scrapes and evaluations
            ready = _evaluated_after_scrapes(server, sum(1 for d, _, _ in EXPORTERS if d is server.dialect), 9)
            wait_for(ready, f"{server.dialect} exporters scraped 9 times, rules evaluated", patience(30))
            server.names = set(server.label_values("__name__"))
        yield LiveStack(servers, exporter_urls)
    finally:
        processes.stop_all()
        if kube is not None:
            kube.stop()
