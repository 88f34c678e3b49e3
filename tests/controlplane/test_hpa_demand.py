"""Kubernetes' own HPA controller waking a Deployment from zero replicas on the requests waiting at its inference
gateway, read by gpu-pulse alone (issue 38: "Kubernetes 1.37's HPA scale to zero, External metrics from gpu-pulse
only"): the adapter reads the gateway's flow-control queue (simulation/gateway.py, the endpoint picker's gauge) as
`inference_pending_requests` and serves it through the real aggregator; an HPA with `minReplicas: 0` on it takes the
Deployment to zero while nothing waits, up when requests wait with no pod to serve them, and back to zero once the
pods have served them. The replica counts are the HPA's own status, as in test_hpa.py.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from simulation.gateway import SimulatedGateway
from tests.controlplane.stack import Cluster, running_cluster
from tests.controlplane.test_hpa import _wait_settled
from tests.controlplane.workloads import (
    external_metric_hpa,
    gpu_deployment,
    namespace_with_default_account,
    running_pods,
)
from tests.support.waiting import patience, wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(3600)]

NAMESPACE, APP = "serving", "llm"
POOL, MODEL = APP, "meta-llama/Llama-3.1-8B-Instruct"  # the InferencePool selects the Deployment's pods
DEMAND = "inference_pending_requests"
PER_REPLICA = 1  # requests waiting per replica the HPA aims at


class GatewayThread:
    """The simulated gateway on an event loop of its own thread, driven from the test's thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="gateway", daemon=True)
        self.thread.start()
        self.gateway = SimulatedGateway({POOL: MODEL}, ttl=3600)
        self.url = self._run(self.gateway.start()).result(30)
        self.held: list[Future[bool]] = []

    def _run(self, coroutine: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def hold(self, count: int) -> None:
        self.held += [self._run(self.gateway.hold(POOL)) for _ in range(count)]

    def waiting(self) -> int:
        return int(self._run(_call(self.gateway.waiting, POOL)).result(10))

    def set_ready_endpoints(self, count: int) -> None:
        self._run(_call(self.gateway.set_ready_endpoints, POOL, count)).result(10)

    def stop(self) -> None:
        for future in self.held:
            future.cancel()
        self._run(self.gateway.stop()).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


async def _call(function: Any, *args: Any) -> Any:
    return function(*args)


def metrics_config(directory: Path, gateway_url: str) -> Path:
    """The shipped metrics and one demand entry reading the gateway, as docs/hpa.md writes it."""
    defaults = resources.files("adapter").joinpath("defaults.yaml").read_text(encoding="utf-8")
    entry = {
        "name": DEMAND,
        "description": f"requests waiting at the gateway for the {POOL} pool",
        "namespace": NAMESPACE,
        "url": f"{gateway_url}/metrics",
        "preset": "gateway-api-inference-extension",
        "matchers": {"inference_pool": POOL},
    }
    path = directory / "metrics.yaml"
    path.write_text(defaults.rstrip() + "\n\n" + yaml.safe_dump({"demand": [entry]}, sort_keys=False), "utf-8")
    return path


@pytest.fixture(scope="module")
def gateway() -> Iterator[GatewayThread]:
    running = GatewayThread()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def cluster(gateway: GatewayThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("controlplane-demand")
    config = metrics_config(workdir, gateway.url)
    with running_cluster(workdir, adapter_args=(f"--config={config}",)) as running:
        yield running


def test_requests_waiting_at_the_gateway_wake_a_deployment_from_zero_and_back(
    cluster: Cluster, gateway: GatewayThread
) -> None:
    core, apps = k8s.CoreV1Api(cluster.api), k8s.AppsV1Api(cluster.api)
    namespace_with_default_account(core, NAMESPACE)
    apps.create_namespaced_deployment(NAMESPACE, gpu_deployment(APP, 1))
    k8s.AutoscalingV2Api(cluster.api).create_namespaced_horizontal_pod_autoscaler(
        NAMESPACE,
        external_metric_hpa(
            APP, DEMAND, {"inference_pool": POOL}, str(PER_REPLICA), min_replicas=0, max_replicas=3
        ),
    )  # fmt: skip

    # nothing waits: the HPA takes the Deployment to zero
    zero = _wait_settled(cluster, NAMESPACE, APP, 0)
    assert zero.condition("ScalingActive") == "True", zero.describe()

    # two requests wait, with no pod to serve them: the HPA wakes it, one replica per waiting request
    gateway.hold(2)
    wait_for(lambda: gateway.waiting() == 2, "two requests held at the gateway", patience(10))
    up = _wait_settled(cluster, NAMESPACE, APP, math.ceil(2 / PER_REPLICA))
    assert up.condition("ScalingActive") == "True", up.describe()

    # the pods are ready behind the pool: the gateway dispatches what it held, and the queue empties
    gateway.set_ready_endpoints(len(running_pods(core, NAMESPACE, APP)))
    wait_for(lambda: all(f.done() for f in gateway.held), "the held requests dispatched", patience(10))
    assert all(f.result() for f in gateway.held)
    gateway.set_ready_endpoints(0)  # and the pool forgets them as the HPA takes them away
    back = _wait_settled(cluster, NAMESPACE, APP, 0)
    assert back.condition("AbleToScale") == "True", back.describe()
