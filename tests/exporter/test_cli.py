"""The command line: exit codes, one-line errors, and a real process serving, reloading and stopping on signals."""

from __future__ import annotations

import ctypes.util
import io
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from exporter.cli import StartupError, main, run
from exporter.nvml.errors import BUILTIN_SCENARIO_NAMES
from exporter.settings import COMMAND_LINE, load_settings
from simulation.loader import BUILTIN_SCENARIOS
from tests.support.waiting import patience
from toolkit.certs import CertificateAuthority

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_PULSE_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env | extra


# ---- configuration errors: exit 2, one line ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "environ", "names"),
    [
        (["--interval", "-1"], {}, "--interval"),
        (["--dialect", "influx"], {}, "--dialect"),
        ([], {"GPU_PULSE_LOG_FORMAT": "yaml"}, "GPU_PULSE_LOG_FORMAT"),
        ([], {"GPU_PULSE_LISTEN": "nowhere"}, "GPU_PULSE_LISTEN"),
        (["--bogus"], {}, "--bogus"),
        (["--collectors-exact"], {}, "--collectors-exact needs --collectors"),
    ],
)
def test_bad_configuration_exits_2_with_one_line(argv: list[str], environ: dict[str, str], names: str) -> None:
    stderr = io.StringIO()

    def never(settings: object) -> None:
        raise AssertionError("must not start")

    assert main(argv, environ, stderr, runner=never) == 2
    lines = stderr.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("gpu-pulse-exporter: error: ") and names in lines[0]


def test_a_bad_listen_address_says_what_is_accepted_once() -> None:
    stderr = io.StringIO()
    assert main(["--listen", "nowhere"], {}, stderr, runner=lambda settings: None) == 2
    line = stderr.getvalue().strip()
    assert line.count("host:port, [ipv6]:port or :port") == 1 and line.endswith("got 'nowhere'"), line


def _startup_error(argv: list[str]) -> StartupError:
    """The one-line error `run` stops with. The exporter listens before it reads its scenario, so it listens on an
    ephemeral loopback port unless the test names one: the default, 9400 on every address, may be another exporter's
    on a developer's machine."""
    if "--listen" not in argv:
        argv = ["--listen", "127.0.0.1:0", *argv]
    settings = load_settings(argv, {}, hostname=lambda: "h")
    with pytest.raises(StartupError) as error:
        run(settings)
    assert "\n" not in str(error.value)
    return error.value


def test_unreadable_collectors_file_exits_2(tmp_path: Path) -> None:
    error = _startup_error(["--collectors", str(tmp_path / "missing.csv"), "--simulate", "h100x8"])
    assert error.code == 2 and "--collectors" in str(error)


def test_malformed_collectors_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text("DCGM_FI_DEV_GPU_UTIL, sometimes, help\n")
    error = _startup_error(["--collectors", str(path), "--simulate", "h100x8"])
    assert error.code == 2 and "line 1" in str(error)


def test_a_name_that_is_no_dcgm_field_exits_2_with_the_nearest_spelling(tmp_path: Path) -> None:
    """dcgm-exporter refuses it ("could not find DCGM field"); so does gpu-pulse, and says what was meant."""
    path = tmp_path / "c.csv"
    path.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_GPU_UTILL, gauge, GPU utilization (in %).\n")
    error = _startup_error(["--collectors", str(path), "--simulate", "h100x8"])
    assert error.code == 2
    assert "line 2: 'DCGM_FI_DEV_GPU_UTILL' is no dcgm field" in str(error)
    assert "(did you mean DCGM_FI_DEV_GPU_UTIL?)" in str(error)


def test_unknown_scenario_exits_2() -> None:
    error = _startup_error(["--simulate", "no-such-scenario"])
    assert error.code == 2 and str(error).startswith("--simulate: ")


