"""The demo's `--demo-scale-to-zero`: llm-inference with no pod, behind a simulated inference gateway that holds its
requests, and the adapter reading the gateway's queue as `inference_pending_requests`.

The nodes keep their other pods; llm-inference's pods, their processes and the GPU load they made are left out (their
GPUs idle), and its Deployment has 0 replicas. The gateway (simulation/gateway.py) fronts the pool `llm-inference`
serving the model the demo's vLLM pods serve; with no ready endpoint, every request sent to it waits. The adapter's
metrics file is the shipped defaults with one `demand` entry reading the gateway (adapter/demand/config.py).
"""

from __future__ import annotations

import copy
import shlex
import urllib.parse
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from simulation.demo.scenarios import DEPLOYMENT, NAMESPACE, NODES

POOL = DEPLOYMENT  # the InferencePool's name: the Deployment it selects
MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # what the demo's llm-inference vLLM pods serve (scenarios._pod)
DEMAND = "inference_pending_requests"
GATEWAY_TTL = 600.0  # seconds a request waits for an endpoint before a 503, long enough to watch the wake-up


def scaled_to_zero(nodes: tuple[dict[str, Any], ...] = NODES) -> tuple[dict[str, Any], ...]:
    """`nodes` without llm-inference's pods, their processes, and the load their GPUs (or MIG instances) had."""
    result = []
    for node in nodes:
        data = copy.deepcopy(node)
        gone = [p for p in data["pods"] if p["labels"].get("app") == DEPLOYMENT]
        pids = {pid for pod in gone for container in pod["containers"] for pid in container["pids"]}
        freed = [p for p in data.get("processes", ()) if p["pid"] in pids]
        data["pods"] = [p for p in data["pods"] if p not in gone]
        data["processes"] = [p for p in data.get("processes", ()) if p["pid"] not in pids]
        for process in freed:
            gpu = data["gpus"][process["gpu"]] if process["gpu"] < len(data["gpus"]) else None
            if gpu is None:
                continue
            if "mig" in process and "mig" in gpu:
                gpu["mig"][process["mig"]].pop("load", None)
            elif gpu.get("count", 1) == 1:
                gpu.pop("load", None)
        if gone:
            data["description"] = f"{data['description']} (llm-inference scaled to zero)"
        result.append(data)
    return tuple(result)


def demand_config(gateway_url: str) -> str:
    """The adapter's metrics file: the shipped defaults, and the gateway's queue as a demand."""
    defaults = resources.files("adapter").joinpath("defaults.yaml").read_text(encoding="utf-8")
    entry = {
        "name": DEMAND,
        "description": "requests waiting at the demo's gateway for the llm-inference pool",
        "namespace": NAMESPACE,
        "url": f"{gateway_url}/metrics",
        "preset": "gateway-api-inference-extension",
        "labels": {"app": DEPLOYMENT},
    }
    return defaults.rstrip() + "\n\n" + yaml.safe_dump({"demand": [entry]}, sort_keys=False)


def write_demand_config(directory: Path, gateway_url: str) -> Path:
    path = directory / "metrics-with-demand.yaml"
    path.write_text(demand_config(gateway_url), encoding="utf-8")
    return path


PENDING_QUERY = (
    f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/{DEMAND}"
    f"?labelSelector={urllib.parse.quote(f'inference_pool={POOL}', safe='')}"
)


def demand_trigger(address: str) -> dict[str, str]:
    """A KEDA trigger's metadata waking llm-inference from zero on one request waiting."""
    return {
        "scalerAddress": address,
        "metric": DEMAND,
        "selector": f"inference_pool={POOL}",
        "target": "4",
        "activationTarget": "0",
    }


def zero_lines(gateway_url: str, kubeconfig: Path, keda_address: str | None) -> list[str]:
    """What the demo prints: the gateway, a request to send it (it waits), and how to watch the demand."""
    body = '{"model": "' + MODEL + '", "prompt": "Hello", "max_tokens": 16}'
    config = shlex.quote(str(kubeconfig))
    lines = [
        f"llm-inference is at zero replicas; a simulated inference gateway (EPP) fronts its pool on {gateway_url}",
        f"  # send a request: it waits at the gateway (no endpoint is ready) for up to {GATEWAY_TTL:.0f} s",
        f"  curl -s -X POST {gateway_url}/v1/completions -H 'Content-Type: application/json' -d {shlex.quote(body)} &",
        "  # the gateway's queue, as its /metrics says it",
        f"  curl -s {gateway_url}/metrics",
        "  # requests waiting, as an HPA's External metric (non-zero while requests wait, with no pod)",
        f"  kubectl --kubeconfig {config} get --raw {shlex.quote(PENDING_QUERY)}",
    ]
    if keda_address is not None:
        lines.append(f"  # KEDA activation from zero, a trigger: {demand_trigger(keda_address)}")
    return lines
