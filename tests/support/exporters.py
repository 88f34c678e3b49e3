"""Real exporter processes on simulated GPUs (`python -m exporter --simulate ...`: the real collector, attribution and
server over the NVML simulator, with the scenario's simulated kubelet and proc tree started in the process).

Each binds port 0 and its address is read back from its "serving ... on URL" log line (exporter/cli.py), so no port
is picked before it is bound (tests/support/loopback.py)."""

from __future__ import annotations

import time
import urllib.request
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from exporter.catalogue import Dialect
from tests.support.loopback import http_get
from tests.support.processes import ChildProcesses, clean_environment, python_module
from tests.support.tools import require_tool
from tests.support.waiting import patience
from toolkit.pods_contract import NodePods, parse_node_pods

# the line both services log once their port is bound (exporter/cli.py, adapter/server.py), at level info
SERVING_LINE = r"serving .* on (https?://[0-9.]+:[0-9]+)"


@dataclass(frozen=True)
class ExporterProcess:
    node: str
    processes: ChildProcesses = field(repr=False, compare=False)
    launched_at: float  # wall clock just before the process started: its scenario time 0 is after this
    process_name: str = ""  # its name among the ChildProcesses; default exporter-<node>

    @property
    def name(self) -> str:
        return self.process_name or f"exporter-{self.node}"

    @cached_property
    def url(self) -> str:
        """Its address, from its log once it serves (waits for that: exporters started together start meanwhile)."""
        return self.processes.wait_for_line(self.name, SERVING_LINE, patience(60)).group(1)

    @property
    def address(self) -> str:
        return self.url.removeprefix("http://")

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def document(self, namespace: str | None = None) -> NodePods:
        query = f"?namespace={namespace}" if namespace else ""
        with urllib.request.urlopen(f"{self.url}/pods{query}", timeout=5) as response:
            return parse_node_pods(response.read())

    def metrics(self) -> str:
        return http_get(f"{self.url}/metrics", timeout=5).decode()


def start_exporter(
    processes: ChildProcesses,
    node: str,
    scenario: str | Path,
    *,
    dialect: Dialect = Dialect.PROMETHEUS,
    interval: float = 1.0,
    seed: int | None = None,
    clock_offset: float = 0.0,
    port: int | None = None,
    process_name: str = "",
    extra_args: tuple[str, ...] = (),
    field_set: str = "default",
) -> ExporterProcess:
    """Start an exporter for `node` on a scenario (built-in name or file); see `serving` for when it is ready.

    `clock_offset` runs it on a node whose clock is that many seconds off, under libfaketime (Debian's `faketime`),
    which shifts the process's wall clock as a misconfigured node's would be shifted; its monotonic clock, which no
    misconfiguration shifts, is left alone (DONT_FAKE_MONOTONIC). `port` and `process_name`: a new process for a
    node whose exporter was stopped, on its old address (a DaemonSet's pod that comes back); without `port` it binds
    port 0. `extra_args`: further flags (`--engines`). It logs at level info: its "serving" line says where it
    listens."""
    args = [
        f"--simulate={scenario}", f"--node-name={node}", f"--listen=127.0.0.1:{port or 0}", f"--dialect={dialect}",
        f"--interval={interval:g}", "--log-level=info", f"--field-set={field_set}",
    ]  # fmt: skip
    if seed is not None:
        args.append(f"--seed={seed}")
    args += extra_args
    launched = time.time()
    command = python_module("exporter", *args)
    env = None
    if clock_offset:
        command = [require_tool("faketime"), "-f", f"{clock_offset:+g}s", *command]
        env = {**clean_environment(), "DONT_FAKE_MONOTONIC": "1"}
    exporter = ExporterProcess(node, processes, launched, process_name)
    processes.start(exporter.name, command, env=env)
    return exporter


def serving(processes: ChildProcesses, exporter: ExporterProcess, pods: int) -> bool:
    """Whether the exporter serves a `/pods` document with `pods` pods (AssertionError if it exited)."""
    processes.check_running(exporter.name)
    try:
        return len(exporter.document().pods) == pods
    except OSError:
        return False
