"""A simulated NVIDIA driver: a pure-Python stand-in for libnvidia-ml that the real pynvml runs on.

    sim = Simulator("h100x8")            # or Simulator(load_scenario("my.yaml", seed=3), clock=fake_clock)
    with install(sim):                   # pynvml.nvmlLib = sim
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        sim.set_load(0, 90)              # controls for tests and demos: set_load, lose_gpu, restore_gpu, inject_xid

pynvml holds one library per process, so one simulator can be installed at a time. Scenarios are data (built-ins:
BUILTIN_SCENARIOS, or YAML/JSON files; see `scenario`), seeded and deterministic. `write_proc_tree` writes the
/proc/<pid>/cgroup files the kubelet's cgroup drivers would produce for the scenario's processes.
"""

from simulation.loader import BUILTIN_SCENARIOS, ScenarioError, build_scenario, load_scenario
from simulation.nvml.install import Installation, install, installed, uninstall
from simulation.nvml.library import Simulator
from simulation.proctree import CgroupLayout, ContainerRuntime, cgroup_path, write_proc_tree
from simulation.scenario import Container, ContainerDevices, Gpu, MigInstance, Pod, Process, Scenario

__all__ = [
    "BUILTIN_SCENARIOS",
    "CgroupLayout",
    "Container",
    "ContainerDevices",
    "ContainerRuntime",
    "Gpu",
    "Installation",
    "MigInstance",
    "Pod",
    "Process",
    "Scenario",
    "ScenarioError",
    "Simulator",
    "build_scenario",
    "cgroup_path",
    "install",
    "installed",
    "load_scenario",
    "uninstall",
    "write_proc_tree",
]
