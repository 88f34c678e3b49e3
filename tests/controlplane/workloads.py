"""Deployments and HorizontalPodAutoscalers of the control plane tests, as manifests a user writes, and reading back
what the real controllers made of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from tests.controlplane.nodes import GPU_RESOURCE

IMAGE = "registry.example/llm-serve:1.0"  # never pulled: no kubelet runs


def namespace_with_default_account(core: k8s.CoreV1Api, namespace: str) -> None:
    """A namespace and its `default` ServiceAccount, which kube-controller-manager's serviceaccount controller
    creates in a cluster (the ServiceAccount admission plugin refuses pods without it)."""
    core.create_namespace({"metadata": {"name": namespace}})
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})


def gpu_deployment(name: str, replicas: int, gpus_per_pod: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": IMAGE,
                            "resources": {"limits": {GPU_RESOURCE: str(gpus_per_pod)}},
                        }
                    ],
                    "terminationGracePeriodSeconds": 30,
                },
            },
        },
    }


# scaling down at once: the default 300 s stabilization window would only slow the tests, not change where they end
FAST_SCALE_DOWN = {"scaleDown": {"stabilizationWindowSeconds": 0}}


def _hpa(target: str, metric: dict[str, Any], *, min_replicas: int, max_replicas: int) -> dict[str, Any]:
    """An autoscaling/v2 HPA on the Deployment `target` with the one metric `metric`, scaling down without delay."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": target},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metrics": [metric],
            "behavior": FAST_SCALE_DOWN,
        },
    }


def pods_metric_hpa(target: str, metric: str, average: str, *, min_replicas: int, max_replicas: int) -> dict[str, Any]:
    pods = {"metric": {"name": metric}, "target": {"type": "AverageValue", "averageValue": average}}
    return _hpa(target, {"type": "Pods", "pods": pods}, min_replicas=min_replicas, max_replicas=max_replicas)


def external_metric_hpa(
    target: str, metric: str, selector: dict[str, str], average: str, *, min_replicas: int, max_replicas: int
) -> dict[str, Any]:
    external = {
        "metric": {"name": metric, "selector": {"matchLabels": selector}},
        "target": {"type": "AverageValue", "averageValue": average},
    }
    return _hpa(
        target, {"type": "External", "external": external}, min_replicas=min_replicas, max_replicas=max_replicas
    )


@dataclass(frozen=True)
class HpaState:
    """What the HPA controller wrote into the HPA's status."""

    current: int
    desired: int
    conditions: dict[str, tuple[str, str, str]]  # type -> (status, reason, message)
    current_metrics: list[Any]

    def condition(self, kind: str) -> str:
        return self.conditions.get(kind, ("Unknown", "", ""))[0]

    def describe(self) -> str:
        conditions = "; ".join(f"{k}={s} ({r}: {m})" for k, (s, r, m) in sorted(self.conditions.items()))
        return f"current {self.current}, desired {self.desired}, {conditions}, metrics {self.current_metrics}"


def hpa_state(autoscaling: k8s.AutoscalingV2Api, namespace: str, name: str) -> HpaState:
    hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(name, namespace)
    status = hpa.status
    conditions = {c.type: (c.status, c.reason or "", c.message or "") for c in status.conditions or []}
    return HpaState(
        status.current_replicas or 0, status.desired_replicas or 0, conditions, list(status.current_metrics or [])
    )


def running_pods(core: k8s.CoreV1Api, namespace: str, app: str) -> list[str]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
    return sorted(
        p.metadata.name for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
    )
