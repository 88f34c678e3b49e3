"""Settings and the command line: every flag is also a variable, bad values are one clear line and exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from adapter.cli import main
from adapter.settings import COMMAND_LINE, AdapterSettings, load_settings
from toolkit.certs import CertificateAuthority
from toolkit.settings import SettingsError

REPO = Path(__file__).resolve().parents[2]


def test_defaults() -> None:
    settings = load_settings([], {})
    assert str(settings.listen) == "0.0.0.0:6443"
    assert settings.source == "direct"
    assert settings.exporter_selector == "app.kubernetes.io/name=gpu-pulse-exporter"
    assert settings.exporter_port == 9400
    assert settings.max_age is None
    assert settings.authorization_always_allow_paths == ("/healthz", "/livez", "/readyz", "/metrics")


def test_every_field_is_a_flag_and_a_variable() -> None:
    help_text = COMMAND_LINE.parser().format_help()
    for field in AdapterSettings.model_fields:
        assert COMMAND_LINE.flag(field) in help_text
        assert COMMAND_LINE.env(field) in help_text
        assert COMMAND_LINE.env(field).startswith("GPU_PULSE_ADAPTER_")


def test_flags_win_over_variables() -> None:
    environ = {"GPU_PULSE_ADAPTER_EXPORTER_PORT": "9500", "GPU_PULSE_ADAPTER_SOURCE": "PROMETHEUS"}
    environ["GPU_PULSE_ADAPTER_PROMETHEUS_URL"] = "http://prometheus:9090"
    settings = load_settings(["--exporter-port", "9600"], environ)
    assert settings.exporter_port == 9600
    assert settings.source == "prometheus"
    settings = load_settings(["--requestheader-allowed-names", "front-proxy-client, aggregator"], {})
    assert settings.requestheader_allowed_names == ("front-proxy-client", "aggregator")


@pytest.mark.parametrize(
    ("argv", "environ", "words"),
    [
        (["--exporter-port", "x"], {}, "--exporter-port: Input should be a valid integer"),
        ([], {"GPU_PULSE_ADAPTER_EXPORTER_PORT": "70000"}, "GPU_PULSE_ADAPTER_EXPORTER_PORT: Input should be less"),
        (["--source", "carrier-pigeon"], {}, "--source: Input should be 'direct' or 'prometheus'"),
        (["--source", "prometheus"], {}, "--source prometheus needs --prometheus-url"),
        (["--exporter-selector", "app in x"], {}, "--exporter-selector: invalid label selector"),
        (["--exporter-endpoints", "gpu-1"], {}, "must look like node-name=http://host:port"),
        (["--exporter-url-template", "http://x:9400"], {}, "containing {node}"),
        (["--listen", "6443"], {}, "--listen: expected host:port"),
        (["--max-age", "-1"], {}, "--max-age: Input should be greater than 0"),
        (["--tls-cert-file", "a.crt"], {}, "go together"),
        (["--no-such-flag"], {}, "unrecognized arguments: --no-such-flag"),
        ([], {"GPU_PULSE_ADAPTER_COLOUR": "blue"}, "GPU_PULSE_ADAPTER_COLOUR: not a setting"),
    ],
)
def test_bad_values_are_one_line_naming_the_setting(argv: list[str], environ: dict[str, str], words: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(argv, environ)
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_cli_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--exporter-port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("gpu-pulse-adapter: error: --exporter-port:")


def test_unusable_metrics_config_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "metrics.yaml"
    config.write_text("metrics:\n  - name: x\n    figure: temperature\n    combine: mean\n")
    result = subprocess.run(
        [sys.executable, "-m", "adapter.cli", f"--config={config}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"gpu-pulse-adapter: error: --config {config}: metrics[0].figure: Input should be 'utilization_percent', "
        "'memory_used_bytes', 'memory_utilization', 'power_watts', 'queued_requests', 'running_requests', "
        "'kv_cache_utilization', 'time_to_first_token_seconds', 'inter_token_latency_seconds', 'requests_per_second', "
        "'generated_tokens_per_second' or 'saturation' (got 'temperature')"
    ]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"metrics: " + b"[" * 1000 + b"]" * 1000 + b"\n", "nested too deep"),
        (b"\xff\xfe\x00\x01 binary", "not a UTF-8 text file"),
        (b"", "defines no metric"),
        (b"metrics: []\nexternal: []\n", "defines no metric"),
    ],
    ids=["nested-1000-levels", "binary", "empty", "no-metrics"],
)
def test_config_files_that_cannot_serve_exit_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, problem: str
) -> None:
    config = tmp_path / "metrics.yaml"
    config.write_bytes(content)
    assert main([f"--config={config}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"gpu-pulse-adapter: error: --config {config}: ") and problem in err


def test_a_binary_kubeconfig_exits_2_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_bytes(b"\x9d\xff\x00 not yaml")
    assert main([f"--kubeconfig={kubeconfig}"]) == 2
    err = capsys.readouterr().err
    assert err == f"gpu-pulse-adapter: error: --kubeconfig {kubeconfig}: not UTF-8 text\n"


def test_help_explains_units_and_defaults() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "adapter.cli", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    assert "--max-age SECONDS" in result.stdout
    assert "default: 9400" in result.stdout


def test_the_demo_refuses_the_prometheus_source_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--demo", "--source", "prometheus"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "gpu-pulse-adapter: error: --demo serves through the direct source (it runs no Prometheus): "
        "leave out --source prometheus"
    ]  # not "--source prometheus needs --prometheus-url": that flag would not help
    assert main(["--demo", "--source", "prometheus", "--prometheus-url", "http://127.0.0.1:9090"]) == 2
    assert "--demo serves through the direct source" in capsys.readouterr().err


def test_the_demo_refuses_a_kubeconfig_in_a_missing_directory_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "new" / "dir"
    assert main(["--demo", "--listen", "127.0.0.1:0", "--demo-kubeconfig", str(missing / "x.kubeconfig")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "--demo-kubeconfig" in lines[0] and "does not exist" in lines[0], lines
    assert not (tmp_path / "new").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
@pytest.mark.parametrize(
    "flag",
    [
        "--kubeconfig",
        "--exporter-token-file",
        "--exporter-ca-file",
        "--prometheus-token-file",
        "--prometheus-ca-file",
        "--tls-cert-file",
        "--tls-private-key-file",
    ],
)
def test_start_up_files_that_are_no_regular_file_exit_2_never_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, special: str
) -> None:
    """Issue 21, item 5: a FIFO hung the adapter's start on each of these flags; every file a flag names goes through
    the bounded reader. Both CAs come from flags, so no API server is asked before the file is read."""
    path = tmp_path / "special" if special == "fifo" else Path(special)
    if special == "fifo":
        os.mkfifo(path)
    ca = CertificateAuthority.create("clients")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    ca.issue_server(["localhost"]).write(tmp_path / "tls.crt", tmp_path / "tls.key")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters: [{name: t, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: t, user: {token: x}}]\ncontexts: [{name: t, context: {cluster: t, user: t}}]\n"
    )
    files = {
        "--kubeconfig": kubeconfig,
        "--client-ca-file": tmp_path / "ca.crt",
        "--requestheader-client-ca-file": tmp_path / "ca.crt",
        "--tls-cert-file": tmp_path / "tls.crt",
        "--tls-private-key-file": tmp_path / "tls.key",
    }
    files[flag] = path
    argv = [f"{name}={value}" for name, value in files.items()]
    if flag.startswith("--prometheus-"):
        argv += ["--source=prometheus", "--prometheus-url=http://127.0.0.1:9", f"{flag}={path}"]
    elif flag.startswith("--exporter-"):
        argv += [f"{flag}={path}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flag} {path}: not a regular file" in err, err
