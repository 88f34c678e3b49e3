"""The adapter behind Kubernetes' own aggregator: `kubectl get --raw` through the real API server reaches it with the
aggregator's requestheader identity, its TokenReviews and SubjectAccessReviews are answered by the real API server
under the chart's RBAC, and the pods it reports are the ones the real ReplicaSet controller created."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from tests.controlplane.stack import Cluster
from tests.controlplane.workloads import gpu_deployment, namespace_with_default_account, running_pods
from tests.support.kubectl import kubectl_get_raw
from tests.support.tools import require_tool
from tests.support.waiting import patience, wait_for

# the first test's time includes starting the cluster, and the control plane's first build on a fresh machine
# (tests/controlplane/build.py)
pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(3600)]

NAMESPACE = "serving"
APP = "llm-serve"
CUSTOM = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NAMESPACE}"
EXTERNAL = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}"
DEMAND = 140.0  # percent of one GPU over two pods: 70 % each


@pytest.fixture(scope="module")
def serving(cluster: Cluster) -> Iterator[list[str]]:
    """A Deployment of two one-GPU pods, running, with its load: the pods' names."""
    core = k8s.CoreV1Api(cluster.api)
    namespace_with_default_account(core, NAMESPACE)
    k8s.AppsV1Api(cluster.api).create_namespaced_deployment(NAMESPACE, gpu_deployment(APP, 2))
    cluster.nodes.set_demand(NAMESPACE, APP, DEMAND)
    wait_for(lambda: len(running_pods(core, NAMESPACE, APP)) == 2, "two running llm-serve pods", patience(60))
    yield running_pods(core, NAMESPACE, APP)


def _raw(cluster: Cluster, path: str) -> object:
    result = kubectl_get_raw(cluster.plane.admin_kubeconfig, path)
    assert result.code == 0, result.stderr
    return result.body


def test_discovery_through_the_aggregator(cluster: Cluster) -> None:
    require_tool("kubectl")
    found: list[object] = []

    def discovered() -> bool:
        # the aggregator answers 503 while its availability check of the adapter is failing, which a loaded machine
        # can make it do for a moment after the APIService first became Available; clients retry discovery
        result = kubectl_get_raw(cluster.plane.admin_kubeconfig, "/apis/custom.metrics.k8s.io/v1beta2")
        found[:] = [result.body] if result.code == 0 else []
        return bool(found)

    wait_for(discovered, "the custom metrics API's discovery through the aggregator", patience(30))
    body = found[0]
    assert isinstance(body, dict)
    names = {r["name"] for r in body["resources"]}
    assert "pods/gpu_utilization" in names


def test_pod_figures_name_the_controllers_pods(cluster: Cluster, serving: list[str]) -> None:
    require_tool("kubectl")
    selector = urllib.parse.quote(f"app={APP}")
    path = f"{CUSTOM}/pods/*/gpu_utilization?labelSelector={selector}"

    def both_served() -> bool:
        body = _raw(cluster, path)
        assert isinstance(body, dict)
        return sorted(i["describedObject"]["name"] for i in body["items"]) == serving

    wait_for(both_served, "both pods' gpu_utilization through the aggregator", patience(90))


def test_external_metric_through_the_aggregator(cluster: Cluster, serving: list[str]) -> None:
    require_tool("kubectl")
    selector = urllib.parse.quote(f"app={APP}")
    path = f"{EXTERNAL}/namespace_gpu_utilization?labelSelector={selector}"

    def served() -> bool:
        body = _raw(cluster, path)
        assert isinstance(body, dict)
        return len(body["items"]) == 1

    wait_for(served, "namespace_gpu_utilization through the aggregator", patience(90))


def test_a_user_without_rbac_is_refused(cluster: Cluster, serving: list[str]) -> None:
    """The API server authorizes the request before the aggregator proxies it: a user the chart's RBAC does not name
    gets 403, from Kubernetes, naming the user."""
    require_tool("kubectl")
    kubeconfig = cluster.plane.kubeconfig("stranger", user="stranger")
    result = kubectl_get_raw(kubeconfig, f"{CUSTOM}/pods/*/gpu_utilization")
    assert result.code != 0
    assert "forbidden" in result.stderr.lower() and "stranger" in result.stderr


def test_the_hpa_controllers_account_may_read(cluster: Cluster, serving: list[str]) -> None:
    """The HPA controller's ServiceAccount reads the metrics: the chart's ClusterRoleBinding, checked by the adapter's
    SubjectAccessReview against the real RBAC authorizer."""
    core = k8s.CoreV1Api(cluster.api)
    token = core.create_namespaced_service_account_token(
        "horizontal-pod-autoscaler", "kube-system", {"spec": {"expirationSeconds": 600}}
    ).status.token
    kubeconfig = cluster.plane.kubeconfig("hpa-reader", token=token)
    result = kubectl_get_raw(kubeconfig, f"{CUSTOM}/pods/*/gpu_utilization")
    assert result.code == 0, result.stderr


def test_apiservices_are_the_charts(cluster: Cluster) -> None:
    names = {s.metadata.name for s in k8s.ApiregistrationV1Api(cluster.api).list_api_service().items}
    assert set(cluster.adapter.api_services) <= names
    assert set(cluster.adapter.api_services) == {
        "v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io",
    }  # fmt: skip
