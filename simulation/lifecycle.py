"""The simulated node's NVIDIA kernel driver over time: loaded or not, which version, and who holds it open.

A real driver refuses to go away while a process holds it, and the NVML caller (the exporter's process) is such a
process from nvmlInit to its last nvmlShutdown, and holds every GPU it got a handle of. So, as on a real node:

- an unload of the kernel modules fails while NVML is initialized (NVIDIA k8s-driver-manager, `unloadDriver`: the
  module refcount makes delete_module fail, "driver is in use"), and the driver manager tries again later;
- unbinding a GPU waits until nobody holds it (open-gpu-kernel-modules, kernel-open/nvidia/nv-pci.c `nv_pci_remove`
  loops while the device's usage count is not zero);
- a MIG mode change stays pending while the GPU is held (nvml.h, nvmlDeviceSetMigMode: IN_USE when the device is
  not idle), and the mig-manager tries again later;
- nvmlInit fails with DRIVER_NOT_LOADED while no module is loaded, and with LIB_RM_VERSION_MISMATCH while the loaded
  module is not the version of the NVML library in the caller's process (the library never changes in a process:
  a new library needs a new process, as a new container).

Every refusal is recorded (`refusals`), so tests can show what a held driver blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulation.scenario import MigInstance, Scenario

if TYPE_CHECKING:
    from simulation.machine import Node

SUCCESS = 0
DRIVER_NOT_LOADED = 9  # nvml.h: "NVIDIA driver is not loaded"
LIB_RM_VERSION_MISMATCH = 18  # nvml.h: "RM detects a driver/library version mismatch"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Something the node's driver refused because the NVML caller held it."""

    at: float  # scenario time
    what: str  # "unload_driver", "unbind_gpu 2", "mig_mode gpu 0"
    reason: str


class DriverLifecycle:
    """The kernel modules and their holders. Called under the node's lock."""

    def __init__(self, scenario: Scenario) -> None:
        self.library_version = scenario.driver_version
        self.module_version: str | None = None
        if scenario.driver_loaded:
            self.module_version = scenario.kernel_module_version or scenario.driver_version
        self.init_count = 0
        self.attached: set[int] = set()  # GPUs (scenario index) the caller got a handle of since nvmlInit
        self.refusals: list[Refusal] = []
        self.unload_refused = False  # an unload failed and will be tried again
        self.load_waiting: str | None = None  # a module version to load once the refused unload succeeds
        self.unbind_waiting: set[int] = set()  # GPUs whose unbind waits for the caller to let go

    # --- the NVML caller ---------------------------------------------------------------------------------------

    def init_status(self) -> int:
        """What nvmlInit returns now."""
        if self.module_version is None:
            return DRIVER_NOT_LOADED
        if self.module_version != self.library_version:
            return LIB_RM_VERSION_MISMATCH
        return SUCCESS

    @property
    def held(self) -> bool:
        """Whether the caller holds the driver open (NVML initialized)."""
        return self.init_count > 0

    def holds_gpu(self, index: int) -> bool:
        return self.held and index in self.attached

    def opened(self) -> None:
        self.init_count += 1

    def closed(self) -> tuple[int, ...]:
        """One nvmlShutdown; at the last one the caller lets go of everything. Returns the GPUs whose unbind was
        waiting for that."""
        self.init_count -= 1
        if self.init_count > 0:
            return ()
        self.attached.clear()
        released, self.unbind_waiting = tuple(sorted(self.unbind_waiting)), set()
        return released

    def attach(self, index: int) -> None:
        self.attached.add(index)

    # --- what the node's tools do ------------------------------------------------------------------------------

    def refuse(self, at: float, what: str, reason: str) -> None:
        self.refusals.append(Refusal(at, what, reason))

    def unload(self, at: float) -> bool:
        """Unload the kernel modules; False (refused, recorded) while the caller holds them."""
        if self.module_version is None:
            self.unload_refused = False
            return True
        if self.held:
            self.unload_refused = True
            self.refuse(at, "unload_driver", "driver is in use")
            return False
        self.module_version = None
        self.unload_refused = False
        if self.load_waiting is not None:
            self.module_version, self.load_waiting = self.load_waiting, None
        return True

    def load(self, version: str) -> None:
        """Load the modules of `version`; after a refused unload, once that unload succeeds."""
        if self.unload_refused:
            self.load_waiting = version
        elif self.module_version is None:
            self.module_version = version
        # modules already loaded and no unload under way: modprobe has nothing to do


class NodeMaintenance:
    """What the node's tools do on the timeline (a driver manager, a mig-manager, an admin), against the holds of
    the NVML caller. Each action returns None when done, or the scenario time at which the tool tries again."""

    def __init__(self, node: Node) -> None:
        self._node = node

    @property
    def _driver(self) -> DriverLifecycle:
        return self._node.lifecycle

    def unload_driver(self, retry_every_s: float, due: float) -> float | None:
        before = self._driver.module_version
        done = self._driver.unload(due)
        self._loaded_since(before, due)
        return None if done else due + retry_every_s

    def load_driver(self, version: str, due: float) -> None:
        before = self._driver.module_version
        self._driver.load(version)
        self._loaded_since(before, due)

    def _loaded_since(self, before: str | None, due: float) -> None:
        """Modules loaded anew at `due` (none before, or another version swapped in after a refused unload): what
        NVML counts "since the driver was last reloaded" starts from 0 there (Node.reload_driver)."""
        after = self._driver.module_version
        if after is not None and after != before:
            self._node.reload_driver(due)

    def unbind_gpu(self, index: int, due: float) -> None:
        if self._driver.holds_gpu(index):
            self._driver.unbind_waiting.add(index)  # nv_pci_remove waits: it completes when the caller lets go
            self._driver.refuse(due, f"unbind_gpu {index}", "the GPU is open (usage count not zero)")
            return
        self._node.set_bound(index, False)

    def bind_gpu(self, index: int) -> None:
        self._driver.unbind_waiting.discard(index)
        self._node.set_bound(index, True)

    def released(self, unbinds: tuple[int, ...]) -> None:
        """The caller let go of the driver: the unbinds that waited for it complete."""
        for index in unbinds:
            self._node.set_bound(index, False)

    def reconfigure_mig(
        self, index: int, instances: tuple[MigInstance, ...] | None, retry_every_s: float, due: float
    ) -> float | None:
        """Apply a MIG layout as mig-parted does: instances change at once; a change of mode needs the GPU idle."""
        node = self._node
        gpu = node.gpus[index]
        enable = instances is not None
        if enable == gpu.mig_enabled:
            node.reconfigure_mig(index, instances)
            gpu.pending_mig = None
            return None
        if not self._driver.holds_gpu(index):
            node.reconfigure_mig(index, instances)
            gpu.pending_mig = None
            return None
        # mig-parted (cmd/nvidia-mig-parted/apply/mode.go) clears the MIG configuration, then sets the mode: the
        # instances go, the new mode stays pending while the GPU is in use, and nothing of the new layout exists yet
        if gpu.mig_enabled and gpu.migs:
            node.reconfigure_mig(index, ())
        gpu.pending_mig = enable
        self._driver.refuse(due, f"mig_mode gpu {index}", "IN_USE: the GPU is not idle")
        return due + retry_every_s
