"""A simulated GPU node in this process, for `--simulate`, the tests and the demo.

It composes what a real node would have around the exporter: the NVML simulator installed under pynvml, the fake
kubelet serving the scenario's pods on a unix socket, a fake proc tree with their cgroups, and the scenario's pods and
DRA ResourceSlices as a pod directory and a slice index (where a real node would watch the Kubernetes API). The
simulator stands in for hardware and outside services only; this module is the one place that hands those stand-ins
to our real code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from exporter.attribution.attributor import StaticResourceSlices
from exporter.attribution.directory import StaticPodDirectory
from exporter.attribution.resourceslices import ResourceSliceIndex, slice_from_object
from exporter.nvml.pidspace import PidNamespace
from simulation import Simulator, install, uninstall
from simulation.dra import resource_slices_of
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
            uses_claims=any(c.claims for c in pod.containers),
        )
        for pod in scenario.pods
    )


def pid_namespace_of(scenario: Scenario) -> PidNamespace:
    """The PID namespace the scenario puts the exporter in (the simulated driver answers for that caller)."""
    return PidNamespace(scenario.exporter_pid_namespace == "host")


def static_directory_of(scenario: Scenario) -> StaticPodDirectory:
    return StaticPodDirectory(pods_of(scenario))


def static_slices_of(scenario: Scenario) -> StaticResourceSlices | None:
    """The scenario's ResourceSlices as the slice watch would index them; None without DRA claims."""
    objects = resource_slices_of(scenario)
    if not objects:
        return None
    return StaticResourceSlices(ResourceSliceIndex(e for o in objects if (e := slice_from_object(o)) is not None))


@dataclass(frozen=True, slots=True)
class SimulatedNode:
    """What `start_simulated_node` started; `stop()` undoes all of it."""

    simulator: Simulator
    pod_side: SimulatedPodSide | None  # None when the scenario has no pods
    directory: StaticPodDirectory
    slices: StaticResourceSlices | None = None  # None when the scenario has no DRA claims

    @property
    def pid_namespace(self) -> PidNamespace:
        return pid_namespace_of(self.simulator.scenario)

    def stop(self) -> None:
        if self.pod_side is not None:
            self.pod_side.stop()
        uninstall()


def start_simulated_node(
    scenario: Scenario,
    *,
    seed: int | None = None,
    workdir: Path | None = None,
    serve_kubelet: bool = True,
    kernel_log_path: Path | None = None,
) -> SimulatedNode:
    """Install the NVML simulator for `scenario` and, when it has pods, start its kubelet (unless `serve_kubelet` is
    False: a real kubelet is used) and write its proc tree. The simulated driver's kernel log (its Xid lines) goes to
    `kernel_log_path` when one is given."""
    simulator = Simulator(scenario, seed=seed, kernel_log_path=kernel_log_path)
    install(simulator)
    try:
        pod_side = start_simulated_pod_side(scenario, workdir, serve_kubelet=serve_kubelet) if scenario.pods else None
    except BaseException:
        uninstall()
        raise
    return SimulatedNode(simulator, pod_side, static_directory_of(scenario), static_slices_of(scenario))
