"""gpu-pulse-report as a user meets it: flags and variables as the services take them, one error line and exit 2 for
what the user can fix, exit 1 with one line when Prometheus cannot answer, progress on a terminal only."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from report.cli import main
from report.progress import TerminalProgress
from report.settings import COMMAND_LINE
from tests.support.loopback import refused_port
from tests.support.processes import REPO, clean_environment


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "report", *args], capture_output=True, text=True, timeout=60, cwd=REPO,
        env=clean_environment(env), check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "names"),
    [
        ([], "--prometheus-url"),
        (["--prometheus-url", "ftp://x"], "--prometheus-url"),
        (["--prometheus-url", "http://127.0.0.1:1", "--window", "a week"], "--window"),
        (["--prometheus-url", "http://127.0.0.1:1", "--window", "500d"], "--window"),
        (["--prometheus-url", "http://127.0.0.1:1", "--headroom", "-1"], "headroom"),
        (["--prometheus-url", "http://127.0.0.1:1", "--prices", "/nonexistent/prices.yaml"], "--prices"),
        (["--prometheus-url", "http://127.0.0.1:1", "--thresholds", "/dev/zero"], "--thresholds"),
        (["--prometheus-url", "http://127.0.0.1:1", "--kubeconfig", "/nonexistent"], "--kubeconfig"),
        (["--prometheus-url", "http://127.0.0.1:1", "--prometheus-ca-file", "/nonexistent"], "/nonexistent"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(args: list[str], names: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-pulse-report: error: ") and names in lines[0], lines


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("idle_utilization: 2\n", "idle_utilization"),
        ("[1, 2]\n", "expected a mapping"),
        ("reclaim: 0.5\n", "reclaim"),
        ("headroom: [\n", "not YAML"),
    ],
)
def test_a_bad_thresholds_file_names_the_problem(
    tmp_path: Path, text: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "thresholds.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["--prometheus-url", "http://127.0.0.1:1", "--thresholds", str(path)]) == 2
    assert problem in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "problem"),
    [("per_hour: {a: -1}\n", "per_hour"), ("currency: 5\n", "currency"), ("price: 1\n", "unknown keys")],
)
def test_a_bad_prices_file_names_the_problem(
    tmp_path: Path, text: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["--prometheus-url", "http://127.0.0.1:1", "--prices", str(path)]) == 2
    assert problem in capsys.readouterr().err


def test_an_unreachable_prometheus_is_exit_1_with_one_line(tmp_path: Path) -> None:
    with refused_port() as port:
        result = run("--prometheus-url", f"http://127.0.0.1:{port}", "--output", str(tmp_path / "out"))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "cannot reach" in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_variables_are_read_and_foreign_ones_refused() -> None:
    settings = COMMAND_LINE.load(
        [], {"GPU_PULSE_REPORT_PROMETHEUS_URL": "http://p:9090", "GPU_PULSE_REPORT_WINDOW": "2d"}
    )
    assert getattr(settings, "window_seconds") == 2 * 86400  # noqa: B009
    result = run(env={"GPU_PULSE_REPORT_PROMETHEUS_URL": "http://127.0.0.1:1", "GPU_PULSE_REPORT_WINDOWS": "2d"})
    assert result.returncode == 2 and "GPU_PULSE_REPORT_WINDOWS: not a setting" in result.stderr


def test_the_services_ignore_the_reports_variables() -> None:
    """The exporter's prefix GPU_PULSE_ is also the start of the report's: its variables are not the exporter's."""
    from exporter.settings import COMMAND_LINE as EXPORTER

    EXPORTER.load([], {"GPU_PULSE_REPORT_WINDOW": "2d"})


def test_help_lists_every_flag_with_its_variable() -> None:
    result = run("--help")
    assert result.returncode == 0
    for flag in ("--prometheus-url", "--window", "--prices", "--thresholds", "--kubeconfig", "--output"):
        assert flag in result.stdout
    assert "GPU_PULSE_REPORT_PROMETHEUS_TOKEN_FILE" in result.stdout


def test_progress_shows_on_a_terminal_only() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal, pipe = Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        progress = TerminalProgress(stream)
        progress("namespace ml", 0, 2)
        progress("done", 2, 2)
    assert "[0/2]" in terminal.getvalue() and terminal.getvalue().endswith("\n")
    assert pipe.getvalue() == ""
    quiet = Terminal()
    TerminalProgress(quiet, enabled=False)("x", 0, 1)
    assert quiet.getvalue() == ""
    assert os.environ.get("GPU_PULSE_REPORT_PROGRESS") is None


def test_without_the_extra_it_says_which_to_install() -> None:
    """The services' images install gpu-pulse without the `report` extra: the command is there, its plots are not."""
    code = (
        "import sys; sys.modules['matplotlib'] = sys.modules['numpy'] = None; from report.cli import main; "
        "sys.exit(main(['--prometheus-url', 'http://127.0.0.1:1']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO, env=clean_environment()
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "gpu-pulse-report: error: the report needs numpy: pip install 'gpu-pulse[report]'"


def test_the_prometheus_flags_are_the_adapters() -> None:
    from adapter.settings import COMMAND_LINE as ADAPTER

    for name in ("prometheus_url", "prometheus_token_file", "prometheus_ca_file", "prometheus_timeout", "kubeconfig"):
        assert COMMAND_LINE.flag(name) == ADAPTER.flag(name)
        assert COMMAND_LINE.env(name).removeprefix("GPU_PULSE_REPORT_") == ADAPTER.env(name).removeprefix(
            "GPU_PULSE_ADAPTER_"
        )
    for name in ("prometheus_token_file", "prometheus_ca_file"):
        ours, theirs = COMMAND_LINE.model.model_fields[name], ADAPTER.model.model_fields[name]
        assert ours.description == theirs.description and ours.annotation == theirs.annotation
