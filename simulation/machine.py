"""The simulated node at run time: GPUs and MIG devices with their load, faults and timeline, as functions of time.

Scenario time 0 is when the node was created; `now()` reads the injected clock and applies timeline events that have
become due. Values are computed from the load at the time of the call, so reading is cheap and needs no thread.
"""

from __future__ import annotations

import bisect
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from simulation.curves import Curve, LoadCurve
from simulation.driver import (
    CallerPids,
    gsp_timeout_posts_gpu_unavailable_event,
    posts_gpu_unavailable_event,
    rc_error_once_when_lost,
    rc_notifies_channels_when_lost,
)
from simulation.hardware import GPU_MODELS, MAX_MIG_DEVICES, MIB, GpuModel, MigProfile
from simulation.kernel_log import KernelLog
from simulation.lifecycle import DriverLifecycle, NodeMaintenance
from simulation.load import TICK_S, ContinuedIntegral, Integral, LoadDomain, MixedIntegral, ProcessLoad
from simulation.loadfile import LoadFileWatch
from simulation.nvml.eventsets import EVENT_TYPE_GPU_UNAVAILABLE, EVENT_TYPE_XID, Event, EventSets
from simulation.scenario import (
    BindGpu,
    Gpu,
    GspTimeout,
    LoadDriver,
    LoseGpu,
    MigInstance,
    ReconfigureMig,
    RestoreGpu,
    Scenario,
    SetLoad,
    StepWallClock,
    UnbindGpu,
    UnloadDriver,
    XidBurst,
)

XID_FALLEN_OFF_BUS = 79
GSP_RPC_TIMEOUT = 119  # the Xid kernel_gsp.c logs for a GSP RPC timeout
MPS_SERVER_MEMORY = 32 * MIB  # what nvidia-cuda-mps-server holds on each GPU it serves
ERROR_CODES = {"NOT_SUPPORTED": 3, "NO_PERMISSION": 4, "GPU_IS_LOST": 15, "UNKNOWN": 999}


@dataclass(slots=True)
class SimMig:
    parent: SimGpu
    index: int
    spec: MigInstance
    profile: MigProfile
    uuid: str
    domain: LoadDomain
    integral: Integral

    @property
    def gpu_instance_id(self) -> int:
        assert self.spec.gpu_instance_id is not None
        return self.spec.gpu_instance_id

    @property
    def compute_instance_id(self) -> int:
        return self.spec.compute_instance_id

    @property
    def name(self) -> str:
        if self.parent.spec.mig_names == "plain":
            return self.parent.model.name
        return f"{self.parent.model.name} MIG {self.profile.name}"

    @property
    def memory_total(self) -> int:
        return self.profile.memory_mib * MIB


