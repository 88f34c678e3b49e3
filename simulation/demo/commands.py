"""The kubectl commands the demo suggests: the request an HPA makes, and the adapter's other APIs."""

from __future__ import annotations

import json
import shlex
import urllib.parse
from pathlib import Path

import yaml

from simulation.demo.kedastate import trigger_metadata
from simulation.demo.scenarios import DEPLOYMENT, NAMESPACE, SELECTOR, STATEFUL_SET

_SELECTOR = urllib.parse.quote(SELECTOR, safe="")
CUSTOM = "/apis/custom.metrics.k8s.io"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
HPA_QUERY = f"{CUSTOM}/v1beta2/namespaces/{NAMESPACE}/pods/*/gpu_utilization?labelSelector={_SELECTOR}"
DEPLOYMENT_QUERY = f"{CUSTOM}/v1beta2/namespaces/{NAMESPACE}/deployments.apps/{DEPLOYMENT}/gpu_utilization"
EXTERNAL_QUERY = f"{EXTERNAL}/namespaces/{NAMESPACE}/namespace_gpu_utilization?labelSelector={_SELECTOR}"
STATEFUL_SET_QUERY = f"{CUSTOM}/v1beta2/namespaces/{NAMESPACE}/statefulsets.apps/{STATEFUL_SET}/gpu_utilization"
NODES_QUERY = f"{CUSTOM}/v1beta2/nodes/*/gpu_utilization"
# what each serving pod's engine reports (adapter/defaults.yaml, docs/llm-serving.md), as an HPA on them would ask
QUEUED_QUERY, RUNNING_QUERY, KV_CACHE_QUERY = (
    HPA_QUERY.replace("/gpu_utilization?", f"/{name}?")
    for name in ("inference_queued_requests", "inference_running_requests", "inference_kv_cache_utilization")
)

# each pod's saturation (the largest of its engine's signals over their targets, percent: adapter/saturation.py)
SATURATION_QUERY = HPA_QUERY.replace("/gpu_utilization?", "/inference_saturation?")

REQUESTS: tuple[tuple[str, str], ...] = (
    ("what an HPA on llm-inference asks: each pod's GPU utilization", HPA_QUERY),
    ("the same in v1beta1", HPA_QUERY.replace("/v1beta2/", "/v1beta1/")),
    ("the Deployment as a whole", DEPLOYMENT_QUERY),
    ("the StatefulSet as a whole", STATEFUL_SET_QUERY),
    ("each node, over its GPU pods", NODES_QUERY),
    ("the pods' mean, as an external metric", EXTERNAL_QUERY),
    ("every metric served (discovery)", f"{CUSTOM}/v1beta2"),
    ("requests waiting in each pod's engine (vLLM's vllm:num_requests_waiting)", QUEUED_QUERY),
    ("requests each pod's engine is running (vllm:num_requests_running)", RUNNING_QUERY),
    ("each pod's engine's KV-cache use, percent (vllm:kv_cache_usage_perc)", KV_CACHE_QUERY),
    ("each pod's saturation: its largest engine signal over its target, percent", SATURATION_QUERY),
)


def kubectl_command(kubeconfig: Path, path: str) -> str:
    return f"kubectl --kubeconfig {shlex.quote(str(kubeconfig))} get --raw {shlex.quote(path)}"


OBJECTS: tuple[tuple[str, str], ...] = (
    ("the pods, through the Kubernetes API stand-in", f"get pods -n {NAMESPACE}"),
    ("the Deployments", f"get deploy -n {NAMESPACE}"),
    ("the StatefulSets", f"get statefulsets -n {NAMESPACE}"),
    ("the GPU nodes", "get nodes -L nvidia.com/gpu.product"),
    ("the HPA on llm-inference (its status written by the demo from the adapter's figures)", f"get hpa -n {NAMESPACE}"),
)


def kubectl_commands(kubeconfig: Path) -> list[tuple[str, str]]:
    """(what it shows, the command line) for each suggested request: the cluster's objects, then the metrics APIs
    (the kubeconfig points at the stand-in, which proxies the metrics groups to the adapter)."""
    config = shlex.quote(str(kubeconfig))
    objects = [(what, f"kubectl --kubeconfig {config} {args}") for what, args in OBJECTS]
    return objects + [(what, kubectl_command(kubeconfig, path)) for what, path in REQUESTS]


PROTO = Path(__file__).resolve().parents[2] / "adapter" / "keda" / "proto"  # KEDA's externalscaler.proto


def keda_lines(address: str, tls: bool, ca_file: Path) -> tuple[str, str, str]:
    """Where KEDA's external scaler serves (a log line), a ScaledObject trigger on the demo's Deployment (YAML to
    paste under a ScaledObject's `triggers:`, printed without time stamps), and a grpcurl command that asks the scaler
    what KEDA asks it (IsActive)."""
    metadata = trigger_metadata(address)
    trigger = {"type": "external-push", "metadata": metadata}
    security = f"TLS, CA {ca_file} (the trigger's caCert)" if tls else "plaintext"
    text = yaml.safe_dump([trigger], sort_keys=False).rstrip()
    header = f"KEDA external scaler (gRPC externalscaler.ExternalScaler) on {address}, {security}; a trigger:"
    block = "\n".join(f"  {line}" for line in text.splitlines())
    request = json.dumps({"name": DEPLOYMENT, "namespace": NAMESPACE, "scalerMetadata": metadata})
    trust = f"-cacert {shlex.quote(str(ca_file))}" if tls else "-plaintext"
    call = (
        f"ask the scaler as KEDA does: grpcurl {trust} -import-path {shlex.quote(str(PROTO))} -proto "
        f"externalscaler.proto -d {shlex.quote(request)} {address} externalscaler.ExternalScaler/IsActive"
    )
    return header, block, call
