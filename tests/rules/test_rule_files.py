"""The committed rule files: current with the generator, valid for promtool, and their unit tests pass."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from exporter.catalogue import Dialect
from rules.generate import ROOT, main, render_all, stale_files
from rules.render import MANIFEST_FILE, RULE_FILE, TEST_FILE
from rules.runbooks import default_base

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
    # a bound, not a budget: the whole test file takes promtool 30 s of CPU, and more than a minute of a busy machine
    return subprocess.run([promtool, *args], capture_output=True, text=True, cwd=cwd, timeout=240, check=False)


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
    # only the test groups of that alert: the whole file's hundred-odd groups take promtool half a minute
    tests = yaml.safe_load((source / TEST_FILE).read_text(encoding="utf-8"))
    tests["tests"] = [
        group
        for group in tests["tests"]
        if any(case.get("alertname") == "GPUHighTemperature" for case in group.get("alert_rule_test", []))
    ]
    assert tests["tests"], "no test group checks GPUHighTemperature"
    (tmp_path / TEST_FILE).write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    result = _promtool(promtool, "test", "rules", TEST_FILE, cwd=tmp_path)
    assert result.returncode != 0
    assert "GPUHighTemperature" in result.stdout + result.stderr


def test_rules_select_gpu_pulse_targets_by_the_default_job_names() -> None:
    plain = yaml.safe_load((ROOT / "dist" / "prometheus" / RULE_FILE).read_text(encoding="utf-8"))
    exprs = {r["alert"]: r["expr"] for g in plain["groups"] for r in g["rules"] if "alert" in r}
    assert exprs["GPUExporterDown"] == 'up{job="gpu-pulse-exporter"} == 0'
    assert 'up{job="gpu-pulse-adapter"}' in exprs["GPUAdapterDown"]


JOBS = ("--exporter-job", "gpu-telemetry", "--adapter-job", "metrics-adapter")
BASE = "https://wiki.example.com/gpu/runbooks"


def _restored_jobs(text: str) -> str:
    return text.replace("gpu-telemetry", "gpu-pulse-exporter").replace("metrics-adapter", "gpu-pulse-adapter")


def test_rules_for_other_job_names_are_the_default_ones_with_the_names_replaced(tmp_path: Path) -> None:
    """`--exporter-job/--adapter-job --out`: the same rules and tests, selecting the given jobs."""
    assert main([*JOBS, "--out", str(tmp_path)]) == 0
    for name, text in render_all().items():
        assert _restored_jobs((tmp_path / name).read_text(encoding="utf-8")) == text, name
    for dialect in DIALECTS:
        rules = (tmp_path / "dist" / dialect / RULE_FILE).read_text(encoding="utf-8")
        assert 'up{job="gpu-telemetry"} == 0' in rules and 'up{job="metrics-adapter"}' in rules
        assert "gpu-pulse-exporter" not in rules and "gpu-pulse-adapter" not in rules


@pytest.mark.timeout(300)  # promtool over a quarter of a test file: most of a minute on a busy machine
def test_other_job_names_and_runbook_base_together_pass_their_promtool_tests(promtool: str, tmp_path: Path) -> None:
    """Both flags at once, as a team with its own job names and wiki renders them: every file is the default one
    with the names and the runbook base replaced, and promtool agrees that the replaced tests expect what the replaced
    rules give, in the test groups that name a job or a runbook (the others are the default file's, which
    test_promtool_unit_tests_pass runs). One dialect, the exporter's default: the other's files are the same
    replacements of its own (checked above)."""
    assert main([*JOBS, "--runbook-url-base", BASE, "--out", str(tmp_path)]) == 0
    for name, text in render_all().items():
        other = _restored_jobs((tmp_path / name).read_text(encoding="utf-8"))
        assert other.replace(f"{BASE}#", f"{default_base()}#") == text, name
    # the test groups the replacement changed (the others are the default file's, which promtool passes): a group
    # that names no job nor runbook gives the same results whatever the rules' job names
    directory = tmp_path / "dist" / "dcgm"
    tests = yaml.safe_load((directory / TEST_FILE).read_text(encoding="utf-8"))
    replaced = [g for g in tests["tests"] if any(word in yaml.safe_dump(g) for word in (*JOBS[1::2], BASE))]
    assert 0 < len(replaced) < len(tests["tests"])
    (directory / TEST_FILE).write_text(yaml.safe_dump({**tests, "tests": replaced}, sort_keys=False), encoding="utf-8")
    result = _promtool(promtool, "test", "rules", TEST_FILE, cwd=directory)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_job_name_that_breaks_promql_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--exporter-job", 'gpu"} or vector(1) #', "--out", "unused"])
    assert "exporter job name" in capsys.readouterr().err


def test_runbook_links_point_at_this_releases_docs() -> None:
    """The committed files link docs/runbooks.md at the tag of pyproject's version, in the repository it names."""
    project = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    expected = f"{project['urls']['Source']}/blob/v{project['version']}/docs/runbooks.md#gpudown"
    for dialect in DIALECTS:
        plain = yaml.safe_load((ROOT / "dist" / dialect / RULE_FILE).read_text(encoding="utf-8"))
        urls = {
            r["alert"]: r["annotations"]["runbook_url"] for g in plain["groups"] for r in g["rules"] if "alert" in r
        }
        assert urls["GPUDown"] == expected


