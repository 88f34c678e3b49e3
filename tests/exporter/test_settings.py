"""Configuration: flags, GPU_PULSE_* variables, defaults; one clear line for any bad value."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.catalogue import Dialect
from exporter.settings import COMMAND_LINE, ExporterSettings, load_settings
from toolkit.settings import ListenAddress, SettingsError, parse_listen


def load(argv: list[str], env: dict[str, str] | None = None) -> ExporterSettings:
    return load_settings(argv, env or {}, hostname=lambda: "the-host")


def test_defaults() -> None:
    settings = load([])
    assert settings.listen == ListenAddress("0.0.0.0", 9400)
    assert settings.interval == 1.0
    assert settings.dialect is Dialect.DCGM
    assert settings.simulate is None and settings.seed is None
    assert settings.node_name == "the-host"
    assert (settings.log_level, settings.log_format) == ("info", "text")
    assert settings.collectors is None


def test_flags_win_over_variables_which_win_over_defaults() -> None:
    env = {"GPU_PULSE_INTERVAL": "5", "GPU_PULSE_DIALECT": "prometheus", "GPU_PULSE_LOG_FORMAT": "json"}
    settings = load(["--interval", "0.5"], env)
    assert settings.interval == 0.5
    assert settings.dialect is Dialect.PROMETHEUS
    assert settings.log_format == "json"


def test_every_setting_is_a_flag_and_a_variable() -> None:
    helptext = COMMAND_LINE.parser().format_help()
    for name in ExporterSettings.model_fields:
        assert COMMAND_LINE.flag(name) in helptext
        assert COMMAND_LINE.env(name) in helptext
    assert "seconds" in helptext.lower() and "default: 1.0" in helptext


def test_node_name_falls_back_to_node_name_then_host_name() -> None:
    assert load([], {"NODE_NAME": "k8s-node-7"}).node_name == "k8s-node-7"
    assert load([], {"NODE_NAME": "k8s-node-7", "GPU_PULSE_NODE_NAME": "explicit"}).node_name == "explicit"
    assert load(["--node-name", "flag"], {"NODE_NAME": "k8s-node-7"}).node_name == "flag"


def test_paths_and_case_insensitive_choices(tmp_path: Path) -> None:
    settings = load(["--collectors", str(tmp_path / "c.csv"), "--log-level", "DEBUG"], {"GPU_PULSE_SEED": "7"})
    assert settings.collectors == tmp_path / "c.csv"
    assert settings.log_level == "debug"
    assert settings.seed == 7


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["--interval", "0"], {}, "--interval: Input should be greater than or equal to 0.05"),
        (["--interval", "1e-300"], {}, "--interval: Input should be greater than or equal to 0.05"),
        (["--interval", "abc"], {}, "--interval: Input should be a valid number"),
        (["--interval", "inf"], {}, "--interval: Input should be a finite number"),
        ([], {"GPU_PULSE_INTERVAL": "-1"}, "GPU_PULSE_INTERVAL: Input should be greater than or equal to 0.05"),
        (["--dialect", "graphite"], {}, "--dialect: Input should be 'dcgm' or 'prometheus'"),
        ([], {"GPU_PULSE_DIALECT": "x"}, "GPU_PULSE_DIALECT: Input should be 'dcgm' or 'prometheus'"),
        (["--listen", "9400"], {}, "--listen: expected host:port"),
        (["--listen", "::1:9400"], {}, "--listen: put an IPv6 address in brackets"),
        (["--listen", "[zz]:1"], {}, "--listen: 'zz' is not an IPv6 address"),
        ([], {"GPU_PULSE_LISTEN": "host:70000"}, "GPU_PULSE_LISTEN: expected host:port"),
        (["--log-level", "loud"], {}, "--log-level: Input should be 'debug', 'info', 'warning' or 'error'"),
        (["--log-format", "xml"], {}, "--log-format: Input should be 'text' or 'json'"),
        (["--seed", "-3"], {}, "--seed: Input should be greater than or equal to 0"),
        (["--tls-cert-file", "c.pem"], {}, "--tls-cert-file and --tls-private-key-file go together"),
        (
            ["--auth-bearer-token-file", "t", "--auth-basic-file", "b"],
            {},
            "--auth-bearer-token-file and --auth-basic-file exclude each other",
        ),
        (["--pod-labels", "app"], {}, "--pod-labels needs --kubernetes: pod labels come from the Kubernetes API"),
        ([], {"GPU_PULSE_POD_LABELS": "app|team"}, "--pod-labels needs --kubernetes"),
        (["--no-such-flag"], {}, "unrecognized arguments: --no-such-flag"),
        (["--interval"], {}, "argument --interval: expected one argument"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_flag_or_variable(
    argv: list[str], env: dict[str, str], expected: str
) -> None:
    with pytest.raises(SettingsError) as error:
        load(argv, env)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(expected), message


def test_pod_labels_with_a_source_of_pod_labels() -> None:
    assert load(["--pod-labels", "app", "--kubernetes"]).pod_labels == "app"
    assert load(["--pod-labels", "app", "--kubeconfig", "k.yaml"]).pod_labels == "app"
    assert load(["--pod-labels", "app", "--simulate", "shared"]).pod_labels == "app", "the scenario's pods' labels"


def test_the_numbers_a_flag_accepts_are_named() -> None:
    with pytest.raises(SettingsError, match=r"accepts a number of seconds from 0.05 to 3600"):
        load(["--interval", "0"])


# ---- --listen ------------------------------------------------------------------------------------------------------
hosts = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?(\.[a-z]([a-z0-9-]{0,10}[a-z0-9])?){0,3}", fullmatch=True),
)


@given(hosts, st.integers(0, 65535))
def test_listen_round_trip(host: str, port: int) -> None:
    address = parse_listen(f"{host}:{port}")
    assert address == ListenAddress(host, port)
    assert parse_listen(str(address)) == address


@given(st.ip_addresses(v=6), st.integers(0, 65535))
def test_listen_ipv6_round_trip(host: ipaddress.IPv6Address, port: int) -> None:
    address = parse_listen(f"[{host}]:{port}")
    assert address == ListenAddress(str(host), port)
    assert parse_listen(str(address)) == address


@given(st.text(max_size=40))
def test_listen_garbage_is_a_value_error_only(text: str) -> None:
    try:
        address = parse_listen(text)
    except ValueError as error:
        assert "\n" not in str(error)
    else:
        assert 0 <= address.port <= 65535
        assert address.host


def test_listen_all_interfaces() -> None:
    assert parse_listen(":9400") == ListenAddress("0.0.0.0", 9400)
    assert parse_listen("[::]:9400") == ListenAddress("::", 9400)
