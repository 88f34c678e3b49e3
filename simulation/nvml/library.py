"""`Simulator`: a pure-Python stand-in for libnvidia-ml, to be installed as `pynvml.nvmlLib`.

It has one attribute per simulated C function, named as pynvml resolves it (`nvmlDeviceGetCount_v2`, ...); a name it
does not have raises AttributeError, which pynvml turns into NVMLError_FunctionNotFound, as with an older driver.
Each function writes into the ctypes objects pynvml passes and returns an NVML status code.

Before any device call, the checks a real driver makes: the library is initialized, the handle is one of ours, the GPU
is not lost; then what the scenario configures for the GPU: an error for this function (NOT_SUPPORTED, NO_PERMISSION,
...), a slow call (sleeps). A MIG device handle only answers the calls a real one does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from simulation.kernel_log import KernelLog
from simulation.lifecycle import DriverLifecycle
from simulation.loader import load_scenario
from simulation.machine import Node, real_sleep
from simulation.nvml import cabi
from simulation.nvml.calls.devices import DeviceCalls
from simulation.nvml.calls.events import EventCalls
from simulation.nvml.calls.fields import FieldCalls
from simulation.nvml.calls.gpm import GpmCalls
from simulation.nvml.calls.processes import ProcessCalls
from simulation.nvml.calls.system import SystemCalls
from simulation.nvml.calls.telemetry import TelemetryCalls
from simulation.scenario import Scenario

MIG_HANDLE_CALLS = (
    DeviceCalls.MIG_HANDLE_CALLS
    | TelemetryCalls.MIG_HANDLE_CALLS
    | ProcessCalls.MIG_HANDLE_CALLS
    | frozenset({"nvmlDeviceGetFieldValues", "nvmlGpmQueryDeviceSupport", "nvmlGpmSampleGet"})
)


class CFunction:
    """One simulated C function: callable like the ctypes function pynvml expects, with settable restype/argtypes."""

    def __init__(self, name: str, impl: Callable[..., Any], system: SystemCalls, needs_init: bool = True) -> None:
        self.__name__ = name
        self.restype: Any = None
        self.argtypes: Any = None
        self.calls = 0
        self._impl = impl
        self._system = system
        self._needs_init = needs_init

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self._needs_init and self._system.init_count == 0:
            return cabi.UNINITIALIZED
        return self._impl(*args)

    def __repr__(self) -> str:
        return f"<simulated NVML function {self.__name__}>"


class DeviceFunction(CFunction):
    """A C function whose first argument is a device handle."""

    def __init__(self, name: str, impl: Callable[..., int], system: SystemCalls, node: Node) -> None:
        super().__init__(name, impl, system)
        self._node = node
        self._mig_ok = name in MIG_HANDLE_CALLS

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self._system.init_count == 0:
            return cabi.UNINITIALIZED
        if not args:
            return cabi.INVALID_ARGUMENT
        value = cabi.pointer_value(args[0])
        decoded = cabi.decode_device(value)
        node = self._node
        if decoded is None or decoded[0] >= len(node.gpus):
            return cabi.INVALID_ARGUMENT
        t = node.now()  # first: a timeline event due now (a MIG reconfiguration) changes what the handle names
        gpu = node.gpus[decoded[0]]
        if not gpu.bound or cabi.handle_epoch(value) != gpu.epoch:  # nvml.h: such handles "must be re-established"
            return cabi.INVALID_ARGUMENT
        mig = None
        if decoded[1] is not None:
            mig = (gpu.migs or {}).get(decoded[1])
            if mig is None:  # a destroyed MIG instance's handle, or one of a GPU with MIG off
                return cabi.INVALID_ARGUMENT
        if gpu.lost:
            return cabi.GPU_IS_LOST
        name = self.__name__
        if mig is not None and not self._mig_ok:
            return cabi.NOT_SUPPORTED
        configured = gpu.errors.get(name)
        if configured is not None:
            return configured
        delay = gpu.slow_calls.get(name) or (gpu.gsp_stall_s if t < gpu.gsp_stalled_until else 0.0)
        if delay:  # a driver call that takes long, or hangs (dcgm-exporter issue 164); set_slow_call ends it early
            gpu.release.wait(delay)
        return self._impl(t, gpu, mig, *args[1:])


class Simulator:
    """A simulated libnvidia-ml for one scenario (a node).

    `Simulator("h100x8")` or `Simulator(load_scenario(path, seed=3), clock=fake_clock)`. Every value is a function of
    `clock()` (wall-clock seconds; scenario time 0 is when the simulator was created) and the scenario's seed. A call
    a real driver spends time in (nvmlDeviceGetPcieThroughput, 20 ms) waits with `sleep`. Install it with
    `simulation.nvml.install(sim)` so the real pynvml calls it.
    """

    def __init__(
        self,
        scenario: Scenario | str,
        *,
        seed: int | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = real_sleep,
        kernel_log_path: Path | None = None,
    ) -> None:
        if isinstance(scenario, str):
            scenario = load_scenario(scenario, seed=seed)
        elif seed is not None and seed != scenario.seed:
            raise ValueError("pass the seed to load_scenario: identities are derived when a scenario is loaded")
        self.node = Node(scenario, clock, sleep, kernel_log_path=kernel_log_path)
        self._system = SystemCalls(self.node)
        functions: dict[str, CFunction] = {}
        for name, impl in self._system.before_init().items():
            functions[name] = CFunction(name, impl, self._system, needs_init=False)
        events = EventCalls(self.node)
        gpm = GpmCalls(self.node)
        for name, impl in (self._system.after_init() | events.plain_calls() | gpm.plain_calls()).items():
            functions[name] = CFunction(name, impl, self._system)
        device_calls = (
            DeviceCalls(self.node).calls()
            | TelemetryCalls(self.node).calls()
            | FieldCalls(self.node).calls()
            | ProcessCalls(self.node).calls()
            | events.device_calls()
            | gpm.device_calls()
        )
        for name, impl in device_calls.items():
            functions[name] = DeviceFunction(name, impl, self._system, self.node)
        for name in scenario.missing_functions:  # an older driver: pynvml raises NVMLError_FunctionNotFound
            functions.pop(name, None)
        self._functions = functions
        self.__dict__.update(functions)  # getattr(sim, "nvmlDeviceGetCount_v2"), as pynvml does with a CDLL

    def __getattr__(self, name: str) -> Any:
        # only reached for names that are not simulated: pynvml turns this into NVMLError_FunctionNotFound
        raise AttributeError(f"simulated libnvidia-ml has no function {name}")

    # --- what tests and the demo read ----------------------------------------------------------------------

    @property
    def scenario(self) -> Scenario:
        return self.node.scenario

    @property
    def functions(self) -> tuple[str, ...]:
        """Names of the simulated C functions."""
        return tuple(sorted(self._functions))

    @property
    def call_counts(self) -> Mapping[str, int]:
        """How often each C function was called (for tests and benchmarks)."""
        return MappingProxyType({name: f.calls for name, f in self._functions.items() if f.calls})

    @property
    def initialized(self) -> bool:
        return self._system.init_count > 0

    def elapsed(self) -> float:
        """Seconds of scenario time."""
        return self.node.now()

    # --- controls ------------------------------------------------------------------------------------------

    def set_load(self, target: str | int, percent: float | None) -> None:
        """Override utilization from now on. `target`: a GPU index or UUID, a MIG device UUID, or a pod as
        "namespace/name" (its processes share `percent` of their devices). None removes the override."""
        self.node.set_load(target, percent)

    def lose_gpu(self, index: int) -> None:
        """GPU `index` falls off the bus: GPU_IS_LOST from every call on it, and the events the scenario's driver
        version posts for it (none, XID 79 per running process, and from R570 the GPU-unavailable event)."""
        self.node.lose_gpu(index)

    def restore_gpu(self, index: int) -> None:
        self.node.restore_gpu(index)

    def gsp_timeout(self, index: int, stall_s: float = 0.0) -> None:
        """An RPC to GPU `index`'s GSP times out: Xid 119 in the kernel log, and from R570 the GPU-unavailable event;
        every call on the GPU takes `stall_s` for the next `stall_s` seconds."""
        self.node.gsp_timeout(index, stall_s)

    @property
    def kernel_log(self) -> KernelLog:
        """The node's kernel log (the NVRM Xid lines), written to `kernel_log_path` when one was given."""
        return self.node.kernel_log

    def set_slow_call(self, index: int, function: str, seconds: float | None) -> None:
        """Every call of C function `function` on GPU `index` takes `seconds` from now on (a hung call when long);
        None: it answers at once again, and the calls waiting in it now return."""
        self.node.set_slow_call(index, function, seconds)

    def inject_xid(self, index: int, xid: int, mig: int | None = None) -> None:
        """An XID event on GPU `index` (or on its MIG device `mig`), delivered to every event set registered for XIDs
        on it (an instance's only with the MIG monitor privilege)."""
        self.node.inject_xid(index, xid, mig)

    @property
    def lifecycle(self) -> DriverLifecycle:
        """The node's kernel driver: loaded version, holders, and what it refused (`refusals`)."""
        return self.node.lifecycle

    def reload_driver(self) -> None:
        """The driver unloads and loads again: the energy counter and the volatile ECC counts start from 0."""
        self.node.reload_driver()

    def fail_init(self, code: int | None = cabi.DRIVER_NOT_LOADED) -> None:
        """Make nvmlInit fail with `code` (default DRIVER_NOT_LOADED, as on a host without the driver); None: work."""
        if code is not None and code <= 0:
            raise ValueError(f"an NVML error code is positive, got {code}")
        self._system.init_error = code

    def __repr__(self) -> str:
        return f"<Simulator scenario={self.scenario.name!r} seed={self.scenario.seed} gpus={len(self.node.gpus)}>"
