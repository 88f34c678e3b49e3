"""The manifests the documentation tells users to apply: the HPAs and the KEDA ScaledObject of docs/hpa.md, and the
Deployments and HPA of docs/llm-serving.md, validate, read metrics gpu-pulse serves, and the ScaledObject's query is
PromQL over series gpu-pulse's rules record."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml

from exporter.catalogue import Dialect
from rules.generate import recordings
from rules.promql import metric_names
from tests.deploy.invariants import check_all
from tests.deploy.rendering import REPO, find, kustomize, one
from tests.deploy.schemas import VERSIONS
from tests.support.tools import require_tool

HPA_DOC = REPO / "docs" / "hpa.md"
LLM_DOC = REPO / "docs" / "llm-serving.md"
_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _documents(path: Path) -> list[dict[str, Any]]:
    return [yaml.safe_load(block) for block in _BLOCK.findall(path.read_text(encoding="utf-8"))]


def _served() -> tuple[set[str], set[str]]:
    """The shipped custom and external metrics, and the demands of docs/hpa.md's metrics file (External too)."""
    defaults = yaml.safe_load((REPO / "adapter" / "defaults.yaml").read_text(encoding="utf-8"))
    demands = {d["name"] for block in _documents(HPA_DOC) if isinstance(block, dict) for d in block.get("demand", ())}
    return {m["name"] for m in defaults["metrics"]}, {m["name"] for m in defaults["external"]} | demands


def _by_kind(kind: str, doc: Path = HPA_DOC) -> list[dict[str, Any]]:
    return [d for d in _documents(doc) if isinstance(d, dict) and d.get("kind") == kind]


@pytest.mark.parametrize("version", VERSIONS)
def test_hpa_examples_validate_and_read_served_metrics(version: str) -> None:
    custom, external = _served()
    hpas = _by_kind("HorizontalPodAutoscaler")
    assert len(hpas) == 5  # GPU utilization, queue, namespace GPU use, saturation, the HPA's own scale to zero
    for hpa in hpas:
        kubernetes_validate.validate(hpa, version, strict=True)
        for metric in hpa["spec"]["metrics"]:
            source = metric[metric["type"].lower()]
            served = external if metric["type"] == "External" else custom
            assert source["metric"]["name"] in served, source["metric"]["name"]


@pytest.mark.parametrize("version", VERSIONS)
def test_llm_serving_examples_validate_read_served_metrics_and_annotate_as_the_exporter_reads(version: str) -> None:
    custom, _ = _served()
    (hpa,) = _by_kind("HorizontalPodAutoscaler", LLM_DOC)
    kubernetes_validate.validate(hpa, version, strict=True)
    assert {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]} <= custom
    deployments = _by_kind("Deployment", LLM_DOC)
    assert len(deployments) == 2
    for deployment in deployments:
        kubernetes_validate.validate(deployment, version, strict=True)
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        # the names the exporter reads (issue 37): gpu-pulse's own win over Prometheus'
        assert set(annotations) <= {
            "prometheus.io/scrape",
            "prometheus.io/port",
            "prometheus.io/path",
            "prometheus.io/scheme",
            "gpu-pulse.dev/engine-port",
            "gpu-pulse.dev/engine-path",
            "gpu-pulse.dev/engine-scheme",
        }


