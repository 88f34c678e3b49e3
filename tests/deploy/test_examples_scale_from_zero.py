"""deploy/examples/llm-scale-from-zero, the manifests docs/hpa.md points to for vLLM behind the inference gateway:
each validates (built-in kinds by kubernetes-validate, strict; the ScaledObject by KEDA's own schema; the InferencePool
by the fields of the inference extension's v1 API), and they fit together: the adapter serves every metric the
ScaledObject and the HPA ask for, reads the pool's endpoint picker where the manifests put it, and may read it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml

from adapter.demand.config import GIE_QUEUE
from adapter.keda.trigger import parse_trigger
from adapter.metrics_config import MetricsConfig, parse_metrics_config
from tests.deploy.rendering import DEPLOY
from tests.deploy.schemas import VERSIONS
from tests.deploy.test_docs_keda import _validate as validate_keda

EXAMPLES = DEPLOY / "examples" / "llm-scale-from-zero"
CHART = DEPLOY / "helm" / "gpu-pulse"


def _objects(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text(encoding="utf-8")) if d]


def _one(name: str, kind: str) -> dict[str, Any]:
    (found,) = [d for d in _objects(name) if d["kind"] == kind]
    return found


def _closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties, "required": list(required)}


_PORT = _closed({"number": {"type": "integer", "minimum": 1, "maximum": 65535}}, ("number",))
# the InferencePool's spec as gateway-api-inference-extension release-1.3 api/v1/inferencepool_types.go declares it:
# selector (matchLabels only), targetPorts [{number}], endpointPickerRef {group, kind, name, port {number},
# failureMode}
INFERENCE_POOL = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "inference.networking.k8s.io/v1"},
        "metadata": {"type": "object", "required": ["name", "namespace"]},
        "spec": _closed(
            {
                "selector": _closed({"matchLabels": {"type": "object"}}, ("matchLabels",)),
                "targetPorts": {"type": "array", "minItems": 1, "maxItems": 8, "items": _PORT},
                "endpointPickerRef": _closed(
                    {
                        "group": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string"},
                        "port": _PORT,
                        "failureMode": {"enum": ["FailOpen", "FailClose"]},
                    },
                    ("name",),
                ),
            },
            ("selector", "targetPorts", "endpointPickerRef"),
        ),
    },
}


def _values() -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / "values.yaml").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _config() -> MetricsConfig:
    return parse_metrics_config(yaml.safe_dump(_values()["adapter"]["config"]), "values.yaml adapter.config")


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(base)
    for key, value in over.items():
        result[key] = (
            _merged(result[key], value) if isinstance(value, dict) and isinstance(result.get(key), dict) else value
        )
    return result


def test_the_values_are_the_charts_and_the_adapter_accepts_its_metrics() -> None:
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    schema = yaml.safe_load((CHART / "values.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft7Validator(schema).validate(_merged(chart_values, _values()))  # helm reads draft-07 here
    config = _config()
    (demand,) = config.demand
    assert demand.metric_names == (GIE_QUEUE,)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_built_in_objects_validate(version: str) -> None:
    for name in ("vllm.yaml", "hpa.yaml"):
        for document in _objects(name):
            if document["kind"] != "InferencePool":
                kubernetes_validate.validate(document, version, strict=True)


def test_the_pool_selects_the_deployment_and_its_picker_is_what_the_adapter_reads() -> None:
    pool = _one("vllm.yaml", "InferencePool")
    jsonschema.validate(pool, INFERENCE_POOL)
    deployment = _one("vllm.yaml", "Deployment")
    template = deployment["spec"]["template"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    ports = {p["containerPort"] for c in template["spec"]["containers"] for p in c["ports"]}
    assert {p["number"] for p in pool["spec"]["targetPorts"]} <= ports
    (demand,) = _config().demand
    namespace = pool["metadata"]["namespace"]
    # the inferencepool chart's Service for the picker: <release>-epp, metrics port 9090 (config/charts/inferencepool)
    assert demand.url == f"http://{pool['spec']['endpointPickerRef']['name']}.{namespace}.svc:9090/metrics"
    assert demand.namespace == namespace and demand.matchers == {"inference_pool": pool["metadata"]["name"]}
    binding = _one("vllm.yaml", "ClusterRoleBinding")
    role = _one("vllm.yaml", "ClusterRole")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-pulse-adapter", "namespace": "gpu-pulse"}]
    assert demand.bearer_token_file == Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def test_keda_wakes_the_deployment_with_gpu_pulses_triggers_alone() -> None:
    scaled = _one("keda.yaml", "ScaledObject")
    validate_keda(scaled)
    config = _config()
    assert scaled["spec"]["minReplicaCount"] == 0
    assert scaled["spec"]["scaleTargetRef"]["name"] == _one("vllm.yaml", "Deployment")["metadata"]["name"]
    triggers = [parse_trigger(t["metadata"]) for t in scaled["spec"]["triggers"]]
    assert {t["type"] for t in scaled["spec"]["triggers"]} == {"external-push"}, "no Prometheus trigger"
    demand = [t for t in triggers if t.of_demand]
    assert [t.metric for t in demand] == [d.name for d in config.demand], "the demand wakes it"
    assert all(config.custom(t.metric) is not None for t in triggers if not t.of_demand)


def test_the_hpa_scales_from_zero_on_gpu_pulses_external_metrics_only() -> None:
    hpa = _one("hpa.yaml", "HorizontalPodAutoscaler")
    config = _config()
    assert hpa["spec"]["minReplicas"] == 0
    # HPAScaleToZero: minReplicas 0 needs an Object or External metric, and no other kind
    assert {m["type"] for m in hpa["spec"]["metrics"]} == {"External"}
    served = {d.name for d in config.demand} | {m.name for m in config.external}
    names = [m["external"]["metric"]["name"] for m in hpa["spec"]["metrics"]]
    assert set(names) <= served and names[0] in {d.name for d in config.demand}, "a demand with a value at zero"
    assert hpa["spec"]["scaleTargetRef"]["name"] == _one("keda.yaml", "ScaledObject")["spec"]["scaleTargetRef"]["name"]
