"""The KEDA objects docs/hpa.md tells users to apply validate against KEDA's own CRD schema (the models
cloudcoil-models-keda generates from KEDA's CRDs, a test extra), and their external-scaler triggers are ones the
adapter accepts, addressed to where the chart and the manifests serve it."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import yaml

from adapter.keda.trigger import parse_trigger
from adapter.metrics_config import default_metrics_config, parse_metrics_config
from tests.deploy.rendering import DEPLOY
from tests.deploy.test_docs_manifests import HPA_DOC, _by_kind
from tests.deploy.test_docs_manifests import _documents as doc_blocks

KEDA_KINDS = ("ScaledObject", "ClusterTriggerAuthentication")
EXTERNAL = ("external", "external-push")


def _models() -> Any:
    try:
        from cloudcoil.models.keda import v1alpha1
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("cloudcoil-models-keda is required when CI is set (pip install -e '.[test]')")
        pytest.skip("cloudcoil-models-keda not installed (pip install -e '.[test]')")
    return v1alpha1


def _validate(document: dict[str, Any]) -> None:
    """Validated by KEDA's model of its kind, and nothing dropped on the way: a field KEDA does not know fails."""
    model = getattr(_models(), document["kind"])
    read = model.model_validate(document).model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert json.loads(json.dumps(read)) == document, f"KEDA's schema does not know all of {document}"


def _documents() -> list[dict[str, Any]]:
    return [d for kind in KEDA_KINDS for d in _by_kind(kind)]


def test_every_keda_object_validates_against_kedas_schema() -> None:
    documents = _documents()
    assert len(_by_kind("ScaledObject")) == 3 and len(_by_kind("ClusterTriggerAuthentication")) == 1
    for document in documents:
        _validate(document)


def test_a_misspelt_field_or_a_wrong_type_is_caught() -> None:
    """The referee is live."""
    scaled = next(s for s in _by_kind("ScaledObject") if s["spec"]["triggers"][0]["type"] == "external-push")
    misspelt = json.loads(json.dumps(scaled))
    misspelt["spec"]["minReplicaCont"] = misspelt["spec"].pop("minReplicaCount")
    with pytest.raises(AssertionError, match="does not know"):
        _validate(misspelt)
    typed = json.loads(json.dumps(scaled))
    typed["spec"]["triggers"][0]["metadata"]["target"] = 60  # KEDA's metadata is a map of strings
    with pytest.raises(ValueError, match="string"):
        _validate(typed)


def _service_names() -> list[str]:
    certificates = yaml.safe_load_all((DEPLOY / "components" / "cert-manager" / "certificates.yaml").read_text())
    serving = next(c for c in certificates if c["metadata"]["name"] == "gpu-pulse-adapter")
    return list(serving["spec"]["dnsNames"])


def test_external_scaler_triggers_are_ones_the_adapter_accepts_where_it_serves() -> None:
    component = yaml.safe_load((DEPLOY / "components" / "keda-external-scaler" / "kustomization.yaml").read_text())
    port = 9443
    assert f"--keda-listen=0.0.0.0:{port}" in json.dumps(component)
    chart = yaml.safe_load((DEPLOY / "helm" / "gpu-pulse" / "values.yaml").read_text())
    assert chart["keda"]["externalScaler"]["port"] == port
    pod_metrics = {m.name for m in default_metrics_config().metrics}
    demands = _demand_names()
    authentications = {a["metadata"]["name"]: a for a in _by_kind("ClusterTriggerAuthentication")}
    triggers = [t for s in _by_kind("ScaledObject") for t in s["spec"]["triggers"] if t["type"] in EXTERNAL]
    assert len(triggers) == 3
    for trigger in triggers:
        parsed = parse_trigger(trigger["metadata"])
        assert parsed.metric in (demands if parsed.of_demand else pod_metrics)
        host, _, served = trigger["metadata"]["scalerAddress"].rpartition(":")
        assert int(served) == port and host in _service_names(), "KEDA verifies this name against the certificate"
        assert "metricType" not in trigger, "AverageValue (the default) divides the sum by the target"
        reference = trigger["authenticationRef"]
        assert reference["kind"] == "ClusterTriggerAuthentication"
        secrets = authentications[reference["name"]]["spec"]["secretTargetRef"]
        # the adapter's CA, and KEDA's client certificate the chart's default asks for (kedaClientAuth)
        assert {(s["parameter"], s["key"]) for s in secrets} == {
            ("caCert", "ca.crt"),
            ("tlsClientCert", "tls.crt"),
            ("tlsClientKey", "tls.key"),
        }


def _demand_names() -> set[str]:
    """The demands the documented metrics file defines (docs/hpa.md's `demand:` block)."""
    blocks = [d for d in doc_blocks(HPA_DOC) if isinstance(d, dict) and "demand" in d]
    return {d.name for block in blocks for d in parse_metrics_config(yaml.safe_dump(block)).demand}


def test_the_scale_to_zero_examples() -> None:
    """Both roads with gpu-pulse alone: KEDA woken by gpu-pulse's demand trigger, the HPA by its External metric."""
    (to_zero,) = [s for s in _by_kind("ScaledObject") if s["spec"].get("minReplicaCount") == 0]
    kinds = [t["type"] for t in to_zero["spec"]["triggers"]]
    assert len(kinds) == 2 and set(kinds) <= set(EXTERNAL), "gpu-pulse's triggers alone"
    gpu, demand = (parse_trigger(t["metadata"]) for t in to_zero["spec"]["triggers"])
    assert float(gpu.activation_target) > 0 and not gpu.of_demand
    assert demand.of_demand and demand.metric in _demand_names(), "a demand trigger wakes it"
    (hpa,) = [h for h in _by_kind("HorizontalPodAutoscaler") if h["spec"]["minReplicas"] == 0]
    # HPAScaleToZero: minReplicas 0 needs an Object or External metric, and no other kind
    assert {m["type"] for m in hpa["spec"]["metrics"]} == {"External"}
    served = {m.name for m in default_metrics_config().external} | _demand_names()
    names = [m["external"]["metric"]["name"] for m in hpa["spec"]["metrics"]]
    assert all(name in served for name in names) and names[0] in _demand_names(), "a demand wakes it"
