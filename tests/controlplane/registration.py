"""The gpu-pulse adapter registered with a real control plane as the Helm chart registers it: the chart rendered by
Helm's engine (tests/deploy/rendering.py), its ServiceAccount, RBAC, TLS Secret and APIServices applied, and the
adapter started with the chart's arguments under its ServiceAccount's token, so the real API server answers its
TokenReviews and SubjectAccessReviews under the chart's RBAC and the real aggregator proxies to it.

One thing stands in for the cluster network: the adapter's Service. With no kube-proxy, a ClusterIP leads nowhere, so
the Service `gpu-pulse-adapter` is an ExternalName for localhost, and the APIServices name the adapter's port. The
aggregator resolves an ExternalName service to that name and the APIService's port (k8s.io/apiserver
pkg/util/proxy/proxy.go, ResolveCluster) and still verifies the adapter's certificate for
gpu-pulse-adapter.gpu-pulse.svc against the APIService's caBundle (k8s.io/kube-aggregator
pkg/apiserver/handler_proxy.go), so the chart's certificate is what is checked.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient

from tests.controlplane.cluster import ControlPlane
from tests.deploy.rendering import helm_render
from tests.support.adapters import SERVING_LINE
from tests.support.processes import ChildProcesses, python_module
from tests.support.waiting import patience, wait_for
from toolkit.certs import write_private

NAMESPACE = "gpu-pulse"
SERVICE_ACCOUNT = "gpu-pulse-adapter"
ADAPTER_PROCESS = "adapter"
RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@dataclass(frozen=True)
class RegisteredAdapter:
    url: str
    api_services: tuple[str, ...]


def chart_objects() -> list[dict[str, Any]]:
    """The chart as `helm install --namespace gpu-pulse` renders it, external metrics on."""
    return helm_render({"externalMetrics": {"enabled": True}}, namespace=NAMESPACE)


def apply(dynamic: DynamicClient, obj: Mapping[str, Any]) -> None:
    resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    namespace = obj["metadata"].get("namespace")
    resource.create(body=dict(obj), namespace=namespace)


def register_adapter(
    plane: ControlPlane,
    processes: ChildProcesses,
    exporter_endpoints: Mapping[str, str],
    *,
    max_age: float = 10,
    extra_args: tuple[str, ...] = (),
) -> RegisteredAdapter:
    """Apply the chart's adapter objects, start the adapter with its arguments (and `extra_args`), register its
    APIServices, and wait until the aggregator reports them Available."""
    objects = chart_objects()
    api = plane.api_client()
    dynamic = DynamicClient(api)
    core = k8s.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    by_kind = [o for o in objects if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == SERVICE_ACCOUNT]
    by_kind += [o for o in objects if o["kind"] in RBAC_KINDS]
    for obj in by_kind:
        apply(dynamic, obj)

    secret = next(o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == "gpu-pulse-adapter-tls")
    cert_file, key_file = plane.workdir / "adapter-tls.crt", plane.workdir / "adapter-tls.key"
    cert_file.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    write_private(key_file, base64.b64decode(secret["data"]["tls.key"]))

    token = core.create_namespaced_service_account_token(
        SERVICE_ACCOUNT, NAMESPACE, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    kubeconfig = plane.kubeconfig("gpu-pulse-adapter", token=token)
    endpoints = ",".join(f"{node}={url}" for node, url in sorted(exporter_endpoints.items()))
    argv = python_module(
        "adapter.cli",
        "--listen=127.0.0.1:0",
        "--source=direct",
        f"--exporter-endpoints={endpoints}",
        f"--tls-cert-file={cert_file}",
        f"--tls-private-key-file={key_file}",
        f"--kubeconfig={kubeconfig}",
        f"--max-age={max_age:g}",
        "--log-level=info",
        *extra_args,
    )
    processes.start(ADAPTER_PROCESS, argv)
    url = processes.wait_for_line(ADAPTER_PROCESS, SERVING_LINE, patience(60)).group(1)
    port = int(url.rsplit(":", 1)[1])

    core.create_namespaced_service(
        NAMESPACE,
        {
            "metadata": {"name": "gpu-pulse-adapter"},
            "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"name": "https", "port": port}]},
        },
    )
    names = []
    for obj in objects:
        if obj["kind"] != "APIService":
            continue
        service = {**obj["spec"]["service"], "port": port}
        apply(dynamic, {**obj, "spec": {**obj["spec"], "service": service}})
        names.append(obj["metadata"]["name"])
    registration = k8s.ApiregistrationV1Api(api)

    def available() -> bool:
        processes.check_running(ADAPTER_PROCESS)
        for name in names:
            conditions = registration.read_api_service(name).status.conditions or []
            if not any(c.type == "Available" and c.status == "True" for c in conditions):
                return False
        return True

    wait_for(available, f"APIServices {', '.join(names)} Available", patience(90))
    return RegisteredAdapter(url, tuple(names))
