"""The demo as a new user runs it: started in its own process (stdout a file, not a terminal), waited for until its
kubeconfig appears, asked with the exact kubectl commands it prints, then stopped with SIGTERM or SIGINT.

Until `gpu-pulse-adapter --demo` is wired, the process runs `run_demo` through `python -c`.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from adapter.quantity import parse_quantity
from tests.support.hpa import hpa_desired_replicas
from tests.support.kubectl import run_kubectl
from tests.support.loopback import http_get
from tests.support.processes import clean_environment, stop_process
from tests.support.tools import require_tool
from tests.support.waiting import patience, wait_for
from toolkit.pods_contract import NodePods, parse_node_pods

pytestmark = pytest.mark.timeout(180)

DEPLOYMENT_PREFIX = "llm-inference-"
ENTRY = ("-m", "adapter", "--demo")  # the README's command, `gpu-pulse-adapter --demo`
NODE_LINE = re.compile(r"node (\S+): exporter (http://\S+) \(pid (\d+)\)")
SUMMARY_LINE = re.compile(
    r"llm-inference: (\d+) pods, gpu_utilization avg ([\d.]+)% \((.*)\); HPA at 60%: (\d+) -> (\d+) replicas"
)


@dataclass
class RunningDemo:
    process: subprocess.Popen[bytes]
    cwd: Path
    stdout: Path
    stderr: Path
    tmpdir: Path
    kubeconfig: Path

    def output(self) -> str:
        return self.stdout.read_text(errors="replace")

    def exporters(self) -> dict[str, tuple[str, int]]:
        """node -> (exporter URL, pid), as the demo printed them."""
        return {m[1]: (m[2], int(m[3])) for m in NODE_LINE.finditer(self.output())}

    def commands(self) -> list[str]:
        return [line.strip() for line in self.output().splitlines() if line.strip().startswith("kubectl ")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


@contextmanager
def running_demo(tmp_path: Path, *extra: str) -> Iterator[RunningDemo]:
    """The demo started as the README says, with `extra` flags, until its kubeconfig appears; stopped afterwards."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    # the demo's and its exporters' temporary files go here (short: the simulated kubelet's unix socket lives there)
    tmpdir = Path(tempfile.mkdtemp(prefix="gpd-", dir="/tmp"))
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    kubeconfig = Path("gpu-pulse-demo.kubeconfig")  # relative, as the default: the printed commands use it
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, *ENTRY, "--listen", "127.0.0.1:0", "--demo-kubeconfig", str(kubeconfig), *extra],
            cwd=cwd, env=clean_environment({"TMPDIR": str(tmpdir)}), stdout=out, stderr=err,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    running = RunningDemo(process, cwd, stdout, stderr, tmpdir, cwd / kubeconfig)
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"the demo exited ({process.returncode}): {stderr.read_text()}")
            return running.kubeconfig.exists()

        wait_for(ready, "the demo's kubeconfig", patience(90))
        yield running
    finally:
        stop_process(process, grace=20)
        for _, pid in running.exporters().values():  # never leave an exporter behind, even on failure
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(tmpdir, ignore_errors=True)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[RunningDemo]:
    with running_demo(tmp_path) as running:
        yield running


def _documents(demo: RunningDemo) -> dict[str, NodePods]:
    return {
        node: parse_node_pods(http_get(f"{url}/pods?namespace=demo", timeout=5))
        for node, (url, _) in demo.exporters().items()
    }


def _exporter_figures(demo: RunningDemo) -> dict[str, float]:
    """The exporters' own figure of each llm-inference pod: the mean of its devices' utilization."""
    figures = {}
    for document in _documents(demo).values():
        for pod in document.pods:
            if pod.name.startswith(DEPLOYMENT_PREFIX):
                values = [d.utilization_percent for c in pod.containers for d in c.devices]
                known = [v for v in values if v is not None]
                figures[pod.name] = sum(known) / len(known)
    return figures