def test_runbook_url_base_flag_writes_links_elsewhere(tmp_path: Path) -> None:
    """`--runbook-url-base URL --out DIR`: the same files, each alert's runbook_url (and the one its promtool test
    expects) under URL with its anchor kept."""
    assert main(["--runbook-url-base", BASE, "--out", str(tmp_path)]) == 0
    default = render_all()
    for name, text in default.items():
        other = (tmp_path / name).read_text(encoding="utf-8")
        assert other.replace(f"{BASE}#", f"{default_base()}#") == text, name
    rules = (tmp_path / "dist" / "dcgm" / RULE_FILE).read_text(encoding="utf-8")
    assert f"runbook_url: {BASE}#gpudown" in rules and default_base() not in rules
    tests = (tmp_path / "dist" / "dcgm" / TEST_FILE).read_text(encoding="utf-8")
    assert f"{BASE}#gpudown" in tests  # the promtool tests expect the new links


@pytest.mark.parametrize("base", ["wiki.example.com/runbooks", "https://wiki.example.com/runbooks#top", "https://a b"])
def test_a_runbook_url_base_that_cannot_take_an_anchor_is_refused(
    base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--runbook-url-base", base, "--out", "unused"])
    assert exited.value.code == 2
    assert "runbook URL base" in capsys.readouterr().err


def test_check_and_the_committed_files_take_only_the_default_runbook_base(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--check", "--runbook-url-base", "https://wiki.example.com/runbooks"])
    with pytest.raises(SystemExit):
        main(["--runbook-url-base", "https://wiki.example.com/runbooks"])
    assert "--out DIR" in capsys.readouterr().err


def test_ttft_slo_flag_holds_workloads_to_another_slo_and_promtool_agrees(promtool: str, tmp_path: Path) -> None:
    """`--ttft-slo-seconds 0.5 --out DIR`: GPUInferenceTTFTOverSLO compares with 0.5 s where the committed rule has the
    default, and its own promtool tests (made for that SLO: a p90 above and below it) pass, a workload's own SLO
    still winning; the rest of the files are unchanged."""
    assert main(["--ttft-slo-seconds", "0.5", "--out", str(tmp_path)]) == 0
    default = render_all()
    for name, text in default.items():
        if name.name not in (RULE_FILE, MANIFEST_FILE, TEST_FILE):
            assert (tmp_path / name).read_text(encoding="utf-8") == text, name
    dist = tmp_path / "dist" / "prometheus"
    rules = yaml.safe_load((dist / RULE_FILE).read_text(encoding="utf-8"))
    (ttft,) = (r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "GPUInferenceTTFTOverSLO")
    assert ttft["expr"].endswith("* 0 + 0.5)")
    tests = yaml.safe_load((dist / TEST_FILE).read_text(encoding="utf-8"))
    tests["tests"] = [t for t in tests["tests"] if t["name"].startswith("GPUInferenceTTFTOverSLO")]
    assert len(tests["tests"]) == 2
    (dist / "ttft.tests.yaml").write_text(yaml.safe_dump(tests), encoding="utf-8")
    result = _promtool(promtool, "test", "rules", "ttft.tests.yaml", cwd=dist)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "inf"])
def test_a_ttft_slo_that_is_no_duration_is_refused(seconds: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--ttft-slo-seconds", seconds, "--out", "unused"])
    assert exited.value.code == 2
    assert "time to first token SLO" in capsys.readouterr().err


def test_check_refuses_a_ttft_slo_other_than_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--ttft-slo-seconds", "1", "--check"])
    assert exited.value.code == 2
