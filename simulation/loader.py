"""Load a scenario by built-in name or from a YAML/JSON file, check it, and derive the identities it leaves out."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from simulation.hardware import GPU_MODELS, MAX_MIG_DEVICES, GpuModel
from simulation.scenario import (
    BindGpu,
    Container,
    ContainerDevices,
    Gpu,
    GpuRef,
    GspTimeout,
    LoseGpu,
    MigInstance,
    Pod,
    Process,
    ReconfigureMig,
    ResourceClaim,
    RestoreGpu,
    Scenario,
    SetLoad,
    TimelineEvent,
    UnbindGpu,
    XidBurst,
)
from toolkit.inputfiles import InputFileError, read_input_text

BUILTIN_SCENARIOS: tuple[str, ...] = (
    "h100x8",
    "a100-mig",
    "shared",
    "faulty",
    "h100-mig",
    "h200x8",
    "a100x8",
    "a10x4",
    "l4x2",
    "v100x8",
    "dra",
)
_SUFFIXES = (".yaml", ".yml", ".json")
_ERROR_KEY = re.compile(r"^(nvml[A-Za-z0-9_]+|field:\d+|gpm:\d+)$")


class ScenarioError(ValueError):
    """A scenario that cannot be loaded; the message is one line naming the file and the problem."""

    def __init__(self, message: str) -> None:
        super().__init__(message.replace("\r", "\\r").replace("\n", "\\n"))


def load_scenario(name_or_path: str, seed: int | None = None) -> Scenario:
    """A built-in scenario by name, or a scenario file; identities derived from `seed` (default: the file's seed)."""
    if name_or_path in BUILTIN_SCENARIOS:
        origin = f"built-in scenario {name_or_path!r}"
        text = resources.files("simulation.scenarios").joinpath(f"{name_or_path}.yaml").read_text("utf-8")
        data = _parse(text, ".yaml", origin)
        default_name = name_or_path
    else:
        path = Path(name_or_path)
        origin = str(path)
        if path.suffix.lower() not in _SUFFIXES:
            raise ScenarioError(
                f"{origin}: not a built-in scenario ({', '.join(BUILTIN_SCENARIOS)}) "
                "nor a .yaml/.yml/.json scenario file"
            )
        try:
            text = read_input_text(path, "--simulate")  # a regular file of bounded size, never a FIFO or a device
        except InputFileError as e:
            raise ScenarioError(str(e)) from None
        data = _parse(text, path.suffix.lower(), origin)
        default_name = path.stem
    return build_scenario(data, seed=seed, origin=origin, default_name=default_name)


def build_scenario(
    data: Any, seed: int | None = None, origin: str = "scenario", default_name: str = "custom"
) -> Scenario:
    """Validate scenario data (as parsed from YAML/JSON) and derive its identities."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{origin}: a scenario must be a mapping at the top level, got {type(data).__name__}")
    data = {"name": default_name, **data}
    try:
        spec = Scenario.model_validate(data)
    except RecursionError:
        raise ScenarioError(f"{origin}: nested too deep to be a scenario") from None
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(p if isinstance(p, str) and p.isprintable() else repr(p) for p in map(str, err["loc"]))
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        message = " ".join(str(err["msg"]).split())
        raise ScenarioError(f"{origin}: {where or '(top level)'}: {message}{more}") from None
    try:
        return _Resolver(spec, spec.seed if seed is None else seed).resolve()
    except _ResolveError as e:
        raise ScenarioError(f"{origin}: {e}") from None


def _parse(text: str, suffix: str, origin: str) -> Any:
    try:
        if suffix == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except RecursionError:
        raise ScenarioError(f"{origin}: nested too deep to be a scenario") from None
    except json.JSONDecodeError as e:
        raise ScenarioError(f"{origin}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ScenarioError(f"{origin}: invalid YAML{where}: {problem}") from None


class _ResolveError(Exception):
    pass


def _hex_uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class _Resolver:
    """Expands GPU counts, fills derived identities and checks cross-references."""

    def __init__(self, spec: Scenario, seed: int) -> None:
        self.spec = spec
        self.seed = seed

    def _rng(self, *key: object) -> random.Random:
        return random.Random("/".join(str(k) for k in (self.seed, self.spec.name, *key)))

    def resolve(self) -> Scenario:
        for name in self.spec.missing_functions:
            if not re.fullmatch(r"nvml[A-Za-z0-9_]+", name):
                raise _ResolveError(f"missing_functions: {name!r} is not an NVML function name (nvml...)")
        gpus = self._gpus()
        processes = self._processes(gpus)
        pods = self._pods(gpus)
        claims = self._claims(gpus, pods)
        self._check_pids(processes, pods)
        self._check_timeline(gpus, pods)
        timeline = self._timeline(gpus)
        return self.spec.model_copy(
            update={
                "seed": self.seed,
                "gpus": gpus,
                "processes": processes,
                "pods": pods,
                "claims": claims,
                "timeline": timeline,
            }
        )

    def _claims(self, gpus: tuple[Gpu, ...], pods: tuple[Pod, ...]) -> tuple[ResourceClaim, ...]:
        out: list[ResourceClaim] = []
        for n, claim in enumerate(self.spec.claims):
            where = f"claims.{n} ({claim.ref})"
            for device in claim.devices:
                if device.gpu >= len(gpus):
                    raise _ResolveError(f"{where}: no GPU {device.gpu} (the scenario has {len(gpus)})")
                gpu = gpus[device.gpu]
                if device.mig is None and gpu.mig is not None:
                    raise _ResolveError(f"{where}: GPU {device.gpu} has MIG enabled: claim one of its MIG devices")
                if device.mig is not None and not any(m.index == device.mig for m in gpu.mig or ()):
                    raise _ResolveError(f"{where}: GPU {device.gpu} has no MIG device {device.mig}")
            uid = claim.uid or _hex_uuid(self._rng("claim", claim.namespace, claim.name))
            out.append(claim.model_copy(update={"uid": uid}))
        self._unique("resource claim", (c.ref for c in out))
        known = {c.ref for c in out}
        for pod in pods:
            for container in pod.containers:
                for name in container.claims:
                    if f"{pod.namespace}/{name}" not in known:
                        raise _ResolveError(
                            f"pod {pod.ref} container {container.name!r}: no ResourceClaim {name!r} in namespace "
                            f"{pod.namespace!r} (a pod can only use the claims of its own namespace)"
                        )
        return tuple(out)

    def _timeline(self, gpus: tuple[Gpu, ...]) -> tuple[TimelineEvent, ...]:
        """MIG reconfigurations get their new instances' identities (fresh UUIDs: new instances are new devices)."""
        out: list[TimelineEvent] = []
        for n, ev in enumerate(self.spec.timeline):
            if isinstance(ev, ReconfigureMig):
                if ev.gpu >= len(gpus):
                    raise _ResolveError(f"timeline.{n}: no GPU {ev.gpu} (the scenario has {len(gpus)})")
                if ev.mig is not None:
                    model = GPU_MODELS[gpus[ev.gpu].model]
                    ev = ev.model_copy(update={"mig": self._mig(ev.gpu, model, ev.mig, salt=f"timeline.{n}")})
            out.append(ev)
        return tuple(out)

    def _gpus(self) -> tuple[Gpu, ...]:
        out: list[Gpu] = []
        for n, g in enumerate(self.spec.gpus):
            model = GPU_MODELS.get(g.model)
            if model is None:
                raise _ResolveError(f"gpus.{n}.model: unknown GPU model {g.model!r} (known: {', '.join(GPU_MODELS)})")
            for key in (*g.errors, *g.slow_calls):
                if not _ERROR_KEY.match(key):
                    raise _ResolveError(
                        f"gpus.{n}: {key!r} is neither an NVML function name (nvml...) nor field:<id> or gpm:<id>"
                    )
            if any(not k.startswith("nvml") for k in g.slow_calls):
                raise _ResolveError(f"gpus.{n}.slow_calls: name NVML functions (nvml...)")
            if g.count > 1 and (g.uuid or g.serial or g.pci_bus_id or g.minor_number is not None):
                raise _ResolveError(
                    f"gpus.{n}: uuid, serial, pci_bus_id and minor_number cannot be given with count > 1"
                )
            for _ in range(g.count):
                index = len(out)
                rng = self._rng("gpu", index)
                uuid = g.uuid or f"GPU-{_hex_uuid(rng)}"
                serial = g.serial or str(rng.randrange(10**12, 10**13))
                bus = model.pci_bus_numbers[index % len(model.pci_bus_numbers)]
                pci = g.pci_bus_id or f"{index // len(model.pci_bus_numbers):08X}:{bus:02X}:00.0"
                mig = self._mig(index, model, g.mig) if g.mig is not None else None
                minor = g.minor_number if g.minor_number is not None else index
                identity = {"uuid": uuid, "serial": serial, "pci_bus_id": pci, "minor_number": minor}
                out.append(g.model_copy(update={"count": 1, "mig": mig, **identity}))
        self._unique("GPU UUID", (g.uuid for g in out))
        self._unique("GPU minor number", (g.minor_number for g in out))
        self._unique("PCI bus id", (g.pci_bus_id for g in out))
        return tuple(out)

    def _mig(
        self, index: int, model: GpuModel, instances: tuple[MigInstance, ...], salt: str = ""
    ) -> tuple[MigInstance, ...]:
        if not model.mig_capable:
            raise _ResolveError(f"GPU {index}: model {model.key} does not support MIG")
        used_index = {m.index for m in instances if m.index is not None}
        used_gi = {m.gpu_instance_id for m in instances if m.gpu_instance_id is not None}
        slices = 0
        out: list[MigInstance] = []
        for k, m in enumerate(instances):
            profile = model.mig_profiles.get(m.profile)
            if profile is None:
                raise _ResolveError(
                    f"GPU {index} MIG instance {k}: profile {m.profile!r} does not exist on {model.key} "
                    f"(profiles: {', '.join(model.mig_profiles)})"
                )
            slices += profile.slices
            mig_index = m.index
            if mig_index is None:
                mig_index = min(i for i in range(MAX_MIG_DEVICES + len(instances)) if i not in used_index)
                used_index.add(mig_index)
            gi = m.gpu_instance_id
            if gi is None:
                free = [i for i in profile.gpu_instance_ids if i not in used_gi]
                if not free:
                    raise _ResolveError(f"GPU {index}: no free GPU instance id for another {m.profile}")
                gi = free[0]
                used_gi.add(gi)
            uuid = m.uuid or f"MIG-{_hex_uuid(self._rng('mig', index, mig_index, *((salt,) if salt else ())))}"
            out.append(m.model_copy(update={"index": mig_index, "gpu_instance_id": gi, "uuid": uuid}))
        if slices > MAX_MIG_DEVICES:
            raise _ResolveError(
                f"GPU {index}: MIG instances use {slices} slices, more than the {MAX_MIG_DEVICES} there are"
            )
        self._unique(f"MIG device index on GPU {index}", (m.index for m in out))
        if any(m.index is not None and m.index >= MAX_MIG_DEVICES for m in out):
            raise _ResolveError(f"GPU {index}: MIG device indexes must be below {MAX_MIG_DEVICES}")
        self._unique(f"GPU instance id on GPU {index}", (m.gpu_instance_id for m in out))
        return tuple(sorted(out, key=lambda m: m.index or 0))

    def _processes(self, gpus: tuple[Gpu, ...]) -> tuple[Process, ...]:
        for n, p in enumerate(self.spec.processes):
            where = f"processes.{n} (pid {p.pid})"
            if p.gpu >= len(gpus):
                raise _ResolveError(f"{where}: no GPU {p.gpu} (the scenario has {len(gpus)})")
            gpu = gpus[p.gpu]
            if gpu.mig is None and p.mig is not None:
                raise _ResolveError(
                    f"{where}: GPU {p.gpu} has MIG disabled, so the process cannot be on MIG device {p.mig}"
                )
            if gpu.mig is not None:
                if p.mig is None:
                    raise _ResolveError(f"{where}: GPU {p.gpu} has MIG enabled: say on which MIG device (mig: <index>)")
                if all(m.index != p.mig for m in gpu.mig):
                    raise _ResolveError(f"{where}: GPU {p.gpu} has no MIG device {p.mig}")
        self._unique("process pid", (p.pid for p in self.spec.processes))
        in_namespace = [p for p in self.spec.processes if p.namespace_pid is not None]
        if in_namespace and self.spec.exporter_pid_namespace != "container":
            raise _ResolveError(
                f"processes: pid {in_namespace[0].pid} has a namespace_pid, but the exporter runs in the host's PID "
                "namespace (set exporter_pid_namespace: container)"
            )
        self._unique("namespace pid", (p.namespace_pid for p in in_namespace))
        used: dict[tuple[int, int | None], float] = {}
        for p in self.spec.processes:
            used[p.gpu, p.mig] = used.get((p.gpu, p.mig), 0.0) + p.memory_mib
        for (g, mig), mib in used.items():
            model = GPU_MODELS[gpus[g].model]
            if mig is None:
                room = model.memory_total_mib - model.memory_reserved_mib
            else:
                profile = next(m.profile for m in gpus[g].mig or () if m.index == mig)
                room = model.mig_profiles[profile].memory_mib
            if mib > room:
                where = f"GPU {g}" if mig is None else f"GPU {g} MIG device {mig}"
                raise _ResolveError(f"processes on {where} use {mib:g} MiB, more than its {room} MiB")
        return self.spec.processes

    def _pods(self, gpus: tuple[Gpu, ...]) -> tuple[Pod, ...]:
        out: list[Pod] = []
        for n, pod in enumerate(self.spec.pods):
            uid = pod.uid or _hex_uuid(self._rng("pod", pod.namespace, pod.name))
            containers: list[Container] = []
            for c in pod.containers:
                where = f"pods.{n} ({pod.ref}) container {c.name!r}"
                cid = c.id or f"{self._rng('container', pod.namespace, pod.name, c.name).getrandbits(256):064x}"
                devices = c.devices or self._devices(where, gpus, c.gpus)
                containers.append(c.model_copy(update={"id": cid, "devices": devices}))
            self._unique(f"container name in pod {pod.ref}", (c.name for c in containers))
            out.append(pod.model_copy(update={"uid": uid, "containers": tuple(containers)}))
        self._unique("pod", (p.ref for p in out))
        self._unique("pod uid", (p.uid for p in out))
        return tuple(out)

    def _devices(self, where: str, gpus: tuple[Gpu, ...], refs: tuple[GpuRef, ...]) -> tuple[ContainerDevices, ...]:
        grouped: dict[str, list[str]] = {}
        for ref in refs:
            if ref.gpu >= len(gpus):
                raise _ResolveError(f"{where}: no GPU {ref.gpu} (the scenario has {len(gpus)})")
            gpu = gpus[ref.gpu]
            assert gpu.uuid is not None
            if ref.mig is not None:
                if ref.replica is not None:
                    raise _ResolveError(f"{where}: a reference is either to a MIG device or to a replica, not both")
                mig = next((m for m in gpu.mig or () if m.index == ref.mig), None)
                if mig is None:
                    raise _ResolveError(f"{where}: GPU {ref.gpu} has no MIG device {ref.mig}")
                assert mig.uuid is not None
                default = f"nvidia.com/mig-{mig.profile}" if ref.strategy == "mixed" else "nvidia.com/gpu"
                device_id = mig.uuid
            else:
                if gpu.mig is not None:
                    raise _ResolveError(f"{where}: GPU {ref.gpu} has MIG enabled: refer to one of its MIG devices")
                default = "nvidia.com/gpu"
                device_id = gpu.uuid if ref.replica is None else f"{gpu.uuid}::{ref.replica}"
            grouped.setdefault(ref.resource_name or default, []).append(device_id)
        return tuple(ContainerDevices(resource_name=r, device_ids=tuple(ids)) for r, ids in grouped.items())

    def _check_pids(self, processes: tuple[Process, ...], pods: tuple[Pod, ...]) -> None:
        self._unique("container pid", (pid for pod in pods for c in pod.containers for pid in c.pids))
        del processes

    def _check_timeline(self, gpus: tuple[Gpu, ...], pods: tuple[Pod, ...]) -> None:
        targets = {g.uuid for g in gpus} | {m.uuid for g in gpus for m in g.mig or ()} | {p.ref for p in pods}
        targets |= {str(i) for i in range(len(gpus))}
        for n, ev in enumerate(self.spec.timeline):
            if isinstance(ev, LoseGpu | RestoreGpu | XidBurst | GspTimeout | UnbindGpu | BindGpu) and ev.gpu >= len(
                gpus
            ):
                raise _ResolveError(f"timeline.{n}: no GPU {ev.gpu} (the scenario has {len(gpus)})")
            if (
                isinstance(ev, XidBurst)
                and ev.mig is not None
                and all(m.index != ev.mig for m in gpus[ev.gpu].mig or ())
            ):
                raise _ResolveError(f"timeline.{n}: GPU {ev.gpu} has no MIG device {ev.mig}")
            if isinstance(ev, SetLoad) and ev.target not in targets:
                raise _ResolveError(f"timeline.{n}: set_load target {ev.target!r} is no GPU, MIG device or pod")

    @staticmethod
    def _unique(what: str, values: Iterable[object]) -> None:
        seen: set[object] = set()
        for v in values:
            if v in seen:
                raise _ResolveError(f"duplicate {what} {v}")
            seen.add(v)
