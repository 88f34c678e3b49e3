"""Stand-ins for two external services Prometheus scrapes beside gpu-pulse: kube-state-metrics and the
kube-apiserver's own /metrics (kube-aggregator's APIService availability).

kube-state-metrics' series are rendered from the Kubernetes API test server at scrape time, as the real one follows
the API: `kube_pod_owner` from each pod's controller reference, `kube_replicaset_owner` from each ReplicaSet's, and
the HorizontalPodAutoscaler series from HPAs the test declares (the API test server has no HPA objects), with the
current replica count of their Deployment's running pods. No HPA controller runs here: the reported desired count
is the current one. The aggregator's `aggregator_unavailable_apiservice` says whether a probe of the adapter works.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.loopback import http_get

METRICS_API_SERVICES = (
    "v1beta1.custom.metrics.k8s.io",
    "v1beta2.custom.metrics.k8s.io",
    "v1beta1.external.metrics.k8s.io",
)


@dataclass(frozen=True)
class DeclaredHpa:
    namespace: str
    name: str
    deployment: str
    metric: str = "gpu_utilization"
    target_average: float = 60.0
    min_replicas: int = 1
    max_replicas: int = 8


def _labels(**labels: str) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def _controller(obj: dict[str, Any]) -> dict[str, Any] | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), None)


@dataclass
class ControlPlaneMetrics:
    """Serves `/ksm` (kube-state-metrics) and `/apiserver` (kube-apiserver) on a loopback port."""

    kube_api_url: str
    hpas: Iterable[DeclaredHpa] = ()
    api_service_available: Callable[[], bool] = lambda: True
    server: ThreadingHTTPServer | None = field(default=None, init=False)

    def _items(self, path: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(http_get(f"{self.kube_api_url}{path}", timeout=5))["items"]
        return items

    def kube_state_metrics(self) -> str:
        pods = self._items("/api/v1/pods")
        replica_sets = self._items("/apis/apps/v1/replicasets")
        lines = ["# TYPE kube_pod_owner gauge"]
        for pod in pods:
            meta = pod["metadata"]
            owner = _controller(pod)
            kind, name, controller = (owner["kind"], owner["name"], "true") if owner else ("<none>", "<none>", "<none>")
            labels = _labels(
                namespace=meta["namespace"], pod=meta["name"], uid=meta["uid"], owner_kind=kind, owner_name=name,
                owner_is_controller=controller,
            )  # fmt: skip
            lines.append(f"kube_pod_owner{{{labels}}} 1")
        lines.append("# TYPE kube_replicaset_owner gauge")
        deployment_of: dict[tuple[str, str], str] = {}
        for replica_set in replica_sets:
            meta = replica_set["metadata"]
            owner = _controller(replica_set)
            if owner is None:
                continue
            if owner["kind"] == "Deployment":
                deployment_of[(meta["namespace"], meta["name"])] = owner["name"]
            labels = _labels(
                namespace=meta["namespace"], replicaset=meta["name"], owner_kind=owner["kind"],
                owner_name=owner["name"], owner_is_controller="true",
            )  # fmt: skip
            lines.append(f"kube_replicaset_owner{{{labels}}} 1")
        running: dict[tuple[str, str], int] = {}
        for pod in pods:
            owner = _controller(pod)
            if owner is None or owner["kind"] != "ReplicaSet" or pod["status"].get("phase") != "Running":
                continue
            namespace = pod["metadata"]["namespace"]
            deployment = deployment_of.get((namespace, owner["name"]))
            if deployment is not None:
                running[(namespace, deployment)] = running.get((namespace, deployment), 0) + 1
        for hpa in self.hpas:
            key = _labels(namespace=hpa.namespace, horizontalpodautoscaler=hpa.name)
            replicas = running.get((hpa.namespace, hpa.deployment), 0)
            lines += [
                f'kube_horizontalpodautoscaler_info{{{key},scaletargetref_api_version="apps/v1",'
                f'scaletargetref_kind="Deployment",scaletargetref_name="{hpa.deployment}"}} 1',
                f"kube_horizontalpodautoscaler_spec_min_replicas{{{key}}} {hpa.min_replicas}",
                f"kube_horizontalpodautoscaler_spec_max_replicas{{{key}}} {hpa.max_replicas}",
                f'kube_horizontalpodautoscaler_spec_target_metric{{{key},metric_name="{hpa.metric}",'
                f'metric_target_type="average"}} {hpa.target_average:g}',
                f"kube_horizontalpodautoscaler_status_current_replicas{{{key}}} {replicas}",
                f"kube_horizontalpodautoscaler_status_desired_replicas{{{key}}} {replicas}",
            ]
        return "\n".join(lines) + "\n"

    def apiserver(self) -> str:
        unavailable = 0 if self.api_service_available() else 1
        return "".join(f'aggregator_unavailable_apiservice{{name="{n}"}} {unavailable}\n' for n in METRICS_API_SERVICES)

    def start(self) -> str:
        """Serve on a free loopback port; returns host:port."""
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                render = {"/ksm": stand_in.kube_state_metrics, "/apiserver": stand_in.apiserver}.get(self.path)
                if render is None:
                    self.send_error(404)
                    return
                try:
                    data = render().encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError as exc:  # the API server went away, or the scraper gave up: a failed scrape
                    with contextlib.suppress(OSError):
                        self.send_error(503, str(exc))

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, name="control-plane-metrics", daemon=True).start()
        return f"127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
