"""The release workflow (.github/workflows/release.yaml): actionlint accepts it, it makes what docs/install.md says a
release holds, and the steps that need no network run here as they run there (scripts/release_chart.py: the tag
checked against the versions, the chart packaged with its alerts linking the release's runbooks)."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts.release_chart import ReleaseError, check_versions, main
from tests.deploy.rendering import one, require_helm
from tests.support.tools import require_tool

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "release.yaml"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
REPOSITORY = "https://github.com/example-org/gpu-pulse-fork"


def _actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    """actionlint on PATH, or where scripts/test.sh builds it (the version it pins)."""
    version = re.search(r"^actionlint_version=(\S+)$", (ROOT / "scripts" / "test.sh").read_text(), re.MULTILINE)
    assert version, "scripts/test.sh pins actionlint's version"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-pulse" / f"actionlint-{version[1]}"
    built = cache / "actionlint"
    actionlint = str(built) if built.is_file() else require_tool("actionlint")
    return subprocess.run(
        [actionlint, "-no-color", *map(str, paths)], capture_output=True, text=True, timeout=120, check=False
    )


def _workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    return loaded


def _steps(job: str) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = _workflow()["jobs"][job]["steps"]
    return steps


def test_actionlint_accepts_every_workflow() -> None:
    workflows = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
    assert WORKFLOW in workflows
    result = _actionlint(*workflows)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_is_a_live_referee(tmp_path: Path) -> None:
    """A step reading another step's output that does not exist, and a misspelt key, fail it."""
    broken = WORKFLOW.read_text(encoding="utf-8").replace("steps.build.outputs.digest", "steps.bild.outputs.digest")
    broken = broken.replace("runs-on: ubuntu-24.04", "run-on: ubuntu-24.04", 1)
    path = tmp_path / ".github" / "workflows" / "release.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(broken, encoding="utf-8")
    result = _actionlint(path)
    assert result.returncode != 0
    assert "bild" in result.stdout and "run-on" in result.stdout, result.stdout


def test_a_tag_releases_signed_multi_arch_images_with_sboms_and_the_chart_as_an_oci_artifact() -> None:
    workflow = _workflow()
    assert workflow[True]["push"]["tags"] == ["v*"], "on a tag"  # YAML 1.1 reads the key `on` as true
    build = next(s for s in _steps("images") if s.get("id") == "build")
    assert build["uses"].startswith("docker/build-push-action@")
    inputs = build["with"]
    assert inputs["platforms"] == "linux/amd64,linux/arm64"
    assert inputs["sbom"] is True and inputs["push"] is True and inputs["provenance"] == "mode=max"
    assert inputs["file"] == "deploy/docker/Containerfile"
    assert set(_workflow()["jobs"]["images"]["strategy"]["matrix"]["image"]) == {"gpu-pulse-exporter",
                                                                               "gpu-pulse-adapter"}  # fmt: skip
    runs = {job: "\n".join(s.get("run", "") for s in _steps(job)) for job in ("images", "chart")}
    assert 'cosign sign --yes "${IMAGE}@${DIGEST}"' in runs["images"], "images signed by digest"
    assert "helm push" in runs["chart"] and "oci://" in runs["chart"] and "cosign sign --yes" in runs["chart"]
    assert workflow["jobs"]["images"]["permissions"]["id-token"] == "write", "keyless signing needs the OIDC token"


def test_the_containerfile_has_what_the_workflow_builds() -> None:
    containerfile = (ROOT / "deploy" / "docker" / "Containerfile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^FROM \S+ AS (\w+)$", containerfile, re.MULTILINE))
    assert {"exporter", "adapter"} <= targets
    args = set(re.findall(r"^ARG (\w+)", containerfile, re.MULTILINE))
    build = next(s for s in _steps("images") if s.get("id") == "build")
    given = {line.split("=", 1)[0] for line in build["with"]["build-args"].splitlines() if line.strip()}
    assert given <= args, f"build arguments the Containerfile does not declare: {given - args}"


def test_the_version_check_refuses_a_tag_that_is_not_the_packages_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check_versions(f"v{VERSION}") == VERSION
    with pytest.raises(ReleaseError, match="must be v"):
        check_versions("v9.9.9")
    assert main(["--tag", VERSION, "--repository-url", REPOSITORY, "--out", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"release_chart: tag {VERSION}: pyproject.toml's version is {VERSION}, so the tag must be v{VERSION}"


def test_the_chart_step_packages_a_chart_whose_alerts_link_the_releases_runbooks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chart job's offline steps: scripts/release_chart.py, then Helm's lint and package of what it wrote."""
    helm_python = require_helm()
    assert main(["--tag", f"v{VERSION}", "--repository-url", REPOSITORY, "--out", str(tmp_path / "chart")]) == 0
    chart = Path(capsys.readouterr().out.strip())
    assert chart == tmp_path / "chart" / "gpu-pulse"
    report = helm_python.lint(str(chart), strict=True, namespace="gpu-pulse")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report
    archive = Path(helm_python.package(str(chart), destination=str(tmp_path / "dist")))
    assert archive.name == f"gpu-pulse-{VERSION}.tgz"
    with helm_python.Chart.load(str(archive)) as packaged:
        rendered = packaged.render({"prometheusRule": {"enabled": True}}, name="gpu-pulse", namespace="gpu-pulse",
                                   is_install=True)  # fmt: skip
    objects = [d for p, t in sorted(rendered.items()) if p.endswith(".yaml") for d in yaml.safe_load_all(t) if d]
    rule = one(objects, "PrometheusRule", "gpu-pulse")
    urls = [r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert urls and all(u.startswith(f"{REPOSITORY}/blob/v{VERSION}/docs/runbooks.md#gpu") for u in urls)
    # nothing else of the chart changes
    for path in (ROOT / "deploy" / "helm" / "gpu-pulse").rglob("*"):
        relative = path.relative_to(ROOT / "deploy" / "helm" / "gpu-pulse")
        if path.is_file() and relative.parts[:2] != ("files", "rules"):
            assert (chart / relative).read_bytes() == path.read_bytes(), relative
