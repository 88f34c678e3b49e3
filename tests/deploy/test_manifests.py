"""The kustomize overlays: they render, every object validates, and they say what the design asks of them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml

from tests.deploy.rendering import DEPLOY, OVERLAYS, REPO, find, kustomize, one
from tests.support.tools import require_tool

# The oldest Kubernetes minor the kubelet contract covers, and the newest the installed kubernetes-validate knows.
VERSIONS = ("1.30", kubernetes_validate.utils.latest_version())
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates_strictly(rendered: dict[str, list[dict[str, Any]]], overlay: str, version: str) -> None:
    kinds = set()
    for obj in rendered[overlay]:
        kinds.add(obj["kind"])
        if obj["kind"] in CRD_KINDS:
            continue  # no schema in kubernetes-validate: checked below
        kubernetes_validate.validate(obj, version, strict=True)
    assert {"DaemonSet", "Deployment", "APIService", "PodDisruptionBudget", "NetworkPolicy"} <= kinds


def test_a_wrong_field_is_caught() -> None:
    """The referee is live: strict validation rejects a field Kubernetes does not know."""
    document = yaml.safe_load((DEPLOY / "base" / "adapter" / "poddisruptionbudget.yaml").read_text(encoding="utf-8"))
    document["spec"]["minAvailabe"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(document, VERSIONS[-1], strict=True)


# The fields of the Prometheus Operator's ServiceMonitor (monitoring.coreos.com/v1) these manifests may use.
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {k: {} for k in ("sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement",
                                   "action")},
}  # fmt: skip
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "jobLabel": {"type": "string"},
                "selector": {"type": "object"},
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array"}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": {"type": "string", "pattern": "^[0-9]+[smh]$"},
                            "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+[smh]$"},
                            "honorLabels": {"type": "boolean"},
                            "tlsConfig": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {"insecureSkipVerify": {"type": "boolean"}, "caFile": {},
                                               "serverName": {}},
                            },
                            "relabelings": {"type": "array", "items": _RELABEL},
                        },
                    },
                },
            },
        },
    },
}  # fmt: skip


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
    # the base's exporters publish the prometheus dialect: the rules must be the prometheus dialect's
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
    assert not socket_dir.get("readOnly", False), "the socket directory must be writable to connect"
    assert volumes["pod-resources"]["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert any(t["key"] == "nvidia.com/gpu" and t["operator"] == "Exists" for t in pod["tolerations"])
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] == {"cpu": "50m", "memory": "64Mi"}
    assert container["resources"]["limits"] == {"memory": "128Mi"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostPID" not in pod and "hostNetwork" not in pod
    if overlay == "shared-gpus":
        assert mounts["host-proc"] == {"name": "host-proc", "mountPath": "/host/proc", "readOnly": True}
        assert "--proc-root=/host/proc" in container["args"]
    else:
        assert "host-proc" not in mounts and pod["automountServiceAccountToken"] is False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_adapter_deployment_and_api_registration(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    deployment = one(objects, "Deployment", "gpu-pulse-adapter")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}
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
        ("external.metrics.k8s.io", "v1beta1"),
    }
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
    assert set(reader["rules"][0]["apiGroups"]) == {"custom.metrics.k8s.io", "external.metrics.k8s.io"}
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
    for job in jobs.values():
        # Debian's prometheus is built without Kubernetes service discovery, so promtool cannot parse
        # kubernetes_sd_configs: check its shape here and let promtool check the rest with a static target
        (discovery,) = job.pop("kubernetes_sd_configs")
        assert discovery == {"role": "pod", "namespaces": {"names": ["gpu-pulse"]}}
        job["static_configs"] = [{"targets": ["127.0.0.1:9400"]}]
    config = {
        "global": {"scrape_interval": "15s"},
        "rule_files": [str(REPO / "rules" / "dist" / "prometheus" / "gpu-pulse.rules.yaml")],
        "scrape_configs": list(jobs.values()),
    }
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    annotations = one(rendered["plain"], "DaemonSet", "gpu-pulse-exporter")["spec"]["template"]["metadata"]
    assert annotations["annotations"]["prometheus.io/port"] == "9400"


_FLAG = re.compile(r"\[?(--[a-z0-9][a-z0-9-]*)")


def _flags(args: list[str]) -> set[str]:
    """The flag names in manifest args (`--x=1`) or in --help words (`--x,`, `[--x`, `--x]`)."""
    return {m.group(1) for a in args if (m := _FLAG.match(a))}


def _help(module_call: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", module_call, "--help"], capture_output=True, text=True, timeout=60, cwd=REPO, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_exporter_flags_exist(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Every flag the manifests pass is one the real exporter's --help lists."""
    known = _flags(_help("import sys; from exporter.cli import main; sys.exit(main())").split())
    used: set[str] = set()
    for overlay in OVERLAYS:
        used |= _flags(_pod(rendered[overlay], "DaemonSet", "gpu-pulse-exporter")["containers"][0]["args"])
    assert used - known == set(), f"flags the exporter does not know: {sorted(used - known)}"


def test_adapter_flags_exist(rendered: dict[str, list[dict[str, Any]]]) -> None:
    known = _flags(_help("import sys; from adapter.cli import main; sys.exit(main())").split())
    used: set[str] = set()
    for overlay in OVERLAYS:
        used |= _flags(_pod(rendered[overlay], "Deployment", "gpu-pulse-adapter")["containers"][0]["args"])
    assert used - known == set(), f"flags the adapter does not know: {sorted(used - known)}"


@pytest.mark.parametrize("service", ["exporter", "adapter"])
def test_dockerfiles_are_multi_stage_slim_and_non_root(service: str) -> None:
    lines = [
        line.strip()
        for line in (DEPLOY / "docker" / f"{service}.Dockerfile").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    stages = [line for line in lines if line.startswith("FROM ")]
    assert len(stages) >= 2, "multi-stage"
    base = next(line for line in lines if line.startswith("ARG PYTHON_IMAGE="))
    assert "slim" in base and ":latest" not in base
    final = lines[lines.index(stages[-1]) :]
    assert any(line.startswith("COPY --from=build") for line in final)
    user = next(line for line in final if line.startswith("USER "))
    assert user.split()[1].split(":")[0] not in {"0", "root"}
    assert final[-1] == f'ENTRYPOINT ["gpu-pulse-{service}"]'
    # the entry point is a console script of the distribution the image installs
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert f'gpu-pulse-{service} = "{service}.cli:main"' in text


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
