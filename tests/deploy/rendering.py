"""Rendering the kustomize overlays, and finding objects in what they render."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OVERLAYS = ("prometheus-operator", "plain", "shared-gpus")


def kustomize(kubectl: str, directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = find(objects, kind, name)
    assert len(found) == 1, f"{kind}/{name}: {len(found)} objects"
    return found[0]


CHART = DEPLOY / "helm" / "gpu-pulse"
CRD_KINDS = frozenset({"ServiceMonitor", "PodMonitor", "PrometheusRule", "Certificate", "Issuer"})


def helm_render(
    values: dict[str, Any] | None, namespace: str = "gpu-pulse", release: str = "gpu-pulse"
) -> list[dict[str, Any]]:
    """The chart rendered by Helm's own engine (helm-python-sdk, offline: `lookup` finds nothing), as on install."""
    helm_python = require_helm()
    with helm_python.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values, name=release, namespace=namespace, is_install=True)
    return [
        doc
        for path, text in sorted(rendered.items())
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def require_helm() -> Any:
    """helm-python-sdk (the test extra): missing, it fails the run under CI and skips elsewhere."""
    try:
        import helm_python
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("helm-python-sdk is required when CI is set (pip install -e '.[test]')")
        pytest.skip("helm-python-sdk not installed (pip install -e '.[test]')", allow_module_level=True)
    return helm_python


def kustomize_with_components(kubectl: str, tmp: Path, resource: str, *components: str) -> list[dict[str, Any]]:
    """An overlay of `resource` (a directory under deploy/) with the named components, rendered by kubectl."""
    lines = ["apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization", "resources:"]
    lines.append(f"  - {os.path.relpath(DEPLOY / resource, tmp)}")
    if components:
        lines.append("components:")
        lines += [f"  - {os.path.relpath(DEPLOY / 'components' / c, tmp)}" for c in components]
    (tmp / "kustomization.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return kustomize(kubectl, tmp)
