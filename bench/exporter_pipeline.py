"""Shared set-up of the exporter benchmarks: the real pipeline (simulator -> pynvml -> NvmlCollector -> PollLoop).

Scenarios: the built-in `h100x8`, and `mig56`, generated here: 8 x H100 80GB, each split into 7 MIG 1g.10gb instances
(56 instances), each with a process, so every MIG series exists.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.catalogue import FIELD_SETS, Dialect  # noqa: E402
from exporter.exposition import ExpositionRenderer  # noqa: E402
from exporter.loop import PollLoop  # noqa: E402
from exporter.nvml import CollectorSettings, NvmlCollector  # noqa: E402
from simulation import Simulator, build_scenario, install, load_scenario  # noqa: E402
from tests.support.processes import clean_environment  # noqa: E402

SCENARIOS = ("h100x8", "mig56")


def mig56_data() -> dict[str, Any]:
    """8 x H100 with 7 x 1g.10gb MIG instances each, every instance busy with one process."""
    gpus = [
        {
            "model": "H100-SXM5-80GB",
            "mig": [
                {"profile": "1g.10gb", "load": {"baseline": 20 + 9 * m, "waves": [{"amplitude": 5, "period_s": 60}]}}
                for m in range(7)
            ],
        }
        for _ in range(8)
    ]
    processes = [
        {"pid": 60000 + 10 * g + m, "gpu": g, "mig": m, "name": "python3", "memory_mib": 4000 + 100 * m}
        for g in range(8)
        for m in range(7)
    ]
    return {
        "description": "8 x H100 80GB, 7 x 1g.10gb MIG instances each (56 instances)",
        "seed": 56,
        "node": "mig56-node-1",
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "nvml_version": "12.550.54.15",
        "gpus": gpus,
        "processes": processes,
    }


def scenario(name: str) -> Any:
    if name == "mig56":
        return build_scenario(mig56_data(), origin="bench mig56", default_name="mig56")
    return load_scenario(name)


@contextmanager
def pipeline(
    name: str, dialect: Dialect = Dialect.DCGM, interval: float = 1.0, field_set: str = "all"
) -> Iterator[PollLoop]:
    """A started collector on the simulated scenario, reading `field_set` (exporter.catalogue.FIELD_SETS), wrapped in
    a PollLoop (not started: call poll_once or start)."""
    keys = FIELD_SETS[field_set]
    with install(Simulator(scenario(name))):
        collector = NvmlCollector(settings=CollectorSettings(enabled=keys, interval_seconds=interval))
        collector.start()
        try:
            renderer = ExpositionRenderer(dialect, selection=keys, interval_seconds=interval, version="bench")
            yield PollLoop(collector, renderer, interval=interval, node=f"{name}-node")
        finally:
            collector.close()


# ---- an exporter in its own process ------------------------------------------------------------------------------
def scenario_argument(name: str, workdir: Path) -> str:
    """What to pass to --simulate: a built-in name, or the generated scenario written to a YAML file."""
    if name != "mig56":
        return name
    path = workdir / "mig56.yaml"
    path.write_text(yaml.safe_dump(mig56_data(), sort_keys=False), encoding="utf-8")
    return str(path)


class ExporterProcess:
    """`python -m exporter --simulate ...` on an ephemeral loopback port; stop() sends SIGTERM and waits."""

    def __init__(self, simulate: str, *args: str, interval: float = 1.0) -> None:
        command = [sys.executable, "-m", "exporter", "--simulate", simulate, "--listen", "127.0.0.1:0"]
        command += ["--interval", str(interval), *args]
        # without the caller's GPU_PULSE_* variables: the exporter reads each as its flag and refuses one it lacks
        env = clean_environment()
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.url = self._wait_for_url()

    def _wait_for_url(self) -> str:
        assert self.process.stderr is not None
        deadline = time.monotonic() + 60
        said: list[str] = []
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            said.append(line.rstrip())
            found = re.search(r"serving .* on (http://\S+)", line)
            if found:
                threading.Thread(target=self._drain, daemon=True).start()
                return found.group(1)
        self.process.kill()
        raise RuntimeError("the exporter did not start: " + (" | ".join(said[-5:]) or "it said nothing"))

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for _ in self.process.stderr:
            pass

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(timeout=30)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used (from /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]
