"""A simulated GPU node in this process, for `--simulate`, the tests and the demo.

It composes what a real node would have around the exporter: the NVML simulator installed under pynvml, the fake
kubelet serving the scenario's pods on a unix socket, a fake proc tree with their cgroups, and the scenario's pods and
DRA ResourceSlices as a pod directory and a slice index (where a real node would watch the Kubernetes API). The
simulator stands in for hardware and outside services only; this module is the one place that hands those stand-ins
to our real code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from exporter.attribution.attributor import StaticResourceSlices
from exporter.attribution.directory import StaticPodDirectory
from exporter.attribution.resourceslices import ResourceSliceIndex, slice_from_object
from exporter.engines.endpoint import ANNOTATION_PATH, ANNOTATION_PORT
from exporter.nvml.pidspace import PidNamespace
from simulation import Simulator, install, uninstall
from simulation.dra import resource_slices_of
from simulation.engines.server import LOOPBACK, METRICS_PATHS, EngineFleet, simulated_engine
from simulation.kubelet import SimulatedPodSide, start_simulated_pod_side
from simulation.scenario import Pod as ScenarioPod
from simulation.scenario import Scenario
from toolkit.labelset import LabelSet
from toolkit.pods import Pod


def pods_of(scenario: Scenario, engine_ports: Mapping[str, int] | None = None) -> tuple[Pod, ...]:
    """The scenario's pods as the pod watch would know them (UID, labels, container ids, IP, annotations, Ready);
    `engine_ports` (namespace/name -> port) are where their simulated engines serve, on the loopback."""
    ports = engine_ports or {}
    return tuple(
        Pod(
            namespace=pod.namespace,
            name=pod.name,
            uid=str(pod.uid).lower(),
            node=scenario.node,
            labels=LabelSet(pod.labels),
            phase="Running",
            pod_ip=pod.ip or (LOOPBACK if pod.ref in ports else None),
            containers=LabelSet({str(c.id).lower(): c.name for c in pod.containers if c.id}),
            uses_claims=any(c.claims for c in pod.containers),
            ready=pod.ready,
            annotations=LabelSet({**pod.annotations, **_engine_annotations(pod, ports)}),
        )
        for pod in scenario.pods
    )


def pid_namespace_of(scenario: Scenario) -> PidNamespace:
    """The PID namespace the scenario puts the exporter in (the simulated driver answers for that caller)."""
    return PidNamespace(scenario.exporter_pid_namespace == "host")


def _engine_annotations(pod: ScenarioPod, ports: Mapping[str, int]) -> dict[str, str]:
    """Where the pod's simulated engine serves, as the pod's manifest would say it."""
    if pod.ref not in ports or pod.engine is None:
        return {}
    return {ANNOTATION_PORT: str(ports[pod.ref]), ANNOTATION_PATH: METRICS_PATHS.get(pod.engine.kind, "/metrics")}


def static_directory_of(scenario: Scenario, engine_ports: Mapping[str, int] | None = None) -> StaticPodDirectory:
    return StaticPodDirectory(pods_of(scenario, engine_ports))


def scaled(curve: Callable[[float], float], peak: float) -> Callable[[float], float]:
    """An arrivals curve (0-100) in percent of the engine's saturation rate."""
    return lambda t: curve(t) * peak


def engine_fleet_of(scenario: Scenario, simulator: Simulator) -> EngineFleet | None:
    """The simulated engines of the scenario's pods (not started); None when no pod has one."""
    node = simulator.node
    created = node.wall_time()
    engines = [
        simulated_engine(
            pod, scaled(pod.engine.arrivals.compile(f"{scenario.seed}/{pod.ref}/arrivals"), pod.engine.peak), created
        )
        for pod in scenario.pods
        if pod.engine is not None
    ]
    return EngineFleet(engines, node.now, simulator.set_load) if engines else None


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
    engines: EngineFleet | None = None  # the pods' simulated serving engines; None when no pod has one

    @property
    def pid_namespace(self) -> PidNamespace:
        return pid_namespace_of(self.simulator.scenario)

    def stop(self) -> None:
        if self.engines is not None:
            self.engines.stop()
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
    engines = None
    try:
        pod_side = start_simulated_pod_side(scenario, workdir, serve_kubelet=serve_kubelet) if scenario.pods else None
        engines = engine_fleet_of(scenario, simulator)
        if engines is not None:
            engines.start()
    except BaseException:
        if engines is not None:
            engines.stop()
        uninstall()
        raise
    ports = engines.ports() if engines is not None else None
    return SimulatedNode(simulator, pod_side, static_directory_of(scenario, ports), static_slices_of(scenario), engines)
