"""The Helm chart, proven with Helm's own engine (helm-python-sdk, offline): it lints strictly, renders under every
values set a user is likely to choose, every object validates, it holds the same invariants as the kustomize
manifests and renders the same objects for the same choices, its generated serving certificate is one the
kube-apiserver accepts, and values.schema.json refuses wrong values with a clear message."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.deploy.crds import validate
from tests.deploy.invariants import EXPORTER_NAMESPACE, check_all, restricted_violations
from tests.deploy.rendering import (
    CHART,
    REPO,
    find,
    helm_render,
    kustomize_with_components,
    one,
    require_helm,
)
from tests.deploy.schemas import VERSIONS
from tests.support.tools import require_tool

helm_python = require_helm()

# The values sets the tests render: what a user sets most, one choice at a time, and everything at once.
VALUES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "prometheus-dialect": {"exporter": {"dialect": "prometheus"}},
    "shared-gpus": {"sharedGpus": {"enabled": True}},
    "dra": {"dra": {"enabled": True}},
    "external-metrics": {"externalMetrics": {"enabled": True}},
    "cert-manager": {"certManager": {"enabled": True}},
    "mig": {"mig": {"monitorPrivileged": True}},
    "k0s": {"kubeletPath": "/var/lib/k0s/kubelet/pod-resources"},
    "gpu-operator-pause": {"gpuOperator": {"pauseProtocol": True}},
    "pause-label-off-as-in-0.1.0": {"gpuOperator": {"pauseProtocol": True, "deployLabel": ""}},
    "prometheus-operator": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "prometheus-source": {"adapter": {"source": "prometheus", "prometheusUrl": "http://prometheus-operated.mon:9090"}},
    "exporter-in-the-release-namespace": {"exporter": {"namespace": ""}},
    "exporter-auth-off": {"exporter": {"auth": {"enabled": False}}},
    "everything": {
        "exporter": {"dialect": "prometheus", "nodeSelector": {"gpu": "yes"}},
        "sharedGpus": {"enabled": True},
        "externalMetrics": {"enabled": True},
        "certManager": {"enabled": True},
        "mig": {"monitorPrivileged": True},
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "dashboards": {"label": "grafana_dashboard", "labelValue": "gpu"},
        "image": {"registry": "registry.example.com/team", "tag": "0.1.0-rc1"},
    },
}
NAMESPACE = "gpu-pulse"
HELM_ONLY_LABELS = {"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by",
                    "app.kubernetes.io/version"}  # fmt: skip


@pytest.fixture(scope="module")
def renders() -> dict[str, list[dict[str, Any]]]:
    return {name: helm_render(values) for name, values in VALUES.items()}


def _version() -> str:
    match = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.MULTILINE)
    assert match
    return match.group(1)


def test_chart_lints_strictly() -> None:
    report = helm_python.lint(str(CHART), strict=True, namespace=NAMESPACE, kube_version="v1.30.0")
    assert report["errors"] == [], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report["messages"]
    assert report["total_charts_linted"] == 1


@pytest.mark.parametrize("name", list(VALUES))
def test_lint_with_each_values_set(name: str) -> None:
    report = helm_python.lint(str(CHART), VALUES[name], strict=True, namespace=NAMESPACE)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report


def test_chart_versions_follow_the_package() -> None:
    with helm_python.Chart.load(str(CHART)) as chart:
        metadata = chart.metadata
    assert metadata["appVersion"] == _version()
    assert metadata["apiVersion"] == "v2"


@pytest.mark.parametrize("name", list(VALUES))
@pytest.mark.parametrize("version", VERSIONS)
def test_every_rendered_object_validates(renders: dict[str, list[dict[str, Any]]], name: str, version: str) -> None:
    objects = renders[name]
    for obj in objects:
        validate(obj, version)  # built-in kinds by kubernetes-validate, custom ones by their CRDs' models
        if obj["kind"] not in {"ClusterRole", "ClusterRoleBinding", "APIService", "Namespace"}:
            expected = "kube-system" if obj["kind"] == "RoleBinding" else NAMESPACE
            if obj["metadata"]["name"] == "gpu-pulse-exporter" and obj["kind"] != "ServiceMonitor":
                expected = _exporter_namespace(VALUES[name])  # its own, for the privileged Pod Security level
            assert obj["metadata"]["namespace"] == expected, f"{obj['kind']}/{obj['metadata']['name']}"
    keys = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(keys) == len(set(keys)), "no object twice"


def _exporter_namespace(values: dict[str, Any]) -> str:
    return values.get("exporter", {}).get("namespace", EXPORTER_NAMESPACE) or NAMESPACE


@pytest.mark.parametrize("name", list(VALUES))
def test_invariants_shared_with_kustomize(renders: dict[str, list[dict[str, Any]]], name: str) -> None:
    auth = VALUES[name].get("exporter", {}).get("auth", {}).get("enabled", True)
    check_all(renders[name], NAMESPACE, _exporter_namespace(VALUES[name]), exporter_auth=auth)


def test_without_exporter_auth_nothing_of_it_is_rendered(renders: dict[str, list[dict[str, Any]]]) -> None:
    objects = renders["exporter-auth-off"]
    exporter = one(objects, "DaemonSet", "gpu-pulse-exporter")["spec"]["template"]["spec"]
    adapter = one(objects, "Deployment", "gpu-pulse-adapter")["spec"]["template"]["spec"]
    assert not [a for a in exporter["containers"][0]["args"] if a.startswith("--auth-")]
    assert exporter["automountServiceAccountToken"] is False, "no API token the exporter does not use"
    assert not find(objects, "ClusterRole", "gpu-pulse-exporter-tokenreview")
    assert not [a for a in adapter["containers"][0]["args"] if a.startswith("--exporter-token-file")]
    assert "exporter-token" not in {v["name"] for v in adapter["volumes"]}


def test_the_exporter_namespace_is_made_privileged_only_when_it_is_its_own(
    renders: dict[str, list[dict[str, Any]]],
) -> None:
    (namespace,) = find(renders["defaults"], "Namespace")
    assert namespace["metadata"]["name"] == EXPORTER_NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert not find(renders["exporter-in-the-release-namespace"], "Namespace"), "Helm's namespace is the user's"
    assert not find(helm_render({"exporter": {"createNamespace": False}}), "Namespace")
    exporter = one(renders["exporter-in-the-release-namespace"], "DaemonSet", "gpu-pulse-exporter")
    assert exporter["metadata"]["namespace"] == NAMESPACE


def test_the_restricted_check_is_a_live_referee(renders: dict[str, list[dict[str, Any]]]) -> None:
    """The check that the adapter runs under restricted finds what restricted refuses."""
    exporter = one(renders["defaults"], "DaemonSet", "gpu-pulse-exporter")["spec"]["template"]["spec"]
    problems = restricted_violations(exporter)
    assert "volume pod-resources" in problems and any("may run as root" in p for p in problems)
    adapter = json.loads(json.dumps(one(renders["defaults"], "Deployment", "gpu-pulse-adapter")))
    pod = adapter["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    pod["containers"][0]["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]
    pod["securityContext"]["runAsUser"] = 0
    assert len(restricted_violations(pod)) == 2


@pytest.mark.parametrize("name", list(VALUES))
def test_the_values_a_user_sets_take_effect(renders: dict[str, list[dict[str, Any]]], name: str) -> None:
    values = VALUES[name]
    objects = renders[name]
    exporter = one(objects, "DaemonSet", "gpu-pulse-exporter")["spec"]["template"]["spec"]
    adapter = one(objects, "Deployment", "gpu-pulse-adapter")["spec"]["template"]["spec"]
    args = exporter["containers"][0]["args"]
    dialect = values.get("exporter", {}).get("dialect", "dcgm")
    assert f"--dialect={dialect}" in args
    shared = values.get("sharedGpus", {}).get("enabled", False)
    kubernetes = shared or values.get("dra", {}).get("enabled", False)  # the watches of the node's pods and slices
    assert bool(find(objects, "ClusterRole", "gpu-pulse-exporter")) == kubernetes
    auth = values.get("exporter", {}).get("auth", {}).get("enabled", True)
    assert ("--auth-allowed-users=system:serviceaccount:gpu-pulse:gpu-pulse-adapter" in args) == auth, "on by default"
    assert ("--kubernetes" in args) == kubernetes
    assert exporter["automountServiceAccountToken"] == (auth or kubernetes)
    assert exporter.get("hostPID", False) == shared
    volumes = {v["name"]: v for v in exporter["volumes"]}
    kubelet = values.get("kubeletPath", "/var/lib/kubelet/pod-resources")
    assert volumes["pod-resources"]["hostPath"] == {"path": kubelet, "type": "Directory"}
    mounts = {m["name"]: m["mountPath"] for m in exporter["containers"][0]["volumeMounts"]}
    assert mounts["pod-resources"] == "/var/lib/kubelet/pod-resources", "only the host side moves"
    external = values.get("externalMetrics", {}).get("enabled", False)
    apis = {a["metadata"]["name"] for a in find(objects, "APIService")}
    assert ("v1beta1.external.metrics.k8s.io" in apis) == external, "the external metrics API is opt-in"
    cert_manager = values.get("certManager", {}).get("enabled", False)
    assert bool(find(objects, "Certificate")) == cert_manager
    assert bool(find(objects, "Secret", "gpu-pulse-adapter-tls")) != cert_manager
    operator = values.get("serviceMonitor", {}).get("enabled", False)
    assert len(find(objects, "ServiceMonitor")) == (2 if operator else 0)
    rules = find(objects, "PrometheusRule")
    assert len(rules) == (1 if values.get("prometheusRule", {}).get("enabled", False) else 0)
    for rule in rules:
        assert rule["metadata"]["labels"]["gpu-pulse.dev/dialect"] == dialect
    adapter_args = adapter["containers"][0]["args"]
    source = values.get("adapter", {}).get("source", "direct")
    assert f"--source={source}" in adapter_args
    if source == "prometheus":
        assert f"--prometheus-url={values['adapter']['prometheusUrl']}" in adapter_args
        assert not any(a.startswith("--exporter-") for a in adapter_args)
    else:
        assert f"--exporter-namespace={_exporter_namespace(values)}" in adapter_args
    registry = values.get("image", {}).get("registry", "")
    tag = values.get("image", {}).get("tag", _version())
    for pod, image in ((exporter, "gpu-pulse-exporter"), (adapter, "gpu-pulse-adapter")):
        assert pod["containers"][0]["image"] == f"{registry}/{image}:{tag}".lstrip("/")
    # the GPU Operator pauses its GPU clients by a node label before a driver upgrade or a MIG mode change: opt-in
    operator = values.get("gpuOperator", {})
    pause_label = operator.get("deployLabel", "nvidia.com/gpu.deploy.client") if operator.get("pauseProtocol") else ""
    node_selector = values.get("exporter", {}).get("nodeSelector", {}) | ({pause_label: "true"} if pause_label else {})
    assert exporter.get("nodeSelector", {}) == node_selector
    label = values.get("dashboards", {}).get("labelValue", "1")
    dashboards = [m for m in find(objects, "ConfigMap") if m["metadata"]["name"].endswith("-dashboard")]
    assert {m["metadata"]["labels"]["grafana_dashboard"] for m in dashboards} == {label}
    for labelled in find(objects, "ServiceMonitor") + rules:
        assert labelled["metadata"]["labels"].items() >= values["serviceMonitor"].get("labels", {}).items()


def test_dashboards_are_the_committed_ones_with_the_node_board_of_the_dialect(
    renders: dict[str, list[dict[str, Any]]],
) -> None:
    for name, dialect, other in (("defaults", "dcgm", "prometheus"), ("prometheus-dialect", "prometheus", "dcgm")):
        maps = {m["metadata"]["name"]: m for m in find(renders[name], "ConfigMap")}
        committed = {p.stem for p in (REPO / "dashboards" / "dist").glob("*.json")} - {f"gpu-pulse-node-{other}"}
        assert set(maps) == {f"{stem}-dashboard" for stem in committed}
        assert f"gpu-pulse-node-{dialect}-dashboard" in maps
        for stem in committed:
            (key, text), *rest = maps[f"{stem}-dashboard"]["data"].items()
            assert not rest and key == f"{stem}.json"
            assert text == (REPO / "dashboards" / "dist" / f"{stem}.json").read_text(encoding="utf-8")


@pytest.mark.parametrize("dialect", ["dcgm", "prometheus"])
def test_prometheus_rule_holds_the_committed_rules(dialect: str, tmp_path: Path) -> None:
    objects = helm_render({"exporter": {"dialect": dialect}, "prometheusRule": {"enabled": True}})
    rule = one(objects, "PrometheusRule", "gpu-pulse")
    committed = yaml.safe_load((REPO / "rules" / "dist" / dialect / "gpu-pulse.rules.yaml").read_text())
    assert rule["spec"] == committed
    promtool = require_tool("promtool")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]), encoding="utf-8")
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_runbook_url_replaces_the_base_of_every_alerts_link_and_keeps_its_anchor() -> None:
    base = "https://git.example.com/team/gpu-pulse/blob/v0.1.0/docs/runbooks.md"
    objects = helm_render({"prometheusRule": {"enabled": True, "runbookUrl": base}})
    spec = one(objects, "PrometheusRule", "gpu-pulse")["spec"]
    committed = yaml.safe_load((REPO / "rules" / "dist" / "dcgm" / "gpu-pulse.rules.yaml").read_text())
    alerts = 0
    for group, original in zip(spec["groups"], committed["groups"], strict=True):
        for rule, before in zip(group["rules"], original["rules"], strict=True):
            if "alert" in rule:
                alerts += 1
                assert rule["annotations"]["runbook_url"] == f"{base}#{rule['alert'].lower()}"
                rule["annotations"]["runbook_url"] = before["annotations"]["runbook_url"]
            assert rule == before, "nothing else changes"
    assert alerts >= 15


def test_chart_files_are_copies_of_the_generated_rules_and_dashboards() -> None:
    """Helm reads only inside the chart: files/ holds copies, kept current by deploy/helm/sync-files.sh."""
    files = CHART / "files"
    expected = {f"rules/{d.name}.rules.yaml": d / "gpu-pulse.rules.yaml" for d in (REPO / "rules" / "dist").iterdir()}
    expected |= {f"dashboards/{p.name}": p for p in (REPO / "dashboards" / "dist").glob("*.json")}
    present = {str(p.relative_to(files)) for p in files.rglob("*") if p.is_file()}
    assert present == set(expected), "run deploy/helm/sync-files.sh"
    stale = [name for name, source in expected.items() if (files / name).read_bytes() != source.read_bytes()]
    assert stale == [], f"stale copies in the chart, run deploy/helm/sync-files.sh: {stale}"


# -- the serving certificate the chart generates -------------------------------------------------------------------


def _tls(objects: list[dict[str, Any]]) -> tuple[x509.Certificate, x509.Certificate, bytes]:
    secret = one(objects, "Secret", "gpu-pulse-adapter-tls")
    assert secret["type"] == "kubernetes.io/tls"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    return (
        x509.load_pem_x509_certificate(data["ca.crt"]),
        x509.load_pem_x509_certificate(data["tls.crt"]),
        data["tls.key"],
    )


@pytest.mark.parametrize("namespace", ["gpu-pulse", "monitoring"])
def test_generated_certificate_is_one_the_kube_apiserver_accepts(namespace: str) -> None:
    objects = helm_render({"externalMetrics": {"enabled": True}}, namespace=namespace)
    ca, cert, key_pem = _tls(objects)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert names == [f"gpu-pulse-adapter.{namespace}.svc", f"gpu-pulse-adapter.{namespace}.svc.cluster.local"]
    cert.verify_directly_issued_by(ca)  # raises unless the CA signed it
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()  # type: ignore[union-attr]
    now = datetime.now(UTC)
    assert cert.not_valid_before_utc <= now + timedelta(minutes=5)
    assert abs(cert.not_valid_after_utc - (now + timedelta(days=3650))) < timedelta(days=1)
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    apis = find(objects, "APIService")
    assert len(apis) == 3
    for api in apis:
        assert base64.b64decode(api["spec"]["caBundle"]) == ca_pem, "every APIService trusts the CA that signed it"


def test_rotation_regenerates_the_pair_and_rolls_the_adapter() -> None:
    """Without its Secret (deleted to rotate; offline, lookup finds none), each render makes a new CA and certificate,
    and the Deployment's checksum changes with them, so an upgrade rolls the adapter onto the new pair."""
    first, second = helm_render({}), helm_render({})
    checksums = []
    for objects in (first, second):
        _, cert, _ = _tls(objects)
        annotations = one(objects, "Deployment", "gpu-pulse-adapter")["spec"]["template"]["metadata"]["annotations"]
        pem = cert.public_bytes(serialization.Encoding.PEM)
        assert annotations["checksum/serving-certificate"] == hashlib.sha256(pem).hexdigest()
        checksums.append(annotations["checksum/serving-certificate"])
    assert checksums[0] != checksums[1]
    assert _tls(first)[0].fingerprint(_tls(first)[0].signature_hash_algorithm) != _tls(second)[0].fingerprint(
        _tls(second)[0].signature_hash_algorithm  # type: ignore[arg-type]
    )


