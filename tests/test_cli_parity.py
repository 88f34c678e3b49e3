"""Both commands behave alike where a user meets them: the same flag names for the same options, the same error line,
and exit code 2 for a start-up problem the user can fix, such as a port already in use."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapter.settings import COMMAND_LINE as ADAPTER
from exporter.settings import COMMAND_LINE as EXPORTER
from simulation.kubeconfig import write_kubeconfig
from tests.support.kubeapi import kube_api_on_a_thread
from toolkit.settings import CommandLine, choices_of

ROOT = Path(__file__).resolve().parent.parent
SHARED = ("listen", "tls_cert_file", "tls_private_key_file", "log_level", "log_format", "kubeconfig")


def test_the_same_option_has_the_same_flag_in_both_commands() -> None:
    for name in SHARED:
        assert name in EXPORTER.model.model_fields and name in ADAPTER.model.model_fields, name
        assert EXPORTER.flag(name) == ADAPTER.flag(name)
        assert EXPORTER.env(name).removeprefix("GPU_PULSE_") == ADAPTER.env(name).removeprefix("GPU_PULSE_ADAPTER_")


def test_the_old_exporter_spelling_still_works_but_is_not_advertised() -> None:
    settings = EXPORTER.load(["--tls-cert-file", "c.pem", "--tls-key-file", "k.pem"], {})
    assert getattr(settings, "tls_private_key_file") == Path("k.pem")  # noqa: B009
    assert "--tls-key-file" not in EXPORTER.parser().format_help()
    settings = EXPORTER.load([], {"GPU_PULSE_TLS_CERT_FILE": "c.pem", "GPU_PULSE_TLS_KEY_FILE": "k.pem"})
    assert getattr(settings, "tls_private_key_file") == Path("k.pem")  # noqa: B009


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("exporter", ["--simulate", "h100x8", "--no-pod-attribution"]),
        ("adapter", ["--exporter-endpoints", "n=http://127.0.0.1:1", "--kubeconfig", "/nonexistent"]),
    ],
)
def test_errors_are_one_line_in_one_style(module: str, extra: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", module, "--log-format", "yaml", *extra],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("GPU_PULSE_")},
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpu-pulse-{module}: error: --log-format: "), lines


def test_a_port_in_use_exits_2_with_one_line_naming_listen(taken_port: int) -> None:
    result = subprocess.run(
        # a scenario with pods: its simulated kubelet, NVML and the attributor would each log a line on starting
        [sys.executable, "-m", "exporter", "--simulate", "shared", "--listen", f"127.0.0.1:{taken_port}"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("GPU_PULSE_")},
        check=False,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()  # only the error: nothing was started that would log
    assert lines == [
        f"gpu-pulse-exporter: error: --listen 127.0.0.1:{taken_port}: cannot listen: Address already in use"
    ]


def test_the_adapter_exits_2_too_when_its_port_is_in_use(taken_port: int, tmp_path: Path) -> None:
    with kube_api_on_a_thread() as kube:
        kubeconfig = write_kubeconfig(tmp_path / "kube.kubeconfig", server=kube.url)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "adapter",
                f"--listen=127.0.0.1:{taken_port}",
                f"--kubeconfig={kubeconfig}",
                f"--cert-dir={tmp_path / 'certs'}",
                "--exporter-endpoints=n=http://127.0.0.1:1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if not k.startswith("GPU_PULSE_")},
            check=False,
        )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines == [
        f"gpu-pulse-adapter: error: --listen 127.0.0.1:{taken_port}: cannot listen: Address already in use"
    ]


@pytest.mark.parametrize("command", [EXPORTER, ADAPTER], ids=["exporter", "adapter"])
def test_help_leads_with_the_main_flags_and_ends_with_the_connection_limits(command: CommandLine) -> None:
    text = command.parser().format_help()
    options = text[text.index("options:") :]
    flags = [line.split()[0] for line in options.splitlines() if line.startswith("  --")]
    assert flags[:2] == ["--version", "--listen"], flags
    main = {"gpu-pulse-exporter": "--dialect", "gpu-pulse-adapter": "--source"}[command.prog]
    assert flags.index(main) < 5, flags  # in the first screen, not after the tuning knobs
    assert flags[-3:] == ["--max-connections", "--header-read-timeout", "--idle-timeout"], flags
    assert "connection limits (both services):" in text


@pytest.mark.parametrize("command", [EXPORTER, ADAPTER], ids=["exporter", "adapter"])
def test_help_names_the_choices_of_every_setting_that_has_them(command: CommandLine) -> None:
    text = " ".join(command.parser().format_help().split())
    fields = command.model.model_fields
    with_choices = {name: choices_of(info) for name, info in fields.items() if choices_of(info)}
    assert {"log_level", "log_format"} <= set(with_choices)
    for name, choices in with_choices.items():
        assert f"{command.flag(name)} {{{','.join(choices)}}} " in text, name


def test_shared_settings_read_the_same_in_both_helps() -> None:
    for name in (*SHARED, "max_connections", "header_read_timeout", "idle_timeout"):
        shown = []
        for command in (EXPORTER, ADAPTER):
            action = next(a for a in command.parser()._actions if a.dest == name and a.help != "==SUPPRESS==")
            shown.append(action.metavar)
        assert shown[0] == shown[1], (name, shown)