def test_bad_tls_or_auth_files_exit_2(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("garbage")
    (tmp_path / "key.pem").write_text("garbage")
    error = _startup_error(
        [
            "--simulate",
            "h100x8",
            "--tls-cert-file",
            str(tmp_path / "cert.pem"),
            "--tls-key-file",
            str(tmp_path / "key.pem"),
        ]
    )
    assert error.code == 2 and "--tls-cert-file" in str(error)
    error = _startup_error(["--simulate", "h100x8", "--auth-bearer-token-file", str(tmp_path / "none")])
    assert error.code == 2 and "--auth-bearer-token-file" in str(error)


def test_help_explains_units_and_defaults() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "--help"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "--interval SECONDS Seconds between two polls" in text and "[env GPU_PULSE_INTERVAL; default: 1.0]" in text
    assert "default: 0.0.0.0:9400" in text


def test_help_and_the_no_nvml_hint_name_every_built_in_scenario() -> None:
    assert set(BUILTIN_SCENARIO_NAMES) == set(BUILTIN_SCENARIOS)
    help_text = " ".join(COMMAND_LINE.parser().format_help().split())
    assert all(name in help_text for name in BUILTIN_SCENARIOS), help_text


def test_bad_flag_in_a_real_process_exits_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "--interval", "0"], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--interval" in result.stderr


# ---- a real process -------------------------------------------------------------------------------------------------
class Exporter:
    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no log line matching {pattern!r}; got: {''.join(self.log)}") from None
            self.log.append(line)
            found = re.search(pattern, line)
            if found:
                return found


