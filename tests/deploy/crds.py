"""The custom resources gpu-pulse renders, validated against their projects' own CRD schemas: the Prometheus
Operator's ServiceMonitor and PrometheusRule (kube-prometheus-stack installs them) and cert-manager's Certificate and
Issuer, as the models cloudcoil-models-prometheus-operator and cloudcoil-models-cert-manager generate from the CRDs
(test extras). A field the CRD does not know is dropped by the model, so reading an object back must give it
unchanged; a wrong type or pattern fails the model. Beside them, tests/deploy/schemas.py narrows the fields gpu-pulse
may use."""

from __future__ import annotations

import json
import os
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest

from tests.deploy.rendering import CRD_KINDS
from tests.deploy.schemas import CERT_MANAGER_SCHEMAS, SERVICE_MONITOR


def _models() -> dict[str, Any]:
    try:
        from cloudcoil.models.cert_manager import v1 as cert_manager
        from cloudcoil.models.prometheus_operator import v1 as prometheus_operator
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("the CRD models are required when CI is set (pip install -e '.[test]')")
        pytest.skip("cloudcoil-models-prometheus-operator / -cert-manager not installed (pip install -e '.[test]')")
    return {
        "ServiceMonitor": prometheus_operator.ServiceMonitor,
        "PodMonitor": prometheus_operator.PodMonitor,
        "PrometheusRule": prometheus_operator.PrometheusRule,
        "Certificate": cert_manager.Certificate,
        "Issuer": cert_manager.Issuer,
    }


def validate_custom(obj: dict[str, Any]) -> None:
    """A custom resource against its CRD's model: nothing unknown, nothing of a wrong shape."""
    model = _models()[obj["kind"]]
    read = model.model_validate(obj).model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert json.loads(json.dumps(read)) == obj, f"{obj['kind']}/{obj['metadata']['name']}: fields its CRD does not know"


def validate(obj: dict[str, Any], version: str) -> None:
    """Any object gpu-pulse renders: built-in kinds by kubernetes-validate (strict) for the Kubernetes minor
    `version`, custom resources by their CRD's model and by what tests/deploy/schemas.py allows gpu-pulse."""
    if obj["kind"] in CRD_KINDS or obj["kind"] == "PrometheusRule":
        validate_custom(obj)
        if obj["kind"] == "ServiceMonitor":
            jsonschema.validate(obj, SERVICE_MONITOR)
        elif obj["kind"] in CERT_MANAGER_SCHEMAS:
            jsonschema.validate(obj, CERT_MANAGER_SCHEMAS[obj["kind"]])
        elif obj["kind"] == "PrometheusRule":
            assert obj["spec"]["groups"], "a PrometheusRule with rules"
    else:
        kubernetes_validate.validate(obj, version, strict=True)
