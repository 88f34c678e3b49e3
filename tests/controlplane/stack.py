"""The control plane tests' cluster: Kubernetes' own API server and controllers (cluster.py), two GPU nodes whose
scheduler and kubelets the harness plays (nodes.py), an exporter per node on simulated GPUs whose pod-resources
answer and load follow the real pods, and the adapter registered as the chart registers it (registration.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client as k8s

from simulation import load_scenario
from simulation.kubelet import FakeKubelet
from tests.controlplane.cluster import ControlPlane, start_controlplane
from tests.controlplane.nodes import SCHEDULER_USER, GpuNode, GpuNodes, node_user
from tests.controlplane.registration import RegisteredAdapter, register_adapter
from tests.support.exporters import SERVING_LINE
from tests.support.processes import ChildProcesses, python_module
from tests.support.waiting import patience

NODES = {"gpu-node-a": 6, "gpu-node-b": 6}  # name -> H100 count


@dataclass(frozen=True)
class Cluster:
    plane: ControlPlane
    nodes: GpuNodes
    adapter: RegisteredAdapter
    processes: ChildProcesses
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def api(self) -> k8s.ApiClient:
        return self.plane.api_client()


def _start_node(
    plane: ControlPlane, processes: ChildProcesses, workdir: Path, name: str, gpus: int, seed: int
) -> tuple[GpuNode, str]:
    load_file = workdir / f"{name}.load.json"
    scenario_file = workdir / f"{name}.json"
    scenario_file.write_text(
        json.dumps({
            "name": name, "node": name, "seed": seed, "load_file": str(load_file),
            "gpus": [{"model": "H100-SXM5-80GB", "count": gpus}],
        }),
        encoding="utf-8",
    )  # fmt: skip
    scenario = load_scenario(str(scenario_file))
    kubelet = FakeKubelet(workdir / f"{name}.sock")
    kubelet.start()
    node = GpuNode(
        name=name,
        gpus=tuple(str(g.uuid) for g in scenario.gpus),
        kubelet=kubelet,
        load_file=load_file,
        api=k8s.CoreV1Api(plane.api_client(plane.kubeconfig(name, user=node_user(name), groups=("system:nodes",)))),
        host_ip=f"10.0.0.{seed}",
    )
    node.register()
    process = f"exporter-{name}"
    processes.start(
        process,
        python_module(
            "exporter", f"--simulate={scenario_file}", f"--node-name={name}", "--listen=127.0.0.1:0",
            f"--kubelet-socket={kubelet.socket_path}", "--kubelet-interval=1", "--interval=1", "--log-level=info",
        ),
    )  # fmt: skip
    return node, processes.wait_for_line(process, SERVING_LINE, patience(60)).group(1)


@contextmanager
def running_cluster(workdir: Path, adapter_args: tuple[str, ...] = ()) -> Iterator[Cluster]:
    """Start everything (the adapter with `adapter_args` beside its own); stop it all on exit. `timings` of the
    cluster: seconds from the start to each stage."""
    processes = ChildProcesses(workdir)
    began = time.monotonic()
    timings: dict[str, float] = {}
    nodes: dict[str, GpuNode] = {}
    try:
        plane = start_controlplane(processes, workdir / "plane")
        timings["control plane serving"] = time.monotonic() - began
        endpoints = {}
        for seed, (name, gpus) in enumerate(NODES.items(), start=1):
            nodes[name], endpoints[name] = _start_node(plane, processes, workdir, name, gpus, seed)
        scheduler = k8s.CoreV1Api(plane.api_client(plane.kubeconfig("scheduler", user=SCHEDULER_USER)))
        adapter = register_adapter(plane, processes, endpoints, extra_args=adapter_args)
        timings["adapter registered"] = time.monotonic() - began
        gpu_nodes = GpuNodes(nodes, scheduler)
        with gpu_nodes.running():
            yield Cluster(plane, gpu_nodes, adapter, processes, timings)
    finally:
        processes.stop_all()
        for node in nodes.values():
            node.kubelet.stop()