@contextmanager
def running_exporter(*args: str, **env: str) -> Iterator[Exporter]:
    """`python -m exporter --listen 127.0.0.1:0 --interval 0.2 ARGS`, killed at the end if still running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--listen", "127.0.0.1:0", "--interval", "0.2", *args],
        stderr=subprocess.PIPE,
        text=True,
        env=_env(**env),
    )
    try:
        yield Exporter(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    with running_exporter("--simulate", "h100x8", GPU_PULSE_DIALECT="prometheus", NODE_NAME="cli-node") as running:
        yield running


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _readyz_after_the_first_poll(url: str) -> tuple[int, bytes]:
    """/readyz once the first poll has finished: the server logs "serving" as it starts, while the poll loop's first
    cycle may still be running on its own thread (a busy worker), when /readyz says only "no snapshot yet"."""
    for _ in range(200):
        status, body = _get(url + "/readyz")
        if b"no snapshot yet" not in body:
            break
        time.sleep(0.05)
    return status, body


def test_serves_reloads_on_sighup_and_stops_cleanly_on_sigterm(exporter: Exporter) -> None:
    url = exporter.wait_for(r"serving .* on (http://127\.0\.0\.1:\d+)").group(1)
    for _ in range(100):
        status, body = _get(url + "/metrics")
        if status == 200:
            break
        assert exporter.process.poll() is None, "the exporter exited"
        time.sleep(0.05)
    assert status == 200
    assert b'nvidia_gpu_utilization_ratio{gpu="0"' in body  # GPU_PULSE_DIALECT=prometheus
    assert b'node="cli-node"' in body  # NODE_NAME
    for name in (b"process_cpu_seconds_total", b"process_resident_memory_bytes", b"process_open_fds"):
        assert b"\n" + name + b" " in body, name  # the exporter process's own figures, as of the snapshot
    assert b"\ngpu_pulse_http_connections_max 512" in body, "the server's guard, as of the snapshot"
    exporter.process.send_signal(signal.SIGHUP)
    exporter.wait_for("SIGHUP: enumerating the GPUs again")
    exporter.wait_for(r"found 8 GPU")
    assert _get(url + "/metrics")[0] == 200
    exporter.process.send_signal(signal.SIGTERM)
    assert exporter.process.wait(timeout=20) == 0
    exporter.wait_for("stopped")


def test_a_burst_of_sighups_is_merged_and_sigterm_still_stops_at_once(exporter: Exporter) -> None:
    """200 SIGHUPs queued 200 enumerations, and SIGTERM then took 26 s (issue 42): they merge into one running and at
    most one after it."""
    exporter.wait_for(r"serving .* on http://")
    for _ in range(200):  # paced as a sender would: signals sent at once are one pending signal to the kernel
        exporter.process.send_signal(signal.SIGHUP)
        time.sleep(0.005)
    exporter.wait_for("SIGHUP: enumerating the GPUs again")
    exporter.process.send_signal(signal.SIGTERM)
    assert exporter.process.wait(timeout=patience(10)) == 0
    exporter.reader.join(timeout=10)
    while not exporter.lines.empty():
        exporter.log.append(exporter.lines.get())
    enumerations = sum("SIGHUP: enumerating the GPUs again" in line for line in exporter.log)
    assert 1 <= enumerations <= 20, enumerations  # one each time one ends while signals keep coming


def test_sigint_stops_cleanly_too(exporter: Exporter) -> None:
    exporter.wait_for(r"serving .* on http://")
    exporter.process.send_signal(signal.SIGINT)
    assert exporter.process.wait(timeout=20) == 0


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this host has a real libnvidia-ml")
def test_without_nvml_it_serves_not_ready_says_why_once_and_stops_cleanly() -> None:
    with running_exporter() as exporter:
        process = exporter.process
        warning = exporter.wait_for(r"NVML is not available: (.*)").group(1)
        url = exporter.wait_for(r"serving .* on (http://127\.0\.0\.1:\d+)").group(1)
        status, body = _readyz_after_the_first_poll(url)
        assert status == 503 and b"LIBRARY_NOT_FOUND" in body and b"runtimeClassName: nvidia" in body
        assert _get(url + "/healthz")[0] == 200
        assert b"gpu_pulse_nvml_up 0" in _get(url + "/metrics")[1]
        assert "--simulate SCENARIO" in warning and all(name in warning for name in BUILTIN_SCENARIOS), warning
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        assert sum("NVML is not available" in line for line in exporter.log) == 1


def test_an_exporter_started_before_the_driver_becomes_ready_when_it_loads(tmp_path: Path) -> None:
    scenario = tmp_path / "late-driver.yaml"
    scenario.write_text(
        "gpus: [{model: H100-SXM5-80GB, count: 2}]\ndriver_loaded: false\ntimeline: [{at: 6, action: load_driver}]\n"
    )  # 6 s: the exporter's start-up on a loaded CI worker must not pass the driver's load before /readyz is asked
    with running_exporter("--simulate", str(scenario), GPU_PULSE_DIALECT="prometheus") as exporter:
        exporter.wait_for(r"NVML is not available: the NVIDIA kernel module is not loaded")
        url = exporter.wait_for(r"serving .* on (http://127\.0\.0\.1:\d+)").group(1)
        status, body = _readyz_after_the_first_poll(url)
        assert status == 503 and b"DRIVER_NOT_LOADED" in body, body
        exporter.wait_for(r"found 2 GPU")
        for _ in range(100):
            if _get(url + "/readyz")[0] == 200:
                break
            time.sleep(0.05)
        status, body = _get(url + "/metrics")
        assert b"gpu_pulse_nvml_up 1" in body and b'nvidia_gpu_up{gpu="1"' in body
        exporter.process.send_signal(signal.SIGTERM)
        assert exporter.process.wait(timeout=20) == 0


def test_simulate_shared_shows_every_pod_with_no_other_setup() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--simulate", "shared", "--listen", "127.0.0.1:0", "--interval", "0.2"],
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    exporter = Exporter(process)
    try:
        url = exporter.wait_for(r"serving .* on (http://127\.0\.0\.1:\d+)").group(1)
        pods: set[str] = set()
        for _ in range(100):
            status, body = _get(url + "/metrics")
            pods = set(re.findall(rb'gpu_pulse_pod_device_info\{[^}]*pod="([^"]+)"', body))  # type: ignore[arg-type]
            if status == 200 and len(pods) == 8:
                break
            time.sleep(0.1)
        assert len(pods) == 8
        status, document = _get(url + "/pods")
        assert status == 200 and document.count(b'"share":"process"') >= 4
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.parametrize(
    ("environ", "argv", "node"),
    [
        ({}, [], "shared-node-1"),  # the scenario's own name (simulation/scenarios/shared.yaml)
        ({"NODE_NAME": "from-env"}, [], "from-env"),
        ({"NODE_NAME": "from-env"}, ["--node-name", "from-flag"], "from-flag"),
    ],
)
def test_a_simulated_node_is_named_by_its_scenario_unless_told_otherwise(
    environ: dict[str, str], argv: list[str], node: str
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--simulate", "shared", "--listen", "127.0.0.1:0", *argv],
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in _env(**environ).items() if k != "NODE_NAME" or "NODE_NAME" in environ},
    )
    try:
        url = Exporter(process).wait_for(r"serving .* on (http://127\.0\.0\.1:\d+)").group(1)
        status, body = 0, b""
        for _ in range(100):
            status, body = _get(url + "/metrics")
            if status == 200 and b"DCGM_FI_DEV_GPU_UTIL{" in body:
                break
            time.sleep(0.1)
        hostnames = set(re.findall(rb'Hostname="([^"]*)"', body))
        assert hostnames == {node.encode()}, hostnames
    finally:
        process.kill()
        process.wait(timeout=10)


# ---- --simulate with a real kubelet or /proc: explicit flags win ---------------------------------------------------
def test_an_explicit_kubelet_socket_and_proc_root_win_over_the_simulated_nodes(tmp_path: Path) -> None:
    from contextlib import ExitStack

    from exporter.attribution.attributor import KubeletPodAttributor
    from exporter.cli import _pod_side, _simulate
    from exporter.kubelet.podresources import ContainerResources, PodResources
    from simulation.kubelet import FakeKubelet

    socket_path = tmp_path / "real.sock"
    proc_root = tmp_path / "proc"
    proc_root.mkdir()
    real = FakeKubelet(socket_path, [PodResources("real-ns", "real-pod", (ContainerResources("main"),))])
    real.start()
    argv = ["--simulate", "shared", "--kubelet-socket", str(socket_path), "--proc-root", str(proc_root)]
    try:
        with ExitStack() as stack:
            settings = load_settings(argv, {}, hostname=lambda: "h")
            node = _simulate(settings, stack)
            assert node is not None and node.pod_side is not None
            assert not node.pod_side.kubelet.serving, "the simulated kubelet must not start"
            attributor = _pod_side(settings, node, stack)
            assert isinstance(attributor, KubeletPodAttributor)
            assert attributor.client.socket_path == socket_path
            assert attributor.owners is not None and attributor.owners.proc_root == proc_root
            assert attributor.pods is None and attributor.slices is None, "the scenario's pods are not the cluster's"
    finally:
        real.stop()


def test_a_missing_kubelet_socket_leaves_it_ready_and_says_so(tmp_path: Path) -> None:
    """Pod attribution on, no kubelet: ready (the GPUs' series are right), the reason in /readyz (docs/runbooks.md)."""
    socket_path = tmp_path / "pod-resources" / "kubelet.sock"
    with running_exporter("--simulate", "h100x8", "--kubelet-socket", str(socket_path)) as running:
        url = running.wait_for(r"serving .* on (http://127\.0\.0\.1:\d+)").group(1)
        for _ in range(100):
            status, body = _get(url + "/readyz")
            if status == 200:
                break
            time.sleep(0.05)
        assert status == 200, body
        text = body.decode()
        assert f"kubelet pod-resources unavailable (socket {socket_path} does not exist; " in text
        assert "--kubelet-socket (the Helm chart's kubeletPath value" in text and "no pod mapping yet" in text
        assert b"gpu_pulse_kubelet_up 0" in _get(url + "/metrics")[1]


def test_without_explicit_flags_the_simulated_node_serves_its_own_kubelet() -> None:
    from contextlib import ExitStack

    from exporter.attribution.attributor import KubeletPodAttributor
    from exporter.cli import _pod_side, _simulate

    with ExitStack() as stack:
        settings = load_settings(["--simulate", "shared"], {}, hostname=lambda: "h")
        node = _simulate(settings, stack)
        assert node is not None and node.pod_side is not None and node.pod_side.kubelet.serving
        attributor = _pod_side(settings, node, stack)
        assert isinstance(attributor, KubeletPodAttributor)
        assert attributor.client.socket_path == node.pod_side.socket_path
        assert attributor.owners is not None and attributor.owners.proc_root == node.pod_side.proc_root


def test_collectors_that_are_no_regular_file_exit_2(tmp_path: Path) -> None:
    fifo = tmp_path / "collectors.csv"
    os.mkfifo(fifo)  # would block start-up when opened for reading the ordinary way
    for path in (fifo, Path("/dev/zero")):
        error = _startup_error(["--collectors", str(path), "--simulate", "h100x8"])
        assert error.code == 2 and str(error).startswith(f"--collectors {path}: not a regular file")


def test_a_scenario_nested_a_thousand_levels_exits_2(tmp_path: Path) -> None:
    scenario = tmp_path / "deep.yaml"
    scenario.write_text("gpus: " + "[" * 1000 + "]" * 1000 + "\n")
    error = _startup_error(["--simulate", str(scenario)])
    assert error.code == 2 and "nested too deep" in str(error)


def test_a_passphrase_protected_tls_key_exits_2_naming_the_flag(tmp_path: Path) -> None:
    issued = CertificateAuthority.create("ca").issue_server(["localhost"])
    (tmp_path / "tls.crt").write_bytes(issued.cert_pem)
    encrypted = serialization.BestAvailableEncryption(b"secret")
    key = issued.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encrypted)
    (tmp_path / "tls.key").write_bytes(key)
    error = _startup_error(
        [
            "--simulate",
            "h100x8",
            "--tls-cert-file",
            str(tmp_path / "tls.crt"),
            "--tls-private-key-file",
            str(tmp_path / "tls.key"),
        ]
    )
    assert error.code == 2 and "--tls-private-key-file" in str(error) and "passphrase" in str(error)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
