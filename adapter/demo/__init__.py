"""`gpu-pulse-adapter --demo`: the pipeline on simulated GPUs, one command, no GPU and no cluster needed.

`run_demo(DemoOptions(...))` blocks until SIGINT or SIGTERM and returns the exit code (see `adapter.demo.run`).
"""

from adapter.demo.options import DEFAULT_KUBECONFIG, DEFAULT_LISTEN, DemoOptions
from adapter.demo.run import run_demo

__all__ = ["DEFAULT_KUBECONFIG", "DEFAULT_LISTEN", "DemoOptions", "run_demo"]
