"""The demo's options: plain data the CLI fills from its flags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_LISTEN = "127.0.0.1:6443"
DEFAULT_KUBECONFIG = Path("gpu-pulse-demo.kubeconfig")


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """`listen`: where the adapter serves (host:port, as --listen). `kubeconfig`: where the kubeconfig for kubectl is
    written once the adapter serves (removed when the demo stops). `interval`: seconds between two summaries.
    `terminal`: redraw one screen (True) or print log lines (False); None asks whether stdout is a terminal.
    `seed`: of the simulated GPUs' identities and load curves. `keda_args`: the adapter's --keda-* flags as given
    (with --keda-listen, the adapter also serves KEDA's external scaler, and the demo prints where). `source_args`: the
    adapter's --config, --prometheus-* and --metrics-* flags as given (with prometheus-adapter's --config and
    --prometheus-url, its rules' metrics are served from that Prometheus beside the demo's GPU metrics).
    `scale_to_zero`: llm-inference starts with no pod, behind a simulated inference gateway (simulation/gateway.py)
    that holds its requests; the adapter reads the gateway's queue (simulation/demo/zero.py)."""

    listen: str = DEFAULT_LISTEN
    kubeconfig: Path = DEFAULT_KUBECONFIG
    interval: float = 3.0
    terminal: bool | None = None
    seed: int = 1
    keda_args: tuple[str, ...] = ()
    source_args: tuple[str, ...] = ()
    scale_to_zero: bool = False  # llm-inference at zero replicas, its requests held at a simulated gateway

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise ValueError(f"the demo's summary interval must be positive, got {self.interval}")