@dataclass(slots=True)
class SimGpu:
    index: int
    spec: Gpu
    model: GpuModel
    uuid: str
    serial: str
    pci_bus_id: str
    domain: LoadDomain | None  # None when MIG is enabled: load lives in the MIG devices
    migs: dict[int, SimMig] | None  # MIG device index -> device; None: MIG disabled
    encoder: Curve
    decoder: Curve
    energy_offset_mj: float
    errors: dict[str, int]  # NVML function name -> status code it returns on this GPU
    field_errors: dict[int, int]  # field id -> status of that entry in nvmlDeviceGetFieldValues
    gpm_errors: dict[int, int]  # GPM metric id -> status of that metric in nvmlGpmMetricsGet
    slow_calls: dict[str, float]
    release: threading.Event = field(default_factory=threading.Event)  # set: wakes the calls sleeping in slow_calls
    integral: Integral | MixedIntegral | ContinuedIntegral = field(default_factory=Integral)
    lost: bool = False
    bound: bool = True  # bound to the nvidia driver: NVML enumerates it
    epoch: int = 0  # bumped when its enumeration index moves: handles from before stop working
    pending_mig: bool | None = None  # a MIG mode set but not active yet (the GPU was not idle); None: none pending
    # when the driver last loaded (scenario time; before 0: loaded before the scenario began) and the busy integral
    # then: counters NVML keeps "since the driver was last reloaded" start there (nvml.h, NVML_FI_DEV_TOTAL_ENERGY_
    # CONSUMPTION, nvmlEccCounterType_t NVML_VOLATILE_ECC)
    loaded_at: float = 0.0
    busy_at_load: float = 0.0
    reloaded: bool = False  # the driver reloaded during the scenario: the energy counter starts again from 0
    gsp_stalled_until: float = -math.inf  # scenario time until which every call waits `gsp_stall_s` (a GSP timeout)
    gsp_stall_s: float = 0.0

    @property
    def mig_enabled(self) -> bool:
        return self.migs is not None

    def load(self, t: float) -> float:
        """GPU-level utilization %, for power, clocks, temperature (slice-weighted over MIG devices)."""
        if self.domain is not None:
            return self.domain.total(t)
        assert self.migs is not None
        return sum(m.domain.total(t) * m.profile.slices for m in self.migs.values()) / MAX_MIG_DEVICES

    def domains(self) -> list[tuple[SimMig | None, LoadDomain]]:
        if self.domain is not None:
            return [(None, self.domain)]
        assert self.migs is not None
        return [(m, m.domain) for m in self.migs.values()]

    # --- physics: every figure follows the load --------------------------------------------------------------

    @property
    def management_limit_mw(self) -> int:
        """nvmlDeviceGetPowerManagementLimit: the limit set on the board (Gpu.power_limit_w), else its default."""
        limit = self.spec.power_limit_w
        return self.model.power_limit_mw if limit is None else int(limit * 1000)

    @property
    def enforced_limit_mw(self) -> int:
        """nvmlDeviceGetEnforcedPowerLimit: the lowest of every limiter, an out-of-band cap among them (nvml.h)."""
        cap = self.spec.power_cap_w
        return self.management_limit_mw if cap is None else min(self.management_limit_mw, int(cap * 1000))

    def demand_mw(self, load: float) -> float:
        """What the board would draw at `load` without a power limit."""
        m = self.model
        return m.idle_power_mw + (m.max_power_mw - m.idle_power_mw) * load / 100.0

    def power_mw(self, load: float) -> float:
        """The draw: the demand, held at the enforced limit by the power management algorithm (nvml.h,
        nvmlDeviceGetPowerManagementLimit: "If the card's total power draw reaches this limit the power management
        algorithm kicks in")."""
        return min(self.demand_mw(load), float(self.enforced_limit_mw))

    def power_capped(self, load: float) -> bool:
        """The draw is at the enforced limit: the clocks are lowered for it (the SW power cap clock-event reason)."""
        return self.demand_mw(load) >= 0.97 * self.enforced_limit_mw

    def busy_since_load(self, t: float) -> float:
        """Seconds at full load since the driver loaded."""
        return max(0.0, self.integral.at(t) - self.busy_at_load) / 100.0

    def since_load(self, t: float) -> float:
        return max(t - self.loaded_at, 0.0)

    def energy_mj(self, t: float) -> int:
        m = self.model
        busy = self.busy_since_load(t)
        offset = 0.0 if self.reloaded else self.energy_offset_mj
        return int(offset + m.idle_power_mw * self.since_load(t) + (m.max_power_mw - m.idle_power_mw) * busy)

    def averaged_load(self, t: float) -> float:
        """The load over the last second (four samples of it): what power averaged over 1 s follows."""
        return sum(self.load(max(t - k * 0.25, 0.0)) for k in range(4)) / 4.0

    def power_reading_mw(self, t: float) -> int:
        """nvmlDeviceGetPowerUsage: a 1 s average on Ampere and newer except GA100, instantaneous on GA100 and older
        (nvml.h); an instantaneous reading wobbles within the second, an average does not."""
        if self.model.power_averaged:
            return int(self.power_mw(self.averaged_load(t)))
        return int(self.power_mw(self.load(t)) * (1.0 + 0.02 * math.sin(t * 41.0)))

    def violation_ns(self, t: float, policy: int) -> int:
        """NVML's perf-policy counters (NVML_FI_DEV_PERF_POLICY_*, ns since the driver loaded): a busy board spends a
        little of its busy time at its power cap, an idle one has its clocks lowered for low utilization; the thermal,
        sync-boost, board-limit and reliability policies do not engage on a healthy board."""
        busy = self.busy_since_load(t)
        if policy == 0:  # power
            return int(busy * 0.03 * 1e9)
        if policy == 4:  # low utilization
            return int(max(self.since_load(t) - busy, 0.0) * 0.5 * 1e9)
        return 0

    def temperature_c(self, t: float, load: float) -> int:
        m = self.model
        return round(m.idle_temp_c + (m.hot_temp_c - m.idle_temp_c) * load / 100.0 + 0.6 * math.sin(t / 37.0))

    def memory_temperature_c(self, t: float, load: float) -> int:
        return self.temperature_c(t, load) + 5

    def sm_clock_mhz(self, load: float) -> int:
        m = self.model
        if load < 1.0:
            return m.idle_sm_clock_mhz
        if self.power_capped(load):
            return int(m.max_sm_clock_mhz * 0.93)
        return m.max_sm_clock_mhz

    def clock_event_reasons(self, load: float) -> int:
        reasons = 0
        if load < 1.0:
            reasons |= 0x1  # GPU idle
        if self.power_capped(load):
            reasons |= 0x4  # SW power cap
        return reasons

    def performance_state(self, load: float) -> int:
        busy = load >= 1.0 or any(d.processes for _, d in self.domains())
        return 0 if busy else 8

    def pcie_kb_per_s(self, t: float, load: float, receive: bool) -> int:
        m = self.model
        base = m.pcie_max_kb_per_s * (0.01 + 0.08 * load / 100.0)
        wobble = 1.0 + 0.25 * math.sin(t / (7.0 if receive else 5.0))
        return int(base * wobble * (0.8 if receive else 1.0))

    def memory_used(self) -> int:
        server = MPS_SERVER_MEMORY if self.spec.mps_server_pid is not None else 0
        return server + sum(d.memory_used() for _, d in self.domains())

    @property
    def memory_total(self) -> int:
        return self.model.memory_total_mib * MIB

    @property
    def memory_reserved(self) -> int:
        return self.model.memory_reserved_mib * MIB

    def nvlink_kib(self, t: float) -> float:
        """NVLink data KiB moved per link (TX) since the driver loaded."""
        return self.model.nvlink_kib_per_s_per_link * self.busy_since_load(t)