@pytest.mark.parametrize(
    "flag", ["--auth-bearer-token-file", "--auth-basic-file", "--kubeconfig", "--tls-cert-file", "--tls-key-file"]
)
def test_start_up_files_that_are_no_regular_file_exit_2_never_hang(tmp_path: Path, flag: str, special: str) -> None:
    """Issue 21, item 5: every file a flag names goes through the bounded reader (a FIFO hung start-up, `/dev/zero` as
    --auth-basic-file grew the exporter to 9.5 GB)."""
    path = tmp_path / "special" if special == "fifo" else Path(special)
    if special == "fifo":
        os.mkfifo(path)
    issued = CertificateAuthority.create("ca").issue_server(["localhost"])
    issued.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    argv = ["--simulate", "shared", flag, str(path)]  # shared: a node with pods, so --kubeconfig is read
    if flag == "--tls-cert-file":
        argv += ["--tls-key-file", str(tmp_path / "tls.key")]
    elif flag == "--tls-key-file":
        argv += ["--tls-cert-file", str(tmp_path / "tls.crt")]
    error = _startup_error(argv)
    shown = "--tls-private-key-file" if flag == "--tls-key-file" else flag
    assert error.code == 2 and shown in str(error) and f"{path}: not a regular file" in str(error), str(error)