# KEDA's ScaledObject (keda.sh/v1alpha1): the fields the example may use, and the prometheus trigger's metadata keys
SCALED_OBJECT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {"type": "object", "required": ["name", "namespace"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "name": {}},
                },
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["type", "metadata"],
                        "properties": {
                            "type": {"const": "prometheus"},
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "metadata": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["serverAddress", "query", "threshold"],
                                "properties": {
                                    "serverAddress": {"type": "string", "pattern": "^https?://"},
                                    "query": {"type": "string"},
                                    "threshold": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$"},
                                    "activationThreshold": {"type": "string"},
                                    "ignoreNullValues": {"enum": ["true", "false"]},
                                    "namespace": {"type": "string"},
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def _prometheus_scaled_object() -> dict[str, Any]:
    """The ScaledObject reading gpu-pulse's figures through Prometheus (the external scaler's: test_docs_keda.py)."""
    (scaled,) = [s for s in _by_kind("ScaledObject") if [t["type"] for t in s["spec"]["triggers"]] == ["prometheus"]]
    return scaled


def test_keda_scaled_object_is_shaped_as_keda_reads_it(tmp_path: Path) -> None:
    scaled = _prometheus_scaled_object()
    jsonschema.validate(scaled, SCALED_OBJECT)
    spec = scaled["spec"]
    assert spec["minReplicaCount"] <= spec["maxReplicaCount"]
    (trigger,) = spec["triggers"]
    assert trigger["metricType"] == "Value", "a mean utilization scales the current replicas, not an average value"
    query = trigger["metadata"]["query"]
    recorded = {r.record for d in Dialect for r in recordings(d)}
    assert metric_names(query) and metric_names(query) <= recorded, "the query reads series gpu-pulse's rules record"
    labels = set(re.findall(r"(\w+)=", query))
    assert {"namespace", "workload"} <= labels
    assert scaled["metadata"]["namespace"] == re.search(r'namespace="([^"]+)"', query).group(1)  # type: ignore[union-attr]
    assert spec["scaleTargetRef"]["name"] == re.search(r'workload="([^"]+)"', query).group(1)  # type: ignore[union-attr]
    # promtool parses the query (as a recording rule's expression)
    promtool = require_tool("promtool")
    rules = tmp_path / "query.rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": [{"record": "q", "expr": query}]}]}))
    result = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_misshapen_scaled_object_is_caught() -> None:
    """The referee is live: a field KEDA does not know fails the schema."""
    scaled = _prometheus_scaled_object()
    scaled["spec"]["triggers"][0]["metadata"]["treshold"] = scaled["spec"]["triggers"][0]["metadata"].pop("threshold")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, SCALED_OBJECT)


def test_install_md_overlay_renders_as_documented(kubectl: str, tmp_path: Path) -> None:
    """docs/install.md's own overlay (components, images, release label), beside a copy of the repository's layout,
    with what later sections add to it (the DRA component), each a block headed `# my-overlay/kustomization.yaml`."""
    text = (REPO / "docs" / "install.md").read_text()
    overlay, *additions = [yaml.safe_load(b) for b in _BLOCK.findall(text) if "my-overlay/" in b]
    assert additions, "the DRA section adds its component to the same overlay"
    for addition in additions:
        assert set(addition) == {"components"}, addition
        overlay["components"] = overlay["components"] + addition["components"]
    for part in ("deploy", "rules", "dashboards"):
        (tmp_path / part).symlink_to(REPO / part)
    (tmp_path / "my-overlay").mkdir()
    (tmp_path / "my-overlay" / "kustomization.yaml").write_text(yaml.safe_dump(overlay), encoding="utf-8")
    objects = kustomize(kubectl, tmp_path / "my-overlay")
    exporter = one(objects, "DaemonSet", "gpu-pulse-exporter")["spec"]["template"]["spec"]["containers"][0]
    assert any(arg.startswith("--kubernetes") for arg in exporter["args"]), "the DRA component"
    check_all(objects)
    pods = [one(objects, "DaemonSet", "gpu-pulse-exporter"), one(objects, "Deployment", "gpu-pulse-adapter")]
    images = {p["spec"]["template"]["spec"]["containers"][0]["image"] for p in pods}
    version = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert version, "pyproject.toml has a version"
    # the documented tag is the one build.sh gives: the package's version
    assert images == {f"registry.example.com/team/gpu-pulse-{r}:{version.group(1)}" for r in ("exporter", "adapter")}
    assert one(objects, "APIService", "v1beta1.external.metrics.k8s.io")
    for monitor in find(objects, "ServiceMonitor") + find(objects, "PrometheusRule"):
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_install_md_kubelet_path_overlay_renders_as_documented(kubectl: str, tmp_path: Path) -> None:
    """docs/install.md's overlay for a kubelet root elsewhere (k0s): the socket directory is mounted from there."""
    text = (REPO / "docs" / "install.md").read_text(encoding="utf-8")
    ours = [b for b in _BLOCK.findall(text) if b.startswith("# kubelet-overlay/")]
    blocks = {b.splitlines()[0].removeprefix("# "): b for b in ours}
    assert set(blocks) == {"kubelet-overlay/kustomization.yaml", "kubelet-overlay/kubelet-path.yaml"}
    (tmp_path / "deploy").symlink_to(REPO / "deploy")
    for name, block in blocks.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(block, encoding="utf-8")
    objects = kustomize(kubectl, tmp_path / "kubelet-overlay")
    check_all(objects)
    pod = one(objects, "DaemonSet", "gpu-pulse-exporter")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["pod-resources"]["hostPath"]["path"] == "/var/lib/k0s/kubelet/pod-resources"
    assert not find(objects, "ConfigMap", "gpu-pulse-kubelet-path")
