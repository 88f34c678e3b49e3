"""A simulated GPU node in this process, for `--simulate`, the tests and the demo.

It composes what a real node would have around the exporter: the NVML simulator installed under pynvml, the fake
kubelet serving the scenario's pods on a unix socket, a fake proc tree with their cgroups, and the scenario's pods as a
pod directory (where a real node would watch the Kubernetes API). The simulator stands in for hardware and outside
services only; this module is the one place that hands those stand-ins to our real code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from exporter.attribution.directory import StaticPodDirectory
from simulation import Simulator, install, uninstall
from simulation.kubelet import SimulatedPodSide, start_simulated_pod_side
from simulation.scenario import Scenario
from toolkit.labelset import LabelSet
from toolkit.pods import Pod


def pods_of(scenario: Scenario) -> tuple[Pod, ...]:
    """The scenario's pods as the pod watch would know them (UID, labels, container ids)."""
    return tuple(
        Pod(
            namespace=pod.namespace,
            name=pod.name,
            uid=str(pod.uid).lower(),
            node=scenario.node,
            labels=LabelSet(pod.labels),
            phase="Running",
            containers=LabelSet({str(c.id).lower(): c.name for c in pod.containers if c.id}),
        )
        for pod in scenario.pods
    )


def static_directory_of(scenario: Scenario) -> StaticPodDirectory:
    return StaticPodDirectory(pods_of(scenario))


@dataclass(frozen=True, slots=True)
class SimulatedNode:
    """What `start_simulated_node` started; `stop()` undoes all of it."""

    simulator: Simulator
    pod_side: SimulatedPodSide | None  # None when the scenario has no pods
    directory: StaticPodDirectory

    def stop(self) -> None:
        if self.pod_side is not None:
            self.pod_side.stop()
        uninstall()


def start_simulated_node(scenario: Scenario, *, seed: int | None = None, workdir: Path | None = None) -> SimulatedNode:
    """Install the NVML simulator for `scenario` and, when it has pods, start its kubelet and proc tree."""
    simulator = Simulator(scenario, seed=seed)
    install(simulator)
    try:
        pod_side = start_simulated_pod_side(scenario, workdir) if scenario.pods else None
    except BaseException:
        uninstall()
        raise
    return SimulatedNode(simulator, pod_side, static_directory_of(scenario))
