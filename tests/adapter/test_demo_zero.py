"""`gpu-pulse-adapter --demo --demo-scale-to-zero --keda-listen ...`: llm-inference has no pod, requests wait at the
demo's simulated gateway, and the wake-up is seen as KEDA sees it (its own externalscaler.proto, through a client that
owes nothing to the adapter's stubs) and as an HPA's External metric through kubectl."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from adapter.quantity import parse_quantity
from tests.adapter.test_demo_run import running_demo, stops_cleanly
from tests.support import keda
from tests.support.kubectl import kubectl_get_raw, run_kubectl
from tests.support.tools import require_tool
from tests.support.waiting import patience, wait_for

pytestmark = pytest.mark.timeout(180)

GATEWAY_LINE = re.compile(r"a simulated inference gateway \(EPP\) fronts its pool on (http://\S+)")
KEDA_LINE = re.compile(r"KEDA external scaler \(gRPC externalscaler\.ExternalScaler\) on (\S+), plaintext")
PENDING = re.compile(
    r"kubectl --kubeconfig \S+ get --raw '(/apis/external\.metrics\.k8s\.io/\S+/inference_pending_requests\S+)'"
)
TRIGGER = {"metric": "inference_pending_requests", "selector": "inference_pool=llm-inference", "target": "4"}
QUEUE = re.compile(r'^inference_extension_flow_control_queue_size\{.*inference_pool="llm-inference".*\} (\S+)$', re.M)


def waiting_at(gateway: str) -> int:
    """Requests the gateway holds for the pool, as its /metrics says (no line yet: none)."""
    with urllib.request.urlopen(f"{gateway}/metrics", timeout=5) as response:
        return sum(int(float(v)) for v in QUEUE.findall(response.read().decode()))


def send_request(gateway: str) -> threading.Thread:
    """A completion request to the gateway, held there (no endpoint is ready) until the demo stops."""
    body = json.dumps({"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": "Hello"}).encode()

    def post() -> None:
        request = urllib.request.Request(
            f"{gateway}/v1/completions", body, {"Content-Type": "application/json"}, method="POST"
        )
        try:
            urllib.request.urlopen(request, timeout=170).close()
        except OSError:
            pass  # the demo stopped under it

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread


def test_the_demo_wakes_llm_inference_from_zero_through_keda_and_kubectl(tmp_path: Path) -> None:
    require_tool("kubectl")
    with running_demo(tmp_path, "--demo-scale-to-zero", "--keda-listen=127.0.0.1:0") as demo:
        wait_for(lambda: PENDING.search(demo.output()) is not None, "the demo's commands", patience(30))
        output = demo.output()
        gateway = GATEWAY_LINE.search(output)
        address = KEDA_LINE.search(output)
        pending = PENDING.search(output)
        assert gateway and address and pending, output
        pods = run_kubectl(["kubectl", "--kubeconfig", str(demo.kubeconfig), "get", "pods", "-n", "demo", "-l",
                            "app=llm-inference", "-o", "json"])  # fmt: skip
        assert pods.code == 0 and pods.body["items"] == [], "llm-inference has no pod"
        ref = keda.scaled_object("demo", TRIGGER | {"scalerAddress": address.group(1)}, name="llm-inference")
        with grpc.insecure_channel(address.group(1)) as channel:
            client = keda.ScalerClient.on(channel)
            assert client.is_active(ref).result is False, "at zero, nothing waiting"
            stream = client.stream_is_active(ref, timeout=120)
            assert next(stream).result is False
            senders = [send_request(gateway.group(1))]
            wait_for(lambda: waiting_at(gateway.group(1)) >= 1, "one request waiting at the gateway", 10, 0.02)
            waiting_since = time.monotonic()
            assert next(stream).result is True, "StreamIsActive pushes the wake-up"
            assert time.monotonic() - waiting_since <= patience(1.0), "within a second of one request waiting"
            assert client.is_active(ref).result is True
            senders += [send_request(gateway.group(1)) for _ in range(2)]
            wait_for(lambda: waiting_at(gateway.group(1)) == 3, "three requests waiting", 10, 0.02)

            def metrics_say_three() -> bool:
                answer = client.get_metrics(keda.metrics_request("demo", TRIGGER, "inference_pending_requests"))
                return [v.metricValueFloat for v in answer.metricValues] == [3.0]

            wait_for(metrics_say_three, "GetMetrics returning the three waiting", patience(3), 0.1)
            stream.cancel()
        result = kubectl_get_raw(demo.kubeconfig, pending.group(1))
        assert result.code == 0, result.stderr
        assert len(result.body["items"]) == 1, (pending.group(1), result.body)
        [item] = result.body["items"]
        assert parse_quantity(item["value"]) == 3 and item["metricLabels"] == {"inference_pool": "llm-inference"}
        stops_cleanly(demo, signal.SIGTERM)
        for sender in senders:
            sender.join(timeout=30)