@pytest.mark.parametrize("exact", [False, True])
def test_collectors_exact_serves_the_file_alone(tmp_path: Path, exact: bool) -> None:
    """A team with a fixed series budget serves exactly its counters CSV, as dcgm-exporter does; by default the
    fields the shipped alerts read are served too. Either way one log line names them."""
    csv = tmp_path / "counters.csv"
    csv.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\nDCGM_FI_DEV_POWER_USAGE, gauge, Power.\n")
    flags = ["--simulate", "h100x8", "--dialect", "dcgm", "--collectors", str(csv)]
    with running_exporter(*flags, *(["--collectors-exact"] if exact else [])) as running:
        said = running.wait_for(r"leaves out what the shipped alerts read; (.*)").group(1)
        url = running.wait_for(r"serving .* on (http://127\.0\.0\.1:\d+)").group(1)
        families: set[str] = set()
        for _ in range(100):
            status, body = _get(url + "/metrics")
            families = set(re.findall(r"^# TYPE (DCGM_FI_\S+) ", body.decode(), re.M))
            if status == 200 and "DCGM_FI_DEV_GPU_UTIL" in families:
                break
            time.sleep(0.1)
    assert "DCGM_FI_DEV_GPU_TEMP" in said and "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in said
    if exact:
        assert families == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"}
        assert said.startswith("served exactly (--collectors-exact)")
    else:
        assert {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"} <= families
        assert said.startswith("serving these too: ") and said.endswith("(--collectors-exact serves the file alone)")