def _compile(curve: LoadCurve, key: str) -> Curve:
    return curve.compile(key)


def real_sleep(seconds: float) -> None:
    """Wait `seconds` of real time. Not time.sleep: under libfaketime with DONT_FAKE_MONOTONIC (how the tests run an
    exporter on a node whose clock is off, tests/support/exporters.py) time.sleep fails with EINVAL, while a timed
    wait on an event works."""
    threading.Event().wait(seconds)


class Node:
    """One simulated node built from a loaded Scenario; thread-safe. `sleep` is how a driver call that takes time
    (nvmlDeviceGetPcieThroughput's 20 ms) waits: real time by default, injected where a test steps the clock."""

    def __init__(
        self,
        scenario: Scenario,
        clock: Callable[[], float],
        sleep: Callable[[float], None] = real_sleep,
        *,
        kernel_log_path: Path | None = None,
    ) -> None:
        self.scenario = scenario
        self.clock = clock
        self.sleep = sleep
        self.t0 = clock()
        self.lock = threading.RLock()
        self.events = EventSets(self.lock)
        self.kernel_log = KernelLog(kernel_log_path)
        key = f"{scenario.seed}/{scenario.name}"
        self.gpus: list[SimGpu] = [self._gpu(key, i, g) for i, g in enumerate(scenario.gpus)]
        self.by_uuid: dict[str, tuple[SimGpu, SimMig | None]] = {}
        for g in self.gpus:
            self.by_uuid[g.uuid] = (g, None)
            for m in (g.migs or {}).values():
                self.by_uuid[m.uuid] = (g, m)
        self._add_processes(key)
        self.lifecycle = DriverLifecycle(scenario)
        self.maintenance = NodeMaintenance(self)
        for g in self.gpus:
            g.bound = g.spec.bound
        self._timeline = self._expand_timeline()
        # the PIDs the NVML caller's process lists show (its own PID namespace hides the others from translating
        # drivers: see simulation/driver.py)
        self.caller_pids = CallerPids(
            container=scenario.exporter_pid_namespace == "container",
            driver_version=scenario.driver_version,
            namespace_pids={p.pid: p.namespace_pid for p in scenario.processes if p.namespace_pid is not None},
        )
        # the host's wall clock as NVML stamps samples with it: (scenario time from which, offset in seconds)
        self._wall_steps: list[tuple[float, float]] = []
        self._next_due = self._timeline[0][0] if self._timeline else math.inf

    # --- construction ----------------------------------------------------------------------------------------

    def _gpu(self, key: str, index: int, g: Gpu) -> SimGpu:
        model = GPU_MODELS[g.model]
        assert g.uuid is not None and g.serial is not None and g.pci_bus_id is not None
        rng = random.Random(f"{key}/gpu/{index}/energy")
        uptime_s = rng.uniform(2 * 86400, 30 * 86400)
        gpu = SimGpu(
            index=index,
            spec=g,
            model=model,
            uuid=g.uuid,
            serial=g.serial,
            pci_bus_id=g.pci_bus_id,
            domain=None if g.mig is not None else LoadDomain(_compile(g.load, f"{key}/gpu/{index}/load")),
            migs=None,
            encoder=_compile(g.encoder, f"{key}/gpu/{index}/enc"),
            decoder=_compile(g.decoder, f"{key}/gpu/{index}/dec"),
            energy_offset_mj=uptime_s * (model.idle_power_mw + 0.3 * (model.max_power_mw - model.idle_power_mw)),
            errors={name: ERROR_CODES[e] for name, e in g.errors.items() if name.startswith("nvml")},
            field_errors={int(n[6:]): ERROR_CODES[e] for n, e in g.errors.items() if n.startswith("field:")},
            gpm_errors={int(n[4:]): ERROR_CODES[e] for n, e in g.errors.items() if n.startswith("gpm:")},
            slow_calls=dict(g.slow_calls),
        )
        if g.mig is not None:
            migs: dict[int, SimMig] = {}
            for m in g.mig:
                assert m.index is not None and m.uuid is not None
                domain = LoadDomain(
                    _compile(m.load, f"{key}/gpu/{index}/mig/{m.index}/load"), idle_without_processes=True
                )
                migs[m.index] = SimMig(gpu, m.index, m, model.mig_profiles[m.profile], m.uuid, domain, Integral())
            gpu.migs = migs
        return gpu

    def _add_processes(self, key: str) -> None:
        for p in self.scenario.processes:
            gpu = self.gpus[p.gpu]
            curve = _compile(p.load, f"{key}/pid/{p.pid}/load") if p.load is not None else None
            proc = ProcessLoad(p.pid, p.share, curve, int(p.memory_mib * MIB), p.name)
            if gpu.migs is not None:
                assert p.mig is not None
                gpu.migs[p.mig].domain.processes.append(proc)
            else:
                assert gpu.domain is not None
                gpu.domain.processes.append(proc)
        # running integrals start once the domains are complete
        for gpu in self.gpus:
            if gpu.migs is not None:
                for m in gpu.migs.values():
                    m.integral = Integral(m.domain)
                gpu.integral = MixedIntegral(
                    [(m.profile.slices / MAX_MIG_DEVICES, m.integral) for m in gpu.migs.values()]
                )
            else:
                gpu.integral = Integral(gpu.domain)

    def _expand_timeline(self) -> list[tuple[float, int, Callable[[float], float | None]]]:
        """(time, order, action): an action gets the time it was due and returns None when done, or the time to try
        it again (the node's tool was refused)."""
        items: list[tuple[float, int, Callable[[float], float | None]]] = []
        work = self.maintenance

        def once(action: Callable[[], None]) -> Callable[[float], None]:
            return lambda _due: action()

        for n, ev in enumerate(self.scenario.timeline):
            if isinstance(ev, LoseGpu):
                items.append((ev.at, n, once(partial(self.lose_gpu, ev.gpu))))
            elif isinstance(ev, RestoreGpu):
                items.append((ev.at, n, once(partial(self.restore_gpu, ev.gpu))))
            elif isinstance(ev, XidBurst):
                for k in range(ev.repeat):
                    xid = partial(self.inject_xid, ev.gpu, ev.xid, ev.mig)
                    items.append((ev.at + k * ev.every_s, n, once(xid)))
            elif isinstance(ev, GspTimeout):
                for k in range(ev.repeat):
                    timeout = partial(self.gsp_timeout, ev.gpu, ev.stall_s)
                    items.append((ev.at + k * ev.every_s, n, once(timeout)))
            elif isinstance(ev, SetLoad):
                items.append((ev.at, n, once(partial(self.set_load, ev.target, ev.percent))))
            elif isinstance(ev, ReconfigureMig):
                items.append((ev.at, n, partial(work.reconfigure_mig, ev.gpu, ev.mig, ev.retry_every_s)))
            elif isinstance(ev, StepWallClock):
                items.append((ev.at, n, once(partial(self.step_wall_clock, ev.seconds, ev.at))))
            elif isinstance(ev, UnloadDriver):
                items.append((ev.at, n, partial(work.unload_driver, ev.retry_every_s)))
            elif isinstance(ev, LoadDriver):
                version = ev.version or self.scenario.driver_version
                items.append((ev.at, n, partial(work.load_driver, version)))
            elif isinstance(ev, UnbindGpu):
                items.append((ev.at, n, partial(work.unbind_gpu, ev.gpu)))
            elif isinstance(ev, BindGpu):
                items.append((ev.at, n, once(partial(work.bind_gpu, ev.gpu))))
        if self.scenario.load_file is not None:  # read at once, then every second (it returns when to look again)
            items.append(
                (0.0, len(self.scenario.timeline), LoadFileWatch(Path(self.scenario.load_file), self.set_load))
            )
        items.sort(key=lambda item: (item[0], item[1]))
        return items

    # --- time --------------------------------------------------------------------------------------------------

    def now(self) -> float:
        """Seconds of scenario time; applies timeline events that have become due."""
        t = self.clock() - self.t0
        if t >= self._next_due:
            self._apply_due(t)
        return t

    def advance(self) -> None:
        self.now()

    def quiet_seconds(self, longest: float) -> float:
        """How long a waiter may sleep (at most `longest`) without missing a timeline event: on the real clock until
        the next one is due; on any other (a test's, stepped without a word) 20 ms, then it reads the clock again."""
        if self.clock is not time.time and self.clock is not time.monotonic:
            return min(longest, 0.02)
        return max(0.0, min(longest, self._next_due - (self.clock() - self.t0)))

    def _apply_due(self, t: float) -> None:
        with self.lock:
            while self._timeline and self._timeline[0][0] <= t:
                due, n, action = self._timeline.pop(0)
                again = action(due)
                if again is not None:  # refused: the tool tries again later
                    bisect.insort(self._timeline, (again, n, action), key=lambda item: (item[0], item[1]))
            self._next_due = self._timeline[0][0] if self._timeline else math.inf

    def tick(self, t: float) -> int:
        """The newest sampling tick at or before t."""
        return int(t // TICK_S) if t > 0 else 0

    def tick_time_us(self, tick: int) -> int:
        """A tick as NVML timestamps it: microseconds since the epoch on the host's wall clock of that moment."""
        return round((self.t0 + tick * TICK_S + self.wall_offset_at(tick * TICK_S)) * 1e6)

    def wall_offset_at(self, t: float) -> float:
        """Seconds the host's wall clock was stepped by (in total) just after scenario time t (a sample taken at the
        moment of a step was stamped before it)."""
        offset = 0.0
        for since, total in self._wall_steps:
            if since < t:
                offset = total
        return offset

    def wall_time(self) -> float:
        """The host's wall clock now (epoch seconds): the injected clock, plus the steps made to it."""
        t = self.now()
        return self.t0 + t + next((total for since, total in reversed(self._wall_steps) if since <= t), 0.0)

    def step_wall_clock(self, seconds: float, at: float | None = None) -> None:
        """Step the host's wall clock by `seconds` (back when negative), as NTP or an operator does, now or at scenario
        time `at` (a timeline event's): samples taken from then on are stamped with the stepped clock (see
        simulation/nvml/calls/processes.py)."""
        with self.lock:
            t = self.clock() - self.t0 if at is None else at
            previous = self._wall_steps[-1][1] if self._wall_steps else 0.0
            self._wall_steps.append((t, previous + seconds))

    # --- controls ---------------------------------------------------------------------------------------------

    def _settle(self) -> None:
        """Bring every running integral up to now, so a change of load only affects the future."""
        t = self.clock() - self.t0
        for g in self.gpus:
            g.integral.at(t)

    def set_load(self, target: str | int, percent: float | None) -> None:
        """Override utilization from now on: of a GPU (index or UUID), a MIG device (UUID) or a pod
        (namespace/name: split over its processes); None removes the override."""
        if percent is not None and not 0.0 <= percent <= 100.0:
            raise ValueError(f"load must be between 0 and 100 percent, got {percent}")
        with self.lock:
            self._settle()
            key = str(target)
            if key.isdigit() and int(key) < len(self.gpus):
                key = self.gpus[int(key)].uuid
            found = self.by_uuid.get(key)
            if found is not None:
                gpu, mig = found
                if mig is not None:
                    mig.domain.override_total(percent)
                elif gpu.domain is not None:
                    gpu.domain.override_total(percent)
                else:
                    raise ValueError(f"GPU {gpu.index} has MIG enabled: set the load of its MIG devices")
                return
            self._set_pod_load(key, percent)

    def _set_pod_load(self, ref: str, percent: float | None) -> None:
        pod = next((p for p in self.scenario.pods if p.ref == ref), None)
        if pod is None:
            raise ValueError(f"no GPU, MIG device or pod {ref!r} in scenario {self.scenario.name!r}")
        pids = {pid for c in pod.containers for pid in c.pids}
        changed = False
        for gpu in self.gpus:
            for _, domain in gpu.domains():
                mine = [p.pid for p in domain.processes if p.pid in pids]
                if mine:
                    domain.override_total(None)  # the pod's figure replaces a device-wide override
                for pid in mine:
                    domain.override_pid(pid, None if percent is None else percent / len(mine))
                    changed = True
        if not changed:  # a pod without simulated processes: set the devices it holds
            for c in pod.containers:
                for dev in c.devices:
                    for device_id in dev.device_ids:
                        found = self.by_uuid.get(device_id)
                        if found is not None:
                            held = found[1].domain if found[1] is not None else found[0].domain
                            if held is not None:
                                held.override_total(percent)
                                changed = True
        if not changed:
            raise ValueError(f"pod {ref} runs no simulated GPU process and holds no whole GPU or MIG device")

    def _gpu_at(self, index: int) -> SimGpu:
        if not 0 <= index < len(self.gpus):
            raise ValueError(f"no GPU {index}: scenario {self.scenario.name!r} has {len(self.gpus)}")
        return self.gpus[index]

    def reconfigure_mig(self, index: int, instances: tuple[MigInstance, ...] | None) -> None:
        """Destroy GPU `index`'s MIG instances and its processes, then set MIG off (None) or create `instances`
        (identities resolved, as the loader gives them). Counters (energy, NVLink) carry on from their values now."""
        gpu = self._gpu_at(index)
        if instances is not None and not gpu.model.mig_capable:
            raise ValueError(f"GPU {index} ({gpu.model.key}) does not support MIG")
        key = f"{self.scenario.seed}/{self.scenario.name}"
        with self.lock:
            t = self.clock() - self.t0
            self._settle()
            busy_until_now = gpu.integral.at(t)
            for mig in (gpu.migs or {}).values():
                self.by_uuid.pop(mig.uuid, None)
            if instances is None:
                gpu.migs = None
                gpu.domain = LoadDomain(_compile(gpu.spec.load, f"{key}/gpu/{index}/load"))
                inner: Integral | MixedIntegral = Integral(gpu.domain)
            else:
                gpu.domain = None
                migs: dict[int, SimMig] = {}
                for m in instances:
                    assert m.index is not None and m.uuid is not None
                    domain = LoadDomain(
                        _compile(m.load, f"{key}/gpu/{index}/mig/{m.uuid}/load"), idle_without_processes=True
                    )
                    migs[m.index] = SimMig(
                        gpu, m.index, m, gpu.model.mig_profiles[m.profile], m.uuid, domain, Integral()
                    )
                    migs[m.index].integral = Integral(domain)
                    self.by_uuid[m.uuid] = (gpu, migs[m.index])
                gpu.migs = migs
                inner = MixedIntegral([(m.profile.slices / MAX_MIG_DEVICES, m.integral) for m in migs.values()])
            gpu.integral = ContinuedIntegral(busy_until_now, t, inner)

    def lose_gpu(self, index: int) -> None:
        """The GPU falls off the bus: GPU_IS_LOST from every call on it, and what the loaded driver posts about it.

        Every driver logs Xid 79 to the kernel log, but what it posts to NVML differs by release (simulation/driver.py,
        from open-gpu-kernel-modules `osHandleGpuLost`): nothing (R535 before 535.216.01, R550 before 550.120, 545 to
        560); one XID 79 event per channel running on it (later R535 and R550, 565 and newer: one per process here,
        none on an idle GPU); and from R570 the GPU-unavailable event first.
        """
        gpu = self._gpu_at(index)
        with self.lock:
            if gpu.lost:
                return
            version = self.lifecycle.module_version or self.scenario.driver_version
            t = self.clock() - self.t0
            # osinit.c osHandleGpuLost: "GPU has fallen off the bus." on every release
            self.kernel_log.xid(t, gpu.pci_bus_id, XID_FALLEN_OFF_BUS, "GPU has fallen off the bus.")
            if posts_gpu_unavailable_event(version):
                self.events.deliver(Event(index, EVENT_TYPE_GPU_UNAVAILABLE, 0, t))
            if rc_error_once_when_lost(version):  # R555, R560: one RC_ERROR for the GPU, idle or not
                self.events.deliver(Event(index, EVENT_TYPE_XID, XID_FALLEN_OFF_BUS, t))
            if rc_notifies_channels_when_lost(version):
                for _ in range(sum(len(domain.processes) for _, domain in gpu.domains())):
                    self.inject_xid(index, XID_FALLEN_OFF_BUS)
            gpu.lost = True

    def gsp_timeout(self, index: int, stall_s: float = 0.0) -> None:
        """An RPC to GPU `index`'s GSP timed out (kernel_gsp.c `_kgspLogXid119`): Xid 119 in the kernel log, the
        GPU-unavailable event where the driver posts it for a timeout (R570 and later: simulation/driver.py), and the
        GPU not lost: it answers again, each call waiting `stall_s` for the next `stall_s` seconds."""
        gpu = self._gpu_at(index)
        with self.lock:
            if gpu.lost:
                return
            version = self.lifecycle.module_version or self.scenario.driver_version
            t = self.clock() - self.t0
            self.kernel_log.xid(
                t,
                gpu.pci_bus_id,
                GSP_RPC_TIMEOUT,
                f"Timeout after 6s of waiting for RPC response from GPU{index} GSP! Expected function 76 "
                "(GSP_RM_CONTROL) (0x20800a4c 0x4).",
            )
            if gsp_timeout_posts_gpu_unavailable_event(version):
                self.events.deliver(Event(index, EVENT_TYPE_GPU_UNAVAILABLE, 0, t))
            if stall_s > 0:
                gpu.gsp_stall_s = stall_s
                gpu.gsp_stalled_until = t + stall_s

    def set_slow_call(self, index: int, function: str, seconds: float | None) -> None:
        """Make every call of `function` on GPU `index` take `seconds` (a hung driver call when long); None: answer
        at once again, waking the calls sleeping in it now."""
        gpu = self._gpu_at(index)
        if not function.startswith("nvml"):
            raise ValueError(f"name an NVML function (nvml...), got {function!r}")
        if seconds is not None and not seconds >= 0:
            raise ValueError(f"a delay is a number of seconds >= 0, got {seconds}")
        with self.lock:
            if seconds:
                gpu.slow_calls[function] = seconds
                return
            gpu.slow_calls.pop(function, None)
            woken, gpu.release = gpu.release, threading.Event()
            woken.set()

    def enumerated(self) -> list[SimGpu]:
        """The GPUs NVML enumerates, in its index order (bus order, bound ones only)."""
        return [g for g in self.gpus if g.bound]

    def set_bound(self, index: int, bound: bool) -> None:
        """Bind or unbind GPU `index`; the GPUs whose enumeration index moves get a new handle epoch."""
        before = {g.index: n for n, g in enumerate(self.enumerated())}
        self._gpu_at(index).bound = bound
        for n, g in enumerate(self.enumerated()):
            if before.get(g.index, n) != n:
                g.epoch += 1

    def reload_driver(self, at: float | None = None) -> None:
        """The driver unloads and loads again (nothing holds the GPUs), now or at scenario time `at` (a timeline
        event applied late): what NVML counts "since the driver was last reloaded" starts from 0 (nvml.h:
        NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION "since the driver was last reloaded"; nvmlEccCounterType_t: "Volatile
        counts are reset each time the driver loads"); aggregate ECC counts persist."""
        with self.lock:
            t = self.clock() - self.t0 if at is None else at
            for gpu in self.gpus:
                gpu.loaded_at = t
                gpu.busy_at_load = gpu.integral.at(t)
                gpu.reloaded = True

    def lost_indices(self) -> tuple[int, ...]:
        """Indices of the GPUs that are lost now."""
        return tuple(g.index for g in self.gpus if g.lost)

    def restore_gpu(self, index: int) -> None:
        gpu = self._gpu_at(index)
        with self.lock:
            gpu.lost = False

    def inject_xid(self, index: int, xid: int, mig: int | None = None) -> None:
        """An XID on GPU `index`, or on its MIG device `mig`, printed to the kernel log (kernel_rc.c `krcReportXid`,
        attributed to the instance) and posted as an event. nvml.h (nvmlEventSetWait_v2): without the MIG monitor
        privilege "only the events which affect all the instances (i.e. whole device) are reported"."""
        gpu = self._gpu_at(index)
        if xid <= 0:
            raise ValueError(f"an XID is a positive number, got {xid}")
        instance = None
        if mig is not None:
            found = (gpu.migs or {}).get(mig)
            if found is None:
                raise ValueError(f"GPU {index} has no MIG device {mig}")
            instance = (found.gpu_instance_id, found.compute_instance_id)
        t = self.clock() - self.t0
        self.kernel_log.xid(t, gpu.pci_bus_id, xid, "Ch 00000008", instance=instance)
        if instance is not None and not self.scenario.mig_monitor_privilege:
            return  # never reaches an unprivileged caller
        self.events.deliver(Event(index, EVENT_TYPE_XID, xid, t, instance))

    def mig_aggregate_refused(self, gpu: SimGpu, mig: SimMig | None) -> bool:
        """A MIG-enabled GPU's own handle, asked for aggregate figures by a caller without the MIG monitor privilege
        (nvml.h: aggregate information "only if the caller has appropriate privileges")."""
        return mig is None and gpu.migs is not None and not self.scenario.mig_monitor_privilege