def test_validity_is_a_value() -> None:
    _, cert, _ = _tls(helm_render({"adapter": {"tls": {"validityDays": 400}}}))
    assert abs(cert.not_valid_after_utc - (datetime.now(UTC) + timedelta(days=400))) < timedelta(days=1)


def test_cert_manager_issues_the_certificate_instead() -> None:
    objects = helm_render({"certManager": {"enabled": True, "duration": "720h", "renewBefore": "240h"}})
    serving = one(objects, "Certificate", "gpu-pulse-adapter")["spec"]
    assert serving["dnsNames"] == ["gpu-pulse-adapter.gpu-pulse.svc", "gpu-pulse-adapter.gpu-pulse.svc.cluster.local"]
    assert (serving["duration"], serving["renewBefore"]) == ("720h", "240h")
    assert not find(objects, "Secret")
    for api in find(objects, "APIService"):
        assert "caBundle" not in api["spec"]
    annotations = one(objects, "Deployment", "gpu-pulse-adapter")["spec"]["template"]["metadata"].get("annotations")
    assert not annotations, "no checksum of a certificate the chart does not hold"


# -- values.schema.json --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"exporter": {"dialect": "nvidia"}}, ["dialect", "dcgm", "prometheus"]),
        ({"adapter": {"source": "thanos"}}, ["source", "direct", "prometheus"]),
        ({"adapter": {"source": "prometheus"}}, ["prometheusUrl"]),
        ({"adapter": {"source": "prometheus", "prometheusUrl": "prometheus:9090"}}, ["prometheusUrl"]),
        ({"sharedGpus": {"enabled": "yes"}}, ["enabled", "boolean"]),
        ({"sharedGPUs": {"enabled": True}}, ["sharedGPUs"]),
        ({"mig": {"monitorPrivileged": 1}}, ["monitorPrivileged"]),
        ({"serviceMonitor": {"interval": "15 seconds"}}, ["interval"]),
        ({"exporter": {"extraArgs": ["dialect=dcgm"]}}, ["extraArgs"]),
        ({"kubeletPath": "var/lib/kubelet/pod-resources"}, ["kubeletPath"]),
        ({"kubeletPath": "/var/lib/k0s/kubelet/pod-resources/"}, ["kubeletPath"]),
        ({"gpuOperator": {"deployLabel": "nvidia.com/gpu deploy"}}, ["deployLabel"]),
        ({"gpuOperator": {"deployLabel": True}}, ["deployLabel", "string"]),
        ({"gpuOperator": {"pauseProtocol": "true"}}, ["pauseProtocol", "boolean"]),
        ({"prometheusRule": {"runbookUrl": "docs/runbooks.md"}}, ["runbookUrl"]),
        ({"prometheusRule": {"runbookUrl": "https://example.com/runbooks.md#top"}}, ["runbookUrl"]),
    ],
)
def test_schema_refuses_a_wrong_value_with_a_clear_message(values: dict[str, Any], names: list[str]) -> None:
    with helm_python.Chart.load(str(CHART)) as chart:
        with pytest.raises(helm_python.HelmValuesError) as refused:
            chart.validate_schema(chart.merge_values(values))
        with pytest.raises(helm_python.HelmError):
            chart.render(values, name="gpu-pulse", namespace=NAMESPACE, is_install=True)
    message = str(refused.value)
    for name in names:
        assert name in message, message