def stops_cleanly(demo: RunningDemo, signum: signal.Signals) -> None:
    children = [pid for _, pid in demo.exporters().values()]
    assert len(children) == 3 and all(_alive(pid) for pid in children)
    demo.process.send_signal(signum)
    assert demo.process.wait(timeout=30) == 0, demo.stderr.read_text()
    assert [pid for pid in children if _alive(pid)] == [], "exporter processes outlived the demo"
    assert not demo.kubeconfig.exists(), "the kubeconfig of a stopped demo is left behind"
    assert list(demo.tmpdir.iterdir()) == [], "the demo's temporary directory is left behind"
    assert "stopped" in demo.output().splitlines()[-1]


def test_the_printed_kubectl_commands_answer_and_sigterm_stops_everything(demo: RunningDemo) -> None:
    require_tool("kubectl")
    commands = demo.commands()
    assert len(commands) == 16
    answers = {}
    truth = _exporter_figures(demo)
    nodes = set(demo.exporters())
    # the cluster's objects as kubectl prints them from the stand-in's Tables: kube-apiserver's columns, not NAME/AGE
    expected = {
        "pods": ("NAME READY STATUS RESTARTS AGE", set(truth) | {"embeddings-0", "embeddings-1"}),
        "deploy": ("NAME READY UP-TO-DATE AVAILABLE AGE", {"llm-inference"}),
        "statefulsets": ("NAME READY AGE", {"embeddings"}),
        "nodes": ("NAME STATUS ROLES AGE VERSION GPU.PRODUCT", nodes),
        "hpa": ("NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE", {"llm-inference"}),
    }
    for command in commands:
        argv = shlex.split(command)
        assert argv[:3] == ["kubectl", "--kubeconfig", "gpu-pulse-demo.kubeconfig"]
        if "--raw" not in argv:  # the cluster's own objects, through the Kubernetes API stand-in
            done = subprocess.run(argv, cwd=demo.cwd, capture_output=True, text=True, timeout=30, check=False)
            assert done.returncode == 0, f"{command}: {done.stderr}"
            header, *rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
            columns, names = expected.pop(argv[4])
            assert " ".join(header) == columns, (command, done.stdout)
            assert {row[0] for row in rows} >= names, (command, done.stdout)
            if argv[4] == "pods":
                assert {row[2] for row in rows} == {"Running"} and {row[1] for row in rows} == {"1/1"}
            if argv[4] == "nodes":
                assert {row[1] for row in rows} == {"Ready"} and {row[5] for row in rows} == {"NVIDIA-H100-80GB-HBM3"}
            continue
        result = run_kubectl(argv, cwd=demo.cwd)
        assert result.code == 0, f"{command}: {result.stderr}"
        answers[argv[-1]] = result.body
    assert len(truth) == 4
    now = time.time()
    hpa_query = next(path for path in answers if "/v1beta2/" in path and "pods/*" in path)
    items = {i["describedObject"]["name"]: i for i in answers[hpa_query]["items"]}
    assert set(items) == set(truth)
    for name, item in items.items():
        assert abs(float(parse_quantity(item["value"])) - truth[name]) <= 3, (name, item, truth[name])
        sampled = calendar.timegm(time.strptime(item["timestamp"], "%Y-%m-%dT%H:%M:%SZ"))
        assert now - sampled <= 5 + 1 + 2, f"{name}: stale figure {item['timestamp']}"  # max-age, rounding, kubectl
    v1beta1 = next(path for path in answers if "/v1beta1/" in path and "custom.metrics" in path)
    assert {i["describedObject"]["name"] for i in answers[v1beta1]["items"]} == set(truth)
    mean = sum(truth.values()) / len(truth)
    deployment = next(body for path, body in answers.items() if "deployments.apps" in path)
    [whole] = deployment["items"]
    assert whole["describedObject"]["kind"] == "Deployment"
    assert abs(float(parse_quantity(whole["value"])) - mean) <= 3
    external = next(body for path, body in answers.items() if "external.metrics" in path)
    assert abs(float(parse_quantity(external["items"][0]["value"])) - mean) <= 3
    assert not expected, f"no command printed for {sorted(expected)}"
    stateful = next(body for path, body in answers.items() if "statefulsets.apps" in path)
    assert [(i["describedObject"]["kind"], i["describedObject"]["name"]) for i in stateful["items"]] == [
        ("StatefulSet", "embeddings")
    ]
    by_node = next(body for path, body in answers.items() if "/nodes/" in path)
    assert {i["describedObject"]["name"] for i in by_node["items"]} == nodes
    discovery = next(body for path, body in answers.items() if path.endswith("/v1beta2"))
    assert "pods/gpu_utilization" in {r["name"] for r in discovery["resources"]}
    # the summary, as log lines: each pod's figure and what an HPA at 60 % would do with them
    wait_for(lambda: len(SUMMARY_LINE.findall(demo.output())) >= 3, "three summary lines", 20)
    output = demo.output()
    assert "\x1b[" not in output, "screen control codes on a stdout that is not a terminal"
    checked = 0
    for count, _, pods, current, desired in SUMMARY_LINE.findall(output):
        values = [Decimal(v) for v in re.findall(r"llm-inference-\S+ ([\d.]+)%", pods)]
        assert int(count) == int(current) == len(values) == 4
        # the line shows one decimal: check the lines where that rounding cannot change the HPA's answer
        rounding = (Decimal("-0.05"), Decimal(0), Decimal("0.05"))
        possible = {hpa_desired_replicas([v + d for v in values], Decimal(60)) for d in rounding}
        if len(possible) == 1:
            assert int(desired) == possible.pop(), f"wrong HPA suggestion in: {pods} -> {desired}"
            checked += 1
    assert checked
    # the HPA's status, written from the same figures: TARGETS shows the pods' average against 60
    done = subprocess.run(
        shlex.split(next(c for c in commands if " get hpa " in c)), cwd=demo.cwd, capture_output=True, text=True,
        timeout=30, check=False,
    )  # fmt: skip
    row = done.stdout.splitlines()[1].split()
    assert row[1] == "Deployment/llm-inference" and re.fullmatch(r"\d+m?/60", row[2]), done.stdout
    assert (row[3], row[4], row[5]) == ("1", "8", "4"), done.stdout
    _the_engines_are_read_where_the_pod_objects_say(demo)
    stops_cleanly(demo, signal.SIGTERM)


