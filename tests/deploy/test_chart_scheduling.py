"""Where the chart's exporter DaemonSet runs: on GPU nodes as each platform labels them, with or without the GPU
Operator's pause label, and nowhere else. The nodes below carry the labels and taints each platform documents for its
GPU nodes; `schedulable` applies the kube-scheduler's NodeAffinity and TaintToleration filters as
k8s.io/component-helpers/scheduling/corev1 defines them (nodeSelector: every pair; required node affinity: any term,
each term all of its expressions; a NoSchedule or NoExecute taint needs a toleration). NOTES.txt says what was
chosen."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.rendering import CHART, helm_render, one, require_helm

helm_python = require_helm()

PAUSE_LABEL = "nvidia.com/gpu.deploy.client"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}

# GPU nodes as the platforms label them (docs/install.md, "Cluster flavours", cites each)
GPU_NODES: dict[str, tuple[dict[str, str], list[dict[str, str]]]] = {
    # the GPU Operator before v26.7 (or NVIDIA's GPU feature discovery alone): no pause label
    "gpu-operator-before-26.7": ({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                                 []),
    # Node Feature Discovery alone: an NVIDIA PCI device (vendor 10de)
    "node-feature-discovery": ({"feature.node.kubernetes.io/pci-10de.present": "true"}, []),
    # GKE with its own driver installer: its accelerator label and taint
    "gke": ({"cloud.google.com/gke-accelerator": "nvidia-l4"}, [GPU_TAINT]),
    # AKS: its accelerator label, and the taint its examples give GPU node pools
    "aks": ({"kubernetes.azure.com/accelerator": "nvidia"}, [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]),
    # EKS with Karpenter, and EKS Auto Mode (which taints GPU nodes nvidia.com/gpu:NoSchedule)
    "eks-karpenter": ({"karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia"}, []),
    "eks-auto-mode": ({"eks.amazonaws.com/instance-gpu-manufacturer": "nvidia"},
                      [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
}  # fmt: skip
Node = tuple[dict[str, str], list[dict[str, str]]]
OPERATOR_NODE: Node = ({"nvidia.com/gpu.present": "true", PAUSE_LABEL: "true"}, [])
PAUSED_NODE: Node = ({"nvidia.com/gpu.present": "true", PAUSE_LABEL: "paused-for-driver-upgrade"}, [])
CPU_NODE: Node = ({"kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "m7i.2xlarge"}, [])


def _expression_matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt"):
        if key not in labels:
            return False
        have, bound = int(labels[key]), int(values[0])
        return have > bound if operator == "Gt" else have < bound
    raise AssertionError(f"unknown operator {operator}")


def _tolerated(taint: dict[str, str], tolerations: list[dict[str, Any]]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") not in (None, "", taint["effect"]):
            continue
        if toleration.get("key") not in (None, "", taint["key"]):
            continue
        if toleration.get("operator", "Equal") == "Exists" or toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def schedulable(pod: dict[str, Any], node: tuple[dict[str, str], list[dict[str, str]]]) -> bool:
    labels, taints = node
    if any(labels.get(k) != v for k, v in pod.get("nodeSelector", {}).items()):
        return False
    required = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        terms = required["nodeSelectorTerms"]
        if not any(all(_expression_matches(e, labels) for e in t.get("matchExpressions", [])) for t in terms):
            return False
    blocking = [t for t in taints if t["effect"] in ("NoSchedule", "NoExecute")]
    return all(_tolerated(t, pod.get("tolerations", [])) for t in blocking)


def _exporter_pod(values: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = one(helm_render(values), "DaemonSet", "gpu-pulse-exporter")["spec"]["template"]["spec"]
    return pod


@pytest.fixture(scope="module")
def defaults() -> dict[str, Any]:
    return _exporter_pod({})


@pytest.mark.parametrize("platform", [p for p in GPU_NODES if p != "aks"])
def test_the_default_runs_on_every_gpu_node_without_the_operators_label(
    defaults: dict[str, Any], platform: str
) -> None:
    assert schedulable(defaults, GPU_NODES[platform]), f"no exporter on a {platform} GPU node"


def test_the_default_runs_where_the_operator_labels_and_not_on_cpu_nodes(defaults: dict[str, Any]) -> None:
    assert schedulable(defaults, OPERATOR_NODE) and schedulable(defaults, PAUSED_NODE), "the protocol is opt-in"
    assert not schedulable(defaults, CPU_NODE), "an exporter on a node without a GPU"
    # AKS's GPU taint is the node pool's own choice (docs/install.md, "AKS"): the label matches, the taint needs yours
    labels, taints = GPU_NODES["aks"]
    assert schedulable(defaults, (labels, [])) and not schedulable(defaults, (labels, taints))
    aks = _exporter_pod({"exporter": {"tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu",
                                                       "effect": "NoSchedule"}]}})  # fmt: skip
    assert schedulable(aks, GPU_NODES["aks"])


def test_one_value_turns_the_pause_protocol_on() -> None:
    pod = _exporter_pod({"gpuOperator": {"pauseProtocol": True}})
    assert pod["nodeSelector"] == {PAUSE_LABEL: "true"}
    assert schedulable(pod, OPERATOR_NODE)
    assert not schedulable(pod, PAUSED_NODE), "the operator's pause takes the exporter off the node"
    assert not any(schedulable(pod, node) for node in GPU_NODES.values()), "only where the operator labels"


def test_the_scheduling_referee_is_live(defaults: dict[str, Any]) -> None:
    """The filters refuse what the scheduler refuses: a missing selector pair, an untolerated taint."""
    assert not schedulable({"nodeSelector": {"a": "b"}}, ({}, []))
    assert not schedulable({}, ({}, [GPU_TAINT]))
    assert schedulable({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}, ({}, [GPU_TAINT]))
    no_terms = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "x", "operator": "Exists"}]}]}}}}  # fmt: skip
    assert not schedulable(no_terms, ({}, []))


def _notes(values: dict[str, Any]) -> str:
    with helm_python.Chart.load(str(CHART)) as chart:
        rendered: dict[str, str] = chart.render(values, name="gpu-pulse", namespace="gpu-pulse", is_install=True)
    return rendered["gpu-pulse/templates/NOTES.txt"]


def test_notes_say_which_nodes_were_chosen_and_how_to_turn_the_protocol_on_or_off() -> None:
    notes = _notes({})
    assert "any of (exporter.affinity): nvidia.com/gpu.present in true; " in notes
    assert "cloud.google.com/gke-accelerator;" in notes
    assert "pause protocol is off (gpuOperator.pauseProtocol=false)" in notes
    paused = _notes({"gpuOperator": {"pauseProtocol": True}})
    assert f"Only where {PAUSE_LABEL}=true (gpuOperator.pauseProtocol)" in paused
    assert "--set gpuOperator.pauseProtocol=false" in paused
    custom = _notes({"exporter": {"affinity": None, "nodeSelector": {"gpu": "yes"}}})  # null drops the default
    assert "exporter.nodeSelector and exporter.affinity select" in custom
