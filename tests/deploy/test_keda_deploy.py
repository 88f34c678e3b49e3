"""KEDA's external scaler in the chart (`keda.externalScaler.enabled`) and in kustomize
(`components/keda-external-scaler`): the adapter serves it on a port of its Service, only KEDA's operator may call
that port, both render the same objects, and every object validates."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.deploy.invariants import check_all
from tests.deploy.rendering import CHART, CRD_KINDS, find, helm_render, kustomize_with_components, one, require_helm
from tests.deploy.schemas import VERSIONS
from tests.deploy.test_chart import ONLY_KUSTOMIZE, OPERATOR, _labels_apart

helm_python = require_helm()
ENABLED = {"keda": {"externalScaler": {"enabled": True}}}


def _adapter(objects: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = one(objects, "Deployment", "gpu-pulse-adapter")["spec"]["template"]["spec"][
        "containers"
    ][0]
    return container


def _check_served(objects: list[dict[str, Any]], port: int, tls: bool) -> None:
    for obj in objects:
        if obj["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(obj, VERSIONS[-1], strict=True)
    check_all(objects)  # among the invariants: every flag is one `gpu-pulse-adapter --help` lists
    container = _adapter(objects)
    assert f"--keda-listen=0.0.0.0:{port}" in container["args"]
    assert ("--keda-tls" in container["args"]) is tls
    assert {"name": "keda", "containerPort": port, "protocol": "TCP"} in container["ports"]
    service = one(objects, "Service", "gpu-pulse-adapter")
    assert {"name": "keda", "port": port, "targetPort": "keda", "protocol": "TCP"} in service["spec"]["ports"]
    pods = one(objects, "Deployment", "gpu-pulse-adapter")["spec"]["template"]["metadata"]["labels"]
    policies = [
        p for p in find(objects, "NetworkPolicy") if p["spec"]["podSelector"]["matchLabels"].items() <= pods.items()
    ]
    opened = {p["port"]: rule.get("from") for policy in policies for rule in policy["spec"]["ingress"]
              for p in rule["ports"]}  # fmt: skip
    assert set(opened) == {p["name"] for p in container["ports"]}, "the policies open exactly the served ports"
    (source,) = opened["keda"]
    assert source == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}},
        "podSelector": {"matchLabels": {"app": "keda-operator"}},
    }, "only KEDA's operator pods may call the external scaler"


def test_the_chart_serves_the_external_scaler_when_enabled() -> None:
    _check_served(helm_render(ENABLED), 9443, tls=True)
    plain = helm_render(
        {"keda": {"externalScaler": {"enabled": True, "port": 9999, "tls": False}}, "kedaClientAuth": {"mode": "none"}}
    )
    _check_served(plain, 9999, tls=False)


def test_off_by_default() -> None:
    objects = helm_render({})
    container = _adapter(objects)
    assert not any(a.startswith("--keda") for a in container["args"])
    assert [p["name"] for p in container["ports"]] == ["https"]
    assert not find(objects, "NetworkPolicy", "gpu-pulse-adapter-keda")


def test_the_operators_namespace_and_labels_are_values() -> None:
    labels = {"app": None, "app.kubernetes.io/name": "keda-operator"}  # null drops the default's label (Helm merges)
    values = {
        "keda": {"externalScaler": {"enabled": True, "operatorNamespace": "autoscaling", "operatorPodLabels": labels}}
    }
    (rule,) = one(helm_render(values), "NetworkPolicy", "gpu-pulse-adapter-keda")["spec"]["ingress"]
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "autoscaling"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "keda-operator"}},
        }
    ]


@pytest.mark.parametrize(
    ("values", "name"),
    [
        ({"keda": {"externalScaler": {"enabled": "yes"}}}, "enabled"),
        ({"keda": {"externalScaler": {"port": 0}}}, "port"),
        ({"keda": {"externalScaler": {"operatorNamespace": "KEDA"}}}, "operatorNamespace"),
        ({"keda": {"scaler": {}}}, "scaler"),
    ],
)
def test_the_schema_refuses_wrong_values(values: dict[str, Any], name: str) -> None:
    with helm_python.Chart.load(str(CHART)) as chart, pytest.raises(helm_python.HelmValuesError) as refused:
        chart.validate_schema(chart.merge_values(values))
    assert name in str(refused.value)


def test_the_component_serves_it_as_the_chart_does(kubectl: str, tmp_path: Path) -> None:
    manifests = kustomize_with_components(
        kubectl, tmp_path, "overlays/prometheus-operator", "keda-external-scaler", "keda-client-certificate"
    )
    _check_served(manifests, 9443, tls=True)
    chart = {(o["kind"], o["metadata"]["name"]): _labels_apart(o) for o in helm_render(OPERATOR | ENABLED)}
    kustomized = {(o["kind"], o["metadata"]["name"]): _labels_apart(o) for o in manifests}
    assert set(chart) == set(kustomized) - ONLY_KUSTOMIZE
    for key, (obj, _) in chart.items():
        assert obj == kustomized[key][0], f"{key}: the chart renders {obj}, kustomize {kustomized[key][0]}"


def test_notes_tell_where_keda_calls() -> None:
    path = "gpu-pulse/templates/NOTES.txt"
    with helm_python.Chart.load(str(CHART)) as chart:
        enabled = chart.render(ENABLED, name="gpu-pulse", namespace="gpu-pulse", is_install=True)[path]
        disabled = chart.render({}, name="gpu-pulse", namespace="gpu-pulse", is_install=True)[path]
        anyone = chart.render(
            ENABLED | {"kedaClientAuth": {"mode": "none"}}, name="gpu-pulse", namespace="gpu-pulse", is_install=True
        )[path]
    assert "gpu-pulse-adapter.gpu-pulse.svc:9443" in enabled and "caCert" in enabled
    assert "app=keda-operator" in enabled and "external scaler" not in disabled
    assert "tlsClientCert" in enabled and "gpu-pulse-keda-client" in enabled and "gpu-pulse-keda)" in enabled
    assert "kedaClientAuth.mode none" in anyone and "tlsClientCert" not in anyone


def _client_ca_arg(objects: list[dict[str, Any]]) -> str | None:
    found = [a for a in _adapter(objects)["args"] if a.startswith("--keda-client-ca-file=")]
    return found[0].split("=", 1)[1] if found else None


def _client_ca_volume(objects: list[dict[str, Any]]) -> dict[str, Any] | None:
    volumes = one(objects, "Deployment", "gpu-pulse-adapter")["spec"]["template"]["spec"]["volumes"]
    found = [v["secret"] for v in volumes if v["name"] == "keda-client-ca"]
    return found[0] if found else None


def test_keda_callers_present_a_certificate_the_chart_issues_by_default() -> None:
    """Issue 42, item 4: the chart's default asks KEDA for a client certificate, issues it, and grants its user
    what the HPA reads, in every namespace."""
    objects = helm_render(ENABLED)
    _check_served(objects, 9443, tls=True)
    assert _client_ca_arg(objects) == "/var/run/gpu-pulse-adapter/keda-client-ca/ca.crt"
    assert _client_ca_volume(objects) == {
        "secretName": "gpu-pulse-keda-client",
        "defaultMode": 0o440,
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    secret = one(objects, "Secret", "gpu-pulse-keda-client")
    data = {key: base64.b64decode(value) for key, value in secret["data"].items()}
    ca, client = x509.load_pem_x509_certificate(data["ca.crt"]), x509.load_pem_x509_certificate(data["tls.crt"])
    client.verify_directly_issued_by(ca)
    assert client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "gpu-pulse-keda"
    usages = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usages
    assert serialization.load_pem_private_key(data["tls.key"], None).public_key() == client.public_key()
    role = one(objects, "ClusterRole", "gpu-pulse-keda-scaler")
    assert role["rules"] == [
        {"apiGroups": ["custom.metrics.k8s.io"], "resources": ["*"], "verbs": ["get"]},
        {"apiGroups": ["external.metrics.k8s.io"], "resources": ["*"], "verbs": ["get"]},  # demand triggers
    ]
    binding = one(objects, "ClusterRoleBinding", "gpu-pulse-keda-scaler")
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "gpu-pulse-keda"}]


def test_keda_client_certificate_from_cert_manager_or_a_ca_of_yours() -> None:
    managed = helm_render(OPERATOR | ENABLED | {"kedaClientAuth": {"user": "keda-prod"}})
    _check_served(managed, 9443, tls=True)
    certificate = one(managed, "Certificate", "gpu-pulse-keda-client")["spec"]
    assert certificate["commonName"] == "keda-prod" and certificate["secretName"] == "gpu-pulse-keda-client"
    assert (
        certificate["issuerRef"] == {"kind": "Issuer", "name": "gpu-pulse-ca"}
        and "client auth" in certificate["usages"]
    )
    assert not find(managed, "Secret", "gpu-pulse-keda-client")
    own = helm_render(
        ENABLED | {"kedaClientAuth": {"clientCA": {"secretName": "corp-ca", "key": "bundle.pem"}, "clusterWide": False}}
    )
    _check_served(own, 9443, tls=True)
    assert _client_ca_arg(own) == "/var/run/gpu-pulse-adapter/keda-client-ca/bundle.pem"
    assert _client_ca_volume(own) == {
        "secretName": "corp-ca",
        "defaultMode": 0o440,
        "items": [{"key": "bundle.pem", "path": "bundle.pem"}],
    }
    assert not find(own, "Secret", "gpu-pulse-keda-client") and not find(own, "Certificate", "gpu-pulse-keda-client")
    assert find(own, "ClusterRole", "gpu-pulse-keda-scaler")  # bound per namespace by the user (clusterWide: false)
    assert not find(own, "ClusterRoleBinding", "gpu-pulse-keda-scaler")


def test_an_unauthenticated_keda_port_is_an_explicit_value() -> None:
    for tls in (True, False):
        values = {"keda": {"externalScaler": {"enabled": True, "tls": tls}}, "kedaClientAuth": {"mode": "none"}}
        objects = helm_render(values)
        _check_served(objects, 9443, tls=tls)
        assert _client_ca_arg(objects) is None and _client_ca_volume(objects) is None
        assert not find(objects, "ClusterRole", "gpu-pulse-keda-scaler")
        assert not find(objects, "Secret", "gpu-pulse-keda-client")
    with pytest.raises(helm_python.HelmRenderError) as refused:
        helm_render({"keda": {"externalScaler": {"enabled": True, "tls": False}}})
    assert "kedaClientAuth.mode certificate needs keda.externalScaler.tls" in str(refused.value)
    off = helm_render({})  # the scaler off: nothing of its callers
    assert _client_ca_arg(off) is None and not find(off, "ClusterRole", "gpu-pulse-keda-scaler")


@pytest.mark.parametrize(
    ("values", "name"),
    [
        ({"kedaClientAuth": {"mode": "mtls"}}, "mode"),
        ({"kedaClientAuth": {"user": ""}}, "user"),
        ({"kedaClientAuth": {"clientCA": {"secretName": "Corp CA"}}}, "secretName"),
        ({"kedaClientAuth": {"token": "x"}}, "token"),
    ],
)
def test_the_schema_refuses_wrong_client_auth_values(values: dict[str, Any], name: str) -> None:
    with helm_python.Chart.load(str(CHART)) as chart, pytest.raises(helm_python.HelmValuesError) as refused:
        chart.validate_schema(chart.merge_values(values))
    assert name in str(refused.value)
