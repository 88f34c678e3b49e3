"""KEDA's external scaler in the chart (`keda.externalScaler.enabled`) and in kustomize
(`components/keda-external-scaler`): the adapter serves it on a port of its Service, only KEDA's operator may call
that port, both render the same objects, and every object validates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

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
    plain = helm_render({"keda": {"externalScaler": {"enabled": True, "port": 9999, "tls": False}}})
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
    manifests = kustomize_with_components(kubectl, tmp_path, "overlays/prometheus-operator", "keda-external-scaler")
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
    assert "gpu-pulse-adapter.gpu-pulse.svc:9443" in enabled and "caCert" in enabled
    assert "app=keda-operator" in enabled and "external scaler" not in disabled
