"""The kustomize overlays: they render, every object validates, and they say what the design asks of them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml

from tests.deploy.crds import validate
from tests.deploy.invariants import check_all, check_flags
from tests.deploy.rendering import (
    CRD_KINDS,
    DEPLOY,
    OVERLAYS,
    REPO,
    find,
    kustomize,
    kustomize_with_components,
    one,
)
from tests.deploy.schemas import CERT_MANAGER_SCHEMAS, SERVICE_MONITOR, VERSIONS
from tests.support.tools import require_tool


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates_strictly(rendered: dict[str, list[dict[str, Any]]], overlay: str, version: str) -> None:
    kinds = set()
    for obj in rendered[overlay]:
        kinds.add(obj["kind"])
        validate(obj, version)  # built-in kinds by kubernetes-validate, custom ones by their CRDs' models
    assert {"DaemonSet", "Deployment", "APIService", "PodDisruptionBudget", "NetworkPolicy"} <= kinds


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_invariants_shared_with_the_chart(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    """Security contexts, least-privilege RBAC, verified APIServices, flags the programs know (invariants.py)."""
    check_all(rendered[overlay])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_cert_manager_objects(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    for obj in objects:
        if obj["kind"] in CERT_MANAGER_SCHEMAS:
            jsonschema.validate(obj, CERT_MANAGER_SCHEMAS[obj["kind"]])
    serving = one(objects, "Certificate", "gpu-pulse-adapter")["spec"]
    assert serving["dnsNames"] == ["gpu-pulse-adapter.gpu-pulse.svc", "gpu-pulse-adapter.gpu-pulse.svc.cluster.local"]
    assert serving["issuerRef"]["name"] == "gpu-pulse-ca"
    assert one(objects, "Certificate", "gpu-pulse-ca")["spec"]["secretName"] == "gpu-pulse-ca"
    assert one(objects, "Issuer", "gpu-pulse-ca")["spec"] == {"ca": {"secretName": "gpu-pulse-ca"}}


def test_a_wrong_field_is_caught() -> None:
    """The referee is live: strict validation rejects a field Kubernetes does not know."""
    document = yaml.safe_load((DEPLOY / "base" / "adapter" / "poddisruptionbudget.yaml").read_text(encoding="utf-8"))
    document["spec"]["minAvailabe"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(document, VERSIONS[-1], strict=True)


def test_service_monitors(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["prometheus-operator"]
    monitors = find(objects, "ServiceMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {"gpu-pulse-exporter", "gpu-pulse-adapter"}
    services = {s["metadata"]["name"]: s for s in find(objects, "Service")}
    for monitor in monitors:
        jsonschema.validate(monitor, SERVICE_MONITOR)
        service = services[monitor["metadata"]["name"]]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        ports = {p["name"] for p in service["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    exporter = one(objects, "ServiceMonitor", "gpu-pulse-exporter")
    assert all(e["honorLabels"] is True for e in exporter["spec"]["endpoints"]), "per-pod labels need honorLabels"
    (adapter,) = one(objects, "ServiceMonitor", "gpu-pulse-adapter")["spec"]["endpoints"]
    assert "insecureSkipVerify" not in adapter["tlsConfig"]
    assert adapter["tlsConfig"]["ca"]["secret"]["name"] == "gpu-pulse-adapter-tls"
    assert adapter["tlsConfig"]["serverName"] in one(objects, "Certificate", "gpu-pulse-adapter")["spec"]["dnsNames"]


@pytest.mark.parametrize("overlay", ["prometheus-operator", "shared-gpus"])
def test_prometheus_rule_passes_promtool(
    rendered: dict[str, list[dict[str, Any]]], overlay: str, tmp_path: Path
) -> None:
    promtool = require_tool("promtool")
    rule = one(rendered[overlay], "PrometheusRule", "gpu-pulse")
    assert rule["metadata"]["namespace"] == "gpu-pulse"
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]), encoding="utf-8")
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    # the rules must be those of the dialect the exporters publish (dcgm, the default)
    daemonset = one(rendered[overlay], "DaemonSet", "gpu-pulse-exporter")
    args = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--dialect={rule['metadata']['labels']['gpu-pulse.dev/dialect']}" in args


def test_dashboards_are_configmaps_for_the_grafana_sidecar(rendered: dict[str, list[dict[str, Any]]]) -> None:
    maps = [
        m for m in find(rendered["prometheus-operator"], "ConfigMap") if m["metadata"]["name"].endswith("-dashboard")
    ]
    assert len(maps) == len(list((REPO / "dashboards" / "dist").glob("*.json")))
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["namespace"] == "gpu-pulse"
        (name, text), *rest = config_map["data"].items()
        assert not rest and name.endswith(".json")
        assert json.loads(text)["uid"].startswith("gpu-pulse-")
        # kubectl apply (client side) stores the object in an annotation limited to 256 KiB
        assert len(json.dumps(config_map)) < 256 * 1024


def _pod(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, kind, name)["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_exporter_daemonset(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    pod = _pod(rendered[overlay], "DaemonSet", "gpu-pulse-exporter")
    (container,) = pod["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    socket_dir = mounts["pod-resources"]
    assert socket_dir["mountPath"] == "/var/lib/kubelet/pod-resources"
    assert socket_dir["readOnly"] is True, "connect() writes nothing: the socket directory is mounted read-only"
    assert volumes["pod-resources"]["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert any(t["key"] == "nvidia.com/gpu" and t["operator"] == "Exists" for t in pod["tolerations"])
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]} in terms[0]["matchExpressions"]
    # a GPU node without the GPU Operator v26.7+'s label gets an exporter: its pause protocol is opt-in
    assert "nodeSelector" not in pod
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] == {"cpu": "50m", "memory": "64Mi"}
    assert container["resources"]["limits"] == {"memory": "128Mi"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in pod and "--dialect=dcgm" in container["args"], "dcgm: the one default dialect"
    assert set(mounts) == {"pod-resources", "tmp"}, "no host /proc: hostPID gives the host's processes"
    if overlay == "shared-gpus":
        assert pod["hostPID"] is True and "--kubernetes" in container["args"]
        assert not any(a.startswith("--proc-root") for a in container["args"]), "the default /proc is the host's"
    else:
        assert "hostPID" not in pod and "--kubernetes" not in container["args"]
    assert pod["automountServiceAccountToken"] is True, "TokenReviews of who calls /pods"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_adapter_deployment_and_api_registration(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    deployment = one(objects, "Deployment", "gpu-pulse-adapter")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["resources"] == {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    pdb = one(objects, "PodDisruptionBudget", "gpu-pulse-adapter")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items() and pdb["spec"]["minAvailable"] == 1
    service = one(objects, "Service", "gpu-pulse-adapter")
    assert service["spec"]["selector"].items() <= labels.items()
    services = {(a["spec"]["group"], a["spec"]["version"]): a["spec"] for a in find(objects, "APIService")}
    assert set(services) == {
        ("custom.metrics.k8s.io", "v1beta1"),
        ("custom.metrics.k8s.io", "v1beta2"),
    }, "the external metrics API is opt-in (components/external-metrics): it is usually KEDA's"
    for api in find(objects, "APIService"):
        assert api["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "gpu-pulse/gpu-pulse-adapter"}
    custom = services[("custom.metrics.k8s.io", "v1beta2")]["versionPriority"]
    assert custom > services[("custom.metrics.k8s.io", "v1beta1")]["versionPriority"], "v1beta2 must be preferred"
    for spec in services.values():
        assert spec["service"] == {"name": "gpu-pulse-adapter", "namespace": "gpu-pulse", "port": 443}
    assert service["spec"]["ports"][0]["port"] == 443


def test_rbac_of_an_aggregated_api_server(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["prometheus-operator"]
    adapter = {"kind": "ServiceAccount", "name": "gpu-pulse-adapter", "namespace": "gpu-pulse"}

    def bound(kind: str, role: str, namespace: str | None = None) -> list[dict[str, Any]]:
        found = [
            b
            for b in find(objects, kind)
            if b["roleRef"]["name"] == role and (namespace is None or b["metadata"].get("namespace") == namespace)
        ]
        return [s for b in found for s in b["subjects"]]

    assert adapter in bound("ClusterRoleBinding", "system:auth-delegator")
    assert adapter in bound("RoleBinding", "extension-apiserver-authentication-reader", "kube-system")
    assert adapter in bound("ClusterRoleBinding", "gpu-pulse-adapter")
    hpa = {"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler", "namespace": "kube-system"}
    assert hpa in bound("ClusterRoleBinding", "gpu-pulse-metrics-reader")
    reader = one(objects, "ClusterRole", "gpu-pulse-metrics-reader")
    assert set(reader["rules"][0]["apiGroups"]) == {"custom.metrics.k8s.io"}
    pods = one(objects, "ClusterRole", "gpu-pulse-adapter")["rules"][0]
    assert pods["resources"] == ["pods"] and set(pods["verbs"]) == {"get", "list", "watch"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_open_the_served_ports(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    for kind, name in (("DaemonSet", "gpu-pulse-exporter"), ("Deployment", "gpu-pulse-adapter")):
        workload = one(objects, kind, name)
        policy = one(objects, "NetworkPolicy", name)
        assert (
            policy["spec"]["podSelector"]["matchLabels"].items()
            <= workload["spec"]["template"]["metadata"]["labels"].items()
        )
        ports = {p["name"] for p in workload["spec"]["template"]["spec"]["containers"][0]["ports"]}
        allowed = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
        assert allowed == ports


def test_plain_scrape_config_loads_in_prometheus(rendered: dict[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    snippet = yaml.safe_load((DEPLOY / "overlays" / "plain" / "prometheus-scrape-config.yaml").read_text())
    jobs = {job["job_name"]: job for job in snippet["scrape_configs"]}
    assert set(jobs) == {"gpu-pulse-exporter", "gpu-pulse-adapter"}, "the shipped alerts select these job names"
    assert jobs["gpu-pulse-exporter"]["honor_labels"] is True
    for name, job in jobs.items():
        # each job keeps the pods whose gpu-pulse.dev/job label is its name, which the rendered pods carry
        (keep,) = [r for r in job["relabel_configs"] if r.get("action") == "keep" and r["regex"] == name]
        assert keep["source_labels"] == ["__meta_kubernetes_pod_label_gpu_pulse_dev_job"]
        kind = "DaemonSet" if name == "gpu-pulse-exporter" else "Deployment"
        assert one(rendered["plain"], kind, name)["spec"]["template"]["metadata"]["labels"]["gpu-pulse.dev/job"] == name
        # Debian's prometheus is built without Kubernetes service discovery, so promtool cannot parse
        # kubernetes_sd_configs: check its shape here and let promtool check the rest with a static target
        (discovery,) = job.pop("kubernetes_sd_configs")
        namespace = "gpu-pulse-exporter" if name == "gpu-pulse-exporter" else "gpu-pulse"
        assert discovery == {"role": "pod", "namespaces": {"names": [namespace]}}
        job["static_configs"] = [{"targets": ["127.0.0.1:9400"]}]
    config = {
        "global": {"scrape_interval": "15s"},
        "rule_files": [str(REPO / "rules" / "dist" / "dcgm" / "gpu-pulse.rules.yaml")],
        "scrape_configs": list(jobs.values()),
    }
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    annotations = one(rendered["plain"], "DaemonSet", "gpu-pulse-exporter")["spec"]["template"]["metadata"]
    assert annotations["annotations"]["prometheus.io/port"] == "9400"


def test_a_flag_the_exporter_does_not_know_is_caught(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The referee is live: the flag check reads the real --help."""
    objects = json.loads(json.dumps(rendered["plain"]))
    one(objects, "DaemonSet", "gpu-pulse-exporter")["spec"]["template"]["spec"]["containers"][0]["args"].append(
        "--gpu-filter=0"
    )
    with pytest.raises(AssertionError, match="--gpu-filter"):
        check_flags(objects)