def _the_engines_are_read_where_the_pod_objects_say(demo: RunningDemo) -> None:
    """Each serving pod's object in the demo's API names its IP and its engine's port; its engine answers there with
    its own names, and the exporter of its node serves that engine's figures in /pods."""
    done = subprocess.run(
        ["kubectl", "--kubeconfig", "gpu-pulse-demo.kubeconfig", "get", "pods", "-n", "demo", "-o", "json"],
        cwd=demo.cwd, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    engines = {}
    for pod in json.loads(done.stdout)["items"]:
        port = pod["metadata"].get("annotations", {}).get("gpu-pulse.dev/engine-port")
        if port is not None:
            engines[pod["metadata"]["name"]] = f"http://{pod['status']['podIP']}:{port}/metrics"
    assert {name for name in engines if name.startswith("llm-inference")} == set(_exporter_figures(demo))
    assert {"embeddings-0", "embeddings-1"} <= set(engines)
    for name, url in engines.items():
        body = http_get(url, timeout=5).decode()
        assert ("vllm:num_requests_waiting" if name.startswith("llm") else "tgi_queue_size") in body, name

    def all_ready() -> bool:
        served = {pod.name: pod.inference for document in _documents(demo).values() for pod in document.pods}
        return all(
            (found := served.get(name)) is not None
            and found.state == "ready"
            and found.engine == ("vllm" if name.startswith("llm") else "tgi")
            for name in engines
        )

    wait_for(all_ready, "every serving pod's engine figures in /pods", 30)


def test_ctrl_c_stops_everything(demo: RunningDemo) -> None:
    stops_cleanly(demo, signal.SIGINT)
