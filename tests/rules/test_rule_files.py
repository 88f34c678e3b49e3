"""The committed rule files: current with the generator, valid for promtool, and their unit tests pass."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from exporter.catalogue import Dialect
from rules.generate import ROOT, render_all, stale_files
from rules.render import MANIFEST_FILE, RULE_FILE, TEST_FILE

DIALECTS = [str(d) for d in Dialect]


def test_committed_files_match_the_generator() -> None:
    stale = stale_files()
    assert stale == [], f"regenerate with `python -m rules.generate`: {[str(p) for p in stale]}"


def test_check_mode_names_a_stale_file(tmp_path: Path) -> None:
    for path, text in render_all().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    assert stale_files(tmp_path) == []
    edited = Path("dist/prometheus") / RULE_FILE
    (tmp_path / edited).write_text("groups: []\n", encoding="utf-8")
    assert stale_files(tmp_path) == [edited]


def _promtool(promtool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, cwd=cwd, timeout=60, check=False)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_promtool_accepts_the_rule_file(promtool: str, dialect: str) -> None:
    result = _promtool(promtool, "check", "rules", str(ROOT / "dist" / dialect / RULE_FILE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("dialect", DIALECTS)
def test_promtool_accepts_the_prometheusrule_spec(promtool: str, dialect: str, tmp_path: Path) -> None:
    manifest = yaml.safe_load((ROOT / "dist" / dialect / MANIFEST_FILE).read_text(encoding="utf-8"))
    assert manifest["kind"] == "PrometheusRule"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(manifest["spec"]), encoding="utf-8")
    result = _promtool(promtool, "check", "rules", str(spec))
    assert result.returncode == 0, result.stdout + result.stderr
    plain = yaml.safe_load((ROOT / "dist" / dialect / RULE_FILE).read_text(encoding="utf-8"))
    assert manifest["spec"]["groups"] == plain["groups"], "the manifest and the plain file must hold the same rules"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_promtool_unit_tests_pass(promtool: str, dialect: str) -> None:
    result = _promtool(promtool, "test", "rules", TEST_FILE, cwd=ROOT / "dist" / dialect)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_can_fail(promtool: str, tmp_path: Path) -> None:
    """The referee is live: a rule changed after its test was written makes promtool test fail."""
    source = ROOT / "dist" / "prometheus"
    rules = (source / RULE_FILE).read_text(encoding="utf-8")
    broken = rules.replace("nvidia_gpu_temperature_celsius > 85", "nvidia_gpu_temperature_celsius > 95")
    assert broken != rules
    (tmp_path / RULE_FILE).write_text(broken, encoding="utf-8")
    (tmp_path / TEST_FILE).write_text((source / TEST_FILE).read_text(encoding="utf-8"), encoding="utf-8")
    result = _promtool(promtool, "test", "rules", TEST_FILE, cwd=tmp_path)
    assert result.returncode != 0
    assert "GPUHighTemperature" in result.stdout + result.stderr