def test_schema_accepts_the_defaults_and_every_values_set() -> None:
    with helm_python.Chart.load(str(CHART)) as chart:
        for values in VALUES.values():
            chart.validate_schema(chart.merge_values(values))
        schema = chart.schema
    assert schema is not None
    loaded = json.loads(schema) if isinstance(schema, str | bytes) else schema
    assert loaded["properties"]["exporter"]["properties"]["dialect"]["enum"] == ["dcgm", "prometheus"]


# -- chart and kustomize render the same objects for the same choices ----------------------------------------------


def _labels_apart(obj: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """An object without its labels and checksum annotations (the chart adds its own labels and a certificate
    checksum), and the labels taken off (object, then pod template)."""
    obj = json.loads(json.dumps(obj))
    labels = []
    for metadata in (obj["metadata"], obj.get("spec", {}).get("template", {}).get("metadata")):
        if metadata is None:
            continue
        labels.append(metadata.pop("labels", {}))
        annotations = {k: v for k, v in metadata.pop("annotations", {}).items() if not k.startswith("checksum/")}
        if annotations:
            metadata["annotations"] = annotations
    return obj, labels


# What the prometheus-operator overlay chooses: cert-manager, ServiceMonitors, the PrometheusRule
OPERATOR = {"certManager": {"enabled": True}, "serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
# Objects only one side renders, and why (docs/install.md, "Chart or kustomize"):
ONLY_KUSTOMIZE = {
    ("Namespace", "gpu-pulse"),  # Helm installs into a namespace it is given (--create-namespace), labelled by hand
    ("ConfigMap", "gpu-pulse-node-prometheus-dashboard"),  # the chart ships the node dashboard of its dialect only
}


@pytest.mark.parametrize(
    ("values", "overlay", "components"),
    [
        (OPERATOR, "overlays/prometheus-operator", ()),
        (
            OPERATOR | {"sharedGpus": {"enabled": True}, "externalMetrics": {"enabled": True},
                        "mig": {"monitorPrivileged": True}},
            "overlays/shared-gpus",
            ("external-metrics", "mig-monitor"),
        ),
        (OPERATOR | {"gpuOperator": {"pauseProtocol": True}}, "overlays/prometheus-operator", ("gpu-operator-pause",)),
        (OPERATOR | {"gpuOperator": {"deployLabel": ""}}, "overlays/prometheus-operator", ("without-gpu-operator",)),
    ],
    ids=["prometheus-operator", "shared-gpus+external-metrics+mig-monitor", "gpu-operator-pause",
         "without-gpu-operator (0.1.0's, now no change)"],
)  # fmt: skip
def test_chart_and_kustomize_render_the_same_objects(
    kubectl: str, tmp_path: Path, values: dict[str, Any], overlay: str, components: tuple[str, ...]
) -> None:
    chart = {(o["kind"], o["metadata"]["name"]): _labels_apart(o) for o in helm_render(values)}
    manifests = kustomize_with_components(kubectl, tmp_path, overlay, *components)
    kustomized = {(o["kind"], o["metadata"]["name"]): _labels_apart(o) for o in manifests}
    assert set(chart) == set(kustomized) - ONLY_KUSTOMIZE
    for key, (obj, labels) in chart.items():
        expected, expected_labels = kustomized[key]
        assert obj == expected, f"{key}: the chart renders {obj}, kustomize {expected}"
        for have, want in zip(labels, expected_labels, strict=True):
            assert have.items() >= want.items(), f"{key}: the chart's labels {have} lack some of {want}"


def test_notes_tell_what_to_run_next() -> None:
    path = "gpu-pulse/templates/NOTES.txt"
    with helm_python.Chart.load(str(CHART)) as chart:
        notes = chart.render({}, name="gpu-pulse", namespace=NAMESPACE, is_install=True)[path]
        external = chart.render({"externalMetrics": {"enabled": True}}, name="gpu-pulse", namespace=NAMESPACE)[path]
    assert "kubectl get apiservice v1beta2.custom.metrics.k8s.io" in notes
    assert "kubectl -n gpu-pulse get pods" in notes and "docs/hpa.md" in notes
    assert "externalMetrics.enabled=true" in notes and "externalMetrics.enabled=true" not in external
    assert "v1beta1.external.metrics.k8s.io" in external