def test_external_metrics_and_mig_components(kubectl: str, tmp_path: Path) -> None:
    """The opt-in components added to a shipped overlay: the external metrics API (its CA injected), MIG monitoring."""
    objects = kustomize_with_components(
        kubectl, tmp_path, "overlays/prometheus-operator", "external-metrics", "mig-monitor"
    )
    for obj in objects:
        if obj["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(obj, VERSIONS[-1], strict=True)
    check_all(objects)
    external = one(objects, "APIService", "v1beta1.external.metrics.k8s.io")
    assert external["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "gpu-pulse/gpu-pulse-adapter"
    reader = one(objects, "ClusterRole", "gpu-pulse-metrics-reader")["rules"][0]
    assert set(reader["apiGroups"]) == {"custom.metrics.k8s.io", "external.metrics.k8s.io"}
    container = one(objects, "DaemonSet", "gpu-pulse-exporter")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"} in container["env"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}


def test_the_base_alone_registers_no_unverified_api(kubectl: str) -> None:
    """Without a certificate component the APIServices carry neither a caBundle nor insecureSkipTLSVerify: they stay
    unavailable until one is provided (docs/install.md), never unverified."""
    objects = kustomize(kubectl, DEPLOY / "base")
    for api in find(objects, "APIService"):
        assert "insecureSkipTLSVerify" not in api["spec"] and "caBundle" not in api["spec"]
    assert not find(objects, "Secret"), "no private key in the manifests"


def test_containerfile_builds_two_slim_images_from_one_venv() -> None:
    text = (DEPLOY / "docker" / "Containerfile").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    stages = {line.split()[-1]: line for line in lines if line.startswith("FROM ")}
    assert set(stages) == {"build", "runtime", "exporter", "adapter"}
    assert stages["exporter"] == stages["adapter"].replace("adapter", "exporter") == "FROM runtime AS exporter"
    # installed as a distribution (pip install of the project), never by copying package folders
    assert "pip install --no-compile /src" in text and not any(line.startswith("COPY exporter") for line in lines)
    assert "pip uninstall --yes pip setuptools" in text
    final = {target: lines[lines.index(stages[target]) :] for target in ("exporter", "adapter")}
    for target, stage in final.items():
        stage = stage[: next((i for i, line in enumerate(stage[1:], 1) if line.startswith("FROM ")), len(stage))]
        user = next(line for line in stage if line.startswith("USER "))
        assert user == ("USER 0:0" if target == "exporter" else "USER 65532:65532")
        assert stage[-1] == f'ENTRYPOINT ["gpu-pulse-{target}"]'
        text_pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
        assert f'gpu-pulse-{target} = "{target}.cli:main"' in text_pyproject


@pytest.mark.parametrize("directory", ["rules/dist/prometheus", "rules/dist/dcgm", "dashboards"])
def test_rules_and_dashboards_apply_on_their_own(kubectl: str, directory: str) -> None:
    """`kubectl apply -k rules/dist/<dialect>` swaps the dialect's rules; `-k dashboards` adds the ConfigMaps."""
    objects = kustomize(kubectl, REPO / directory)
    assert objects and all(o["metadata"]["namespace"] == "gpu-pulse" for o in objects)
    if directory.startswith("rules"):
        (rule,) = objects
        assert rule["kind"] == "PrometheusRule" and rule["metadata"]["name"] == "gpu-pulse"
        assert rule["metadata"]["labels"]["gpu-pulse.dev/dialect"] == directory.rsplit("/", 1)[1]


def _rules_of(objects: list[dict[str, Any]], account: str) -> list[dict[str, Any]]:
    """Every RBAC rule the ClusterRoleBindings grant the service account `account`."""
    roles = {r["metadata"]["name"]: r for r in find(objects, "ClusterRole")}
    return [
        rule
        for binding in find(objects, "ClusterRoleBinding")
        if any(s.get("name") == account for s in binding.get("subjects") or ())
        for rule in roles[binding["roleRef"]["name"]]["rules"]
    ]


def _reads(rules: list[dict[str, Any]], group: str, resource: str) -> bool:
    return any(
        group in r["apiGroups"] and resource in r["resources"] and {"get", "list", "watch"} <= set(r["verbs"])
        for r in rules
    )


@pytest.mark.parametrize("components", [["dra"], ["shared-gpus"], ["shared-gpus", "dra"]])
def test_every_exporter_with_kubernetes_may_read_its_nodes_resource_slices(
    tmp_path: Path, components: list[str]
) -> None:
    kubectl = require_tool("kubectl")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY / "overlays" / "plain", overlay)],
                "components": [os.path.relpath(DEPLOY / "components" / c, overlay) for c in components],
            }
        )
    )
    objects = kustomize(kubectl, overlay)
    pod = one(objects, "DaemonSet", "gpu-pulse-exporter")["spec"]["template"]["spec"]
    assert "--kubernetes" in pod["containers"][0]["args"] and pod["automountServiceAccountToken"] is True
    rules = _rules_of(objects, "gpu-pulse-exporter")
    assert _reads(rules, "resource.k8s.io", "resourceslices") and _reads(rules, "", "pods")


