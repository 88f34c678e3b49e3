"""Shared set-up of the attribution benchmarks: a simulated node with pods, and the real pod side on it.

`busy_node()`: 8 x H100 80GB, each time-sliced between 4 pods (one process each, own load), plus 68 pods without GPUs,
so 100 pods on the node. `node(...)` starts the NVML simulator, the real collector, the fake kubelet with the
scenario's pods, a fake proc tree, the attributor and the /pods builder, wrapped in a PollLoop (not started).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pynvml

from exporter.attribution.assemble import build_pod_side
from exporter.attribution.attributor import KubeletPodAttributor
from exporter.attribution.pods_builder import PodsDocumentBuilder
from exporter.catalogue import Dialect
from exporter.exposition import ExpositionRenderer
from exporter.loop import PollLoop
from exporter.nvml import CollectorSettings, NvmlCollector
from simulation import Scenario, Simulator, build_scenario, install
from simulation.kubelet import SimulatedPodSide, start_simulated_pod_side
from simulation.node import static_directory_of

GPUS = 8
PODS_PER_GPU = 4
PODS_ON_NODE = 100


def busy_node_data() -> dict[str, Any]:
    gpus = [{"model": "H100-SXM5-80GB"} for _ in range(GPUS)]
    processes = []
    pods: list[dict[str, Any]] = []
    for g in range(GPUS):
        for r in range(PODS_PER_GPU):
            pid = 70000 + 10 * g + r
            load = {"baseline": 5 + 6 * r, "waves": [{"amplitude": 3, "period_s": 40 + 7 * r}], "noise": 1}
            processes.append({"pid": pid, "gpu": g, "name": "python3", "memory_mib": 2000 + 500 * r, "load": load})
            pods.append(
                {
                    "namespace": f"team-{r}",
                    "name": f"infer-{g}-{r}",
                    "labels": {"app": "infer", "gpu": str(g)},
                    "containers": [
                        {"name": "proxy", "sidecar": True, "pids": [90000 + 10 * g + r]},
                        {"name": "server", "gpus": [{"gpu": g, "replica": r}], "pids": [pid]},
                    ],
                }
            )
    for k in range(PODS_ON_NODE - len(pods)):
        pods.append({"namespace": "web", "name": f"web-{k}", "containers": [{"name": "app", "pids": [95000 + k]}]})
    return {
        "description": f"{GPUS} x H100, {PODS_PER_GPU} time-sliced pods each, {PODS_ON_NODE} pods on the node",
        "seed": 11,
        "node": "busy-node-1",
        "gpus": gpus,
        "processes": processes,
        "pods": pods,
    }


def busy_node() -> Scenario:
    return build_scenario(busy_node_data(), origin="bench busy node", default_name="busy-node")


@dataclass(frozen=True, slots=True)
class Node:
    loop: PollLoop
    collector: NvmlCollector
    attributor: KubeletPodAttributor | None
    side: SimulatedPodSide | None
    builder: PodsDocumentBuilder | None


@contextmanager
def node(
    scenario: Scenario,
    *,
    attribution: bool = True,
    interval: float = 1.0,
    kubelet_interval: float = 5.0,
    dialect: Dialect = Dialect.DCGM,
) -> Iterator[Node]:
    """The real pipeline on a simulated node; with `attribution`, the pod side too (kubelet already listed once)."""
    side = start_simulated_pod_side(scenario) if attribution else None
    attributor = builder = None
    try:
        with install(Simulator(scenario)):
            collector = NvmlCollector(pynvml, CollectorSettings(interval_seconds=interval))
            collector.start()
            try:
                if side is not None:
                    attributor = build_pod_side(
                        node_name=scenario.node,
                        kubelet_socket=side.socket_path,
                        kubelet_interval=kubelet_interval,
                        proc_root=side.proc_root,
                        pod_labels="app",
                        directory=static_directory_of(scenario),
                    )
                    attributor.start()
                    attributor.client.refresh()
                    _wait_listed(attributor)
                    builder = PodsDocumentBuilder(interval_seconds=interval)
                renderer = ExpositionRenderer(dialect, interval_seconds=interval, version="bench")
                loop = PollLoop(
                    collector, renderer, interval=interval, node=scenario.node, attributor=attributor, pods_view=builder
                )
                yield Node(loop, collector, attributor, side, builder)
            finally:
                if attributor is not None:
                    attributor.close()
                collector.close()
    finally:
        if side is not None:
            side.stop()


def _wait_listed(attributor: KubeletPodAttributor, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while attributor.client.state.pods is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the fake kubelet did not answer: {attributor.client.state.last_error}")
        time.sleep(0.01)
