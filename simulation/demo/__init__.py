"""`gpu-pulse-adapter --demo`: the pipeline on simulated GPUs, one command, no GPU and no cluster needed.

`run_demo(DemoOptions(...))` blocks until SIGINT or SIGTERM and returns the exit code (see `simulation.demo.run`).
"""

from simulation.demo.options import DEFAULT_KUBECONFIG, DEFAULT_LISTEN, DemoOptions
from simulation.demo.run import run_demo

__all__ = ["DEFAULT_KUBECONFIG", "DEFAULT_LISTEN", "DemoOptions", "run_demo"]