def test_the_kubelet_path_is_a_value_of_the_kubelet_path_component(kubectl: str, tmp_path: Path) -> None:
    """The documented overlay: a local-config ConfigMap beside the component moves the host side of the socket mount,
    and never reaches the cluster; without it the build fails naming it."""
    deploy = REPO / "deploy"
    (tmp_path / "kubelet-path.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gpu-pulse-kubelet-path\n  annotations:\n"
        '    config.kubernetes.io/local-config: "true"\ndata:\n'
        "  path: /var/snap/microk8s/common/var/lib/kubelet/pod-resources\n",
        encoding="utf-8",
    )
    overlay = [
        "apiVersion: kustomize.config.k8s.io/v1beta1",
        "kind: Kustomization",
        "resources:",
        f"  - {os.path.relpath(deploy / 'overlays' / 'plain', tmp_path)}",
        "  - kubelet-path.yaml",
        "components:",
        f"  - {os.path.relpath(deploy / 'components' / 'kubelet-path', tmp_path)}",
    ]
    (tmp_path / "kustomization.yaml").write_text("\n".join(overlay) + "\n", encoding="utf-8")
    objects = kustomize(kubectl, tmp_path)
    pod = _pod(objects, "DaemonSet", "gpu-pulse-exporter")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["pod-resources"]["hostPath"] == {
        "path": "/var/snap/microk8s/common/var/lib/kubelet/pod-resources",
        "type": "Directory",
    }
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["pod-resources"] == "/var/lib/kubelet/pod-resources"
    assert not find(objects, "ConfigMap", "gpu-pulse-kubelet-path"), "local-config: never applied"
    check_all(objects, "gpu-pulse")

    (tmp_path / "kustomization.yaml").write_text("\n".join(o for o in overlay if "kubelet-path.yaml" not in o) + "\n")
    failed = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, check=False)
    assert failed.returncode != 0 and "gpu-pulse-kubelet-path" in failed.stderr
