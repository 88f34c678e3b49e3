"""Scenarios about PID namespaces, shared by the simulator's and the exporter's tests."""

from __future__ import annotations

from simulation import build_scenario
from simulation.scenario import Scenario


def sidecar_exporter(driver: str, *, with_pods: bool = True) -> Scenario:
    """The exporter in the PID namespace of a pod whose GPU process (host PID 5001) has PID 7 there, on a GPU it
    shares with another pod's process whose host PID is 7: one number, two processes."""
    pods = [
        {
            "namespace": "a",
            "name": "with-exporter",
            "containers": [{"name": "app", "pids": [5001], "gpus": [{"gpu": 0, "replica": 0}]}],
        },
        {
            "namespace": "b",
            "name": "other",
            "containers": [{"name": "main", "pids": [7], "gpus": [{"gpu": 0, "replica": 1}]}],
        },
    ]
    return build_scenario(
        {
            "driver_version": driver,
            "exporter_pid_namespace": "container",
            "gpus": [{"model": "H100-SXM5-80GB"}],
            "processes": [
                {"pid": 5001, "namespace_pid": 7, "gpu": 0, "memory_mib": 1000, "load": {"baseline": 20}},
                {"pid": 7, "gpu": 0, "memory_mib": 3000, "load": {"baseline": 70}},
            ],
            "pods": pods if with_pods else [],
        },
        seed=3,
    )
