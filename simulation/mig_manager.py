"""The GPU Operator's mig-manager applying a MIG configuration to one node: its pause protocol on the node's labels.

Modelled on mig-parted v0.15.0, pkg/mig/reconfigure/reconfigure.go (`Run`):
- a configuration already applied (`nvidia-mig-parted assert`) changes nothing: no label is touched;
- otherwise, whether the change is of the mode or only of the instances, `nvidia.com/mig.config.state` is set to
  `pending` and every deploy label of the node's GPU clients to `paused-for-mig-change` (`maybeSetPaused`: one set to
  `false` stays `false`; `nvidia.com/gpu.deploy.client`, the label gpu-pulse's DaemonSet selects nodes by, only when
  the node carries it);
- it waits, polling every 5 s from the start, up to 5 minutes, until no DaemonSet pod on the node has
  `nvidia.com/gpu.deploy.client` in its `nodeSelector` (`waitForPodsWithNodeSelector`). When the wait times out it
  returns at once: the labels stay paused and the state `pending`;
- it applies the configuration; when that fails the state is `failed` and the labels stay paused;
- on success it sets the deploy labels back to `true` (`maybeSetTrue`) and the state to `success`.
The node's labels are a dict the caller shares with whatever plays the DaemonSet controller; time is injected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass

CLIENT_LABEL = "nvidia.com/gpu.deploy.client"
STATE_LABEL = "nvidia.com/mig.config.state"
# the operator's own components, paused the same way (reconfigure.go, shutdownKubernetesGPUClients)
OPERAND_LABELS = (
    "nvidia.com/gpu.deploy.device-plugin",
    "nvidia.com/gpu.deploy.gpu-feature-discovery",
    "nvidia.com/gpu.deploy.dcgm-exporter",
    "nvidia.com/gpu.deploy.dcgm",
    "nvidia.com/gpu.deploy.nvsm",
)
PAUSED = "paused-for-mig-change"
WAIT_TIMEOUT_S = 300.0  # waitForPodsToBeDeleted: 5 * time.Minute
POLL_S = 5.0  # waitForPodsWithNodeSelector: wait.PollUntilContextTimeout(ctx, 5*time.Second, timeout, true, ...)


@dataclass(frozen=True)
class NodePod:
    """A pod on the node as the mig-manager sees it: its controller's kind and its nodeSelector's keys."""

    name: str
    owner_kind: str
    node_selector: frozenset[str]


@dataclass(frozen=True)
class Outcome:
    applied: bool
    error: str | None = None


class MigManager:
    """One node's mig-manager. `pods` lists the node's pods now; `applied` says whether the wanted configuration is in
    place (`nvidia-mig-parted assert`); `apply` applies it and raises on failure."""

    def __init__(
        self,
        labels: MutableMapping[str, str],
        pods: Callable[[], Iterable[NodePod]],
        applied: Callable[[], bool],
        apply: Callable[[], None],
        clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.labels = labels
        self._pods = pods
        self._applied = applied
        self._apply = apply
        self._clock = clock
        self._sleep = sleep

    def run(self) -> Outcome:
        if self._applied():
            self.labels[STATE_LABEL] = "success"
            return Outcome(applied=True)
        before = {key: self.labels.get(key, "") for key in (*OPERAND_LABELS, CLIENT_LABEL)}
        self.labels[STATE_LABEL] = "pending"
        self._set_deploy_labels(before, PAUSED)
        if not self._clients_gone():
            return Outcome(applied=False, error="failed to wait for pods to be deleted")  # labels left paused
        try:
            self._apply()
        except Exception as exc:  # mig-parted's apply failing, for whatever reason
            self.labels[STATE_LABEL] = "failed"
            return Outcome(applied=False, error=f"failed to apply MIG configuration: {exc}")
        self._set_deploy_labels(before, "true")
        self.labels[STATE_LABEL] = "success"
        return Outcome(applied=True)

    def _set_deploy_labels(self, before: dict[str, str], value: str) -> None:
        for key, current in before.items():
            if key == CLIENT_LABEL and not current:
                continue  # set only on a node that carries it
            self.labels[key] = "false" if current == "false" else value

    def _clients_gone(self) -> bool:
        deadline = self._clock() + WAIT_TIMEOUT_S
        while True:
            waiting = [
                pod for pod in self._pods() if pod.owner_kind == "DaemonSet" and CLIENT_LABEL in pod.node_selector
            ]
            if not waiting:
                return True
            if self._clock() + POLL_S > deadline:
                return False
            self._sleep(POLL_S)
