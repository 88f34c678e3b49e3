"""`gpu-pulse-adapter --demo --prometheus-url URL --config prometheus-adapter.yaml`: the demo serves that file's
metrics from that Prometheus for the demo's pods and namespace, beside the demo's GPU metrics from the direct source,
asked with kubectl as a user would."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from adapter.quantity import parse_quantity
from simulation import load_scenario
from simulation.demo.cluster import demo_pods
from simulation.demo.scenarios import write_scenarios
from tests.adapter.promserver import Prometheus
from tests.adapter.test_demo_run import running_demo, stops_cleanly
from tests.support.kubectl import kubectl_get_raw
from tests.support.tools import require_tool
from tests.support.waiting import patience, wait_for

pytestmark = pytest.mark.timeout(180)

# the walkthrough's rule (kubernetes-sigs/prometheus-adapter docs/walkthrough.md) and docs/externalmetrics.md's
CONFIG = """
rules:
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  resources:
    template: "<<.Resource>>"
  name:
    matches: "^(.*)_total"
    as: ""
  metricsQuery: sum by (<<.GroupBy>>) (irate(<<.Series>>{<<.LabelMatchers>>}[1m]))
externalRules:
- seriesQuery: '{__name__="queue_consumer_lag",name!=""}'
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (name)
  resources:
    overrides: { namespace: {resource: "namespace"} }
"""


class _Application(BaseHTTPRequestHandler):
    """The demo's pods' application series, as their scrape would show them: a request counter per pod."""

    pods: tuple[tuple[str, str], ...] = ()
    started = 0.0

    def do_GET(self) -> None:
        elapsed = time.time() - self.started
        lines = [f'http_requests_total{{namespace="{ns}",pod="{pod}"}} {5 * elapsed:.3f}' for ns, pod in self.pods]
        lines.append(f'queue_consumer_lag{{namespace="{self.pods[0][0]}",name="orders"}} 42')
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None: ...


@pytest.fixture
def scraped_application(tmp_path: Path) -> Iterator[tuple[Prometheus, tuple[tuple[str, str], ...]]]:
    (tmp_path / "scenarios").mkdir()
    scenarios = {node: load_scenario(str(p)) for node, p in write_scenarios(tmp_path / "scenarios", 1).items()}
    pods = tuple((pod.namespace, pod.name) for pod in demo_pods(scenarios))
    handler = type("Handler", (_Application,), {"pods": pods, "started": time.time()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "prometheus").mkdir()
    prometheus = Prometheus(tmp_path / "prometheus")
    try:
        prometheus.set_targets([f"127.0.0.1:{server.server_address[1]}"])
        wait_for(
            lambda: len(prometheus.query("count_over_time(http_requests_total[1m]) >= 3")) == len(pods),
            "prometheus scraped the application three times",
            patience(30),
        )
        yield prometheus, pods
    finally:
        prometheus.stop()
        server.shutdown()


def test_the_demo_serves_a_prometheus_adapter_configuration(
    tmp_path: Path, scraped_application: tuple[Prometheus, tuple[tuple[str, str], ...]]
) -> None:
    require_tool("kubectl")
    prometheus, pods = scraped_application
    config = tmp_path / "prometheus-adapter.yaml"
    config.write_text(CONFIG)
    namespace = pods[0][0]
    with running_demo(tmp_path, f"--prometheus-url={prometheus.url}", f"--config={config}") as demo:
        assert "prometheus-adapter's rules" in demo.output()
        discovery = kubectl_get_raw(demo.kubeconfig, "/apis/custom.metrics.k8s.io/v1beta2")
        assert discovery.code == 0, discovery.stderr
        names = {r["name"] for r in discovery.body["resources"]}
        assert {"pods/http_requests", "namespaces/http_requests", "pods/gpu_utilization"} <= names
        path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/pods/*/http_requests"
        answer = kubectl_get_raw(demo.kubeconfig, path)
        assert answer.code == 0, answer.stderr
        served = {i["describedObject"]["name"]: parse_quantity(i["value"]) for i in answer.body["items"]}
        assert set(served) == {pod for ns, pod in pods if ns == namespace}
        assert all(Decimal(4) <= value <= Decimal(6) for value in served.values()), served  # 5 requests a second
        gpu = kubectl_get_raw(demo.kubeconfig, path.replace("http_requests", "gpu_utilization"))
        assert gpu.code == 0 and gpu.body["items"], gpu.stderr
        lag = kubectl_get_raw(
            demo.kubeconfig, f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/queue_consumer_lag"
        )
        assert lag.code == 0, lag.stderr
        assert [(i["metricLabels"], i["value"]) for i in lag.body["items"]] == [({"name": "orders"}, "42")]
        stops_cleanly(demo, signal.SIGTERM)
