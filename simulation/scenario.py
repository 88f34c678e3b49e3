"""A scenario is one simulated node, as data: its GPUs, MIG layout, processes, pods and a timeline of faults.

Scenario files (YAML or JSON) use these models. Identities a file leaves out (GPU/MIG UUIDs, serials, PCI bus ids, pod
UIDs, container ids, the kubelet's device ids) are derived from the seed when the scenario is loaded (see `loader`),
so a loaded `Scenario` has every one of them filled in and two loads with the same seed are identical.

Consumers besides the NVML simulator read the loaded model directly: the fake kubelet serves `pods` (each container's
`devices` are exactly the pod-resources `ContainerDevices` the kubelet would report), the proc-tree writer uses `pods`
and `processes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from simulation.curves import IDLE, LoadCurve

ErrorName = Literal["NOT_SUPPORTED", "NO_PERMISSION", "UNKNOWN", "GPU_IS_LOST"]
QosClass = Literal["guaranteed", "burstable", "besteffort"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MigInstance(_Model):
    """One MIG device (a GPU instance with one compute instance) on a MIG-enabled GPU."""

    profile: str = Field(description="GPU-instance profile, e.g. 3g.20gb; must exist for the GPU model")
    index: int | None = Field(default=None, ge=0, lt=7, description="MIG device index on its GPU; default: next free")
    gpu_instance_id: int | None = Field(default=None, ge=0, description="default: next free id for the profile")
    compute_instance_id: int = Field(default=0, ge=0)
    uuid: str | None = Field(default=None, description="MIG-...; default: derived from the seed")
    load: LoadCurve = Field(
        default=IDLE, description="utilization of the instance when no process on it has its own curve"
    )


class HealthCounters(_Model):
    """Error counters a GPU reports (field values and nvmlDeviceGetPcieReplayCounter)."""

    ecc_corrected_per_hour: float = Field(default=0.0, ge=0, description="volatile single-bit ECC errors, rate")
    ecc_uncorrected: int = Field(default=0, ge=0, description="volatile double-bit ECC errors, total")
    ecc_lifetime_corrected: int = Field(
        default=0, ge=0, description="single-bit ECC errors before this driver load (the aggregate counter adds them)"
    )
    ecc_lifetime_uncorrected: int = Field(default=0, ge=0, description="double-bit ECC errors before this driver load")
    pcie_replays_per_hour: float = Field(default=0.0, ge=0)
    remapped_correctable: int = Field(default=0, ge=0)
    remapped_uncorrectable: int = Field(default=0, ge=0)
    remap_pending: bool = False
    remap_failure: bool = False
    retired_pages_sbe: int = Field(default=0, ge=0, description="pages retired (Volta, Turing only)")
    retired_pages_dbe: int = Field(default=0, ge=0)
    retired_pages_pending: bool = False
    nvlink_crc_errors_per_hour: float = Field(default=0.0, ge=0, description="NVLink flow-control CRC errors, rate")


class Gpu(_Model):
    model: str = Field(description="a key of hardware.GPU_MODELS, e.g. H100-SXM5-80GB")
    count: int = Field(default=1, ge=1, le=64, description="repeat this GPU; every copy gets its own identity")
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    minor_number: int | None = Field(
        default=None,
        ge=0,
        lt=256,
        description="the N of /dev/nvidia<N> (nvmlDeviceGetMinorNumber); default: the GPU's index. It need not be: "
        "the driver numbers GPUs as it probes them, and a GPU that is gone or bound to another driver leaves a gap",
    )
    load: LoadCurve = Field(default=IDLE, description="GPU utilization when no process on it has its own curve")
    memory_copy_ratio: float = Field(
        default=0.45, ge=0, le=1, description="memory-copy utilization per unit of GPU load"
    )
    encoder: LoadCurve = IDLE
    decoder: LoadCurve = IDLE
    tensor_fraction: float = Field(
        default=0.6, ge=0, le=1, description="share of SM activity that uses tensor cores (GPM)"
    )
    mig: tuple[MigInstance, ...] | None = Field(default=None, description="None: MIG disabled; a list: MIG enabled")
    mig_names: Literal["profile", "plain"] = Field(
        default="profile",
        description="nvmlDeviceGetName of a MIG device: '<board> MIG <profile>', or (some drivers) '<board>'",
    )
    errors: Mapping[str, ErrorName] = Field(
        default_factory=dict,
        description="NVML function name, or field:<id> for a field value, or gpm:<metric id> -> the error it returns",
    )
    slow_calls: Mapping[str, float] = Field(
        default_factory=dict, description="NVML function name -> seconds each call on this GPU sleeps"
    )
    mps_server_pid: int | None = Field(
        default=None,
        gt=0,
        lt=2**22,
        description="MPS on: the nvidia-cuda-mps-server process; the GPU's processes are then MPS clients, listed by "
        "nvmlDeviceGetMPSComputeRunningProcesses, and the compute list shows only the server",
    )
    counters: HealthCounters = HealthCounters()
    bound: bool = Field(
        default=True,
        description="False: the GPU is not bound to the nvidia driver at t=0 (vfio-pci, or removed): NVML does not "
        "enumerate it until a bind_gpu event",
    )
    power_limit_w: float | None = Field(
        default=None,
        gt=0,
        description="the power management limit set on the board (nvidia-smi -pl: nvmlDeviceGetPowerManagementLimit); "
        "default: the board's default limit",
    )
    power_cap_w: float | None = Field(
        default=None,
        gt=0,
        description="a power cap set out of band (the BMC of a power-capped hall): nvmlDeviceGetEnforcedPowerLimit "
        "answers the lower of it and the management limit, 'the effective power limit that the driver enforces after "
        "taking into account all limiters ... This includes the out of band power limit interface' (nvml.h), while "
        "nvmlDeviceGetPowerManagementLimit still answers the management limit",
    )
    ecc: bool = Field(
        default=True,
        description="ECC mode. Off: every ECC counter is NOT_SUPPORTED (nvml.h, nvmlDeviceGetTotalEccErrors: "
        "'Requires ECC Mode to be enabled'; nvidia-smi -q shows them N/A)",
    )


class Process(_Model):
    """A compute process on a GPU (or on one MIG device of it)."""

    pid: int = Field(gt=0, lt=2**22)
    gpu: int = Field(ge=0)
    mig: int | None = Field(default=None, ge=0, description="MIG device index on the GPU")
    name: str = Field(default="python3", min_length=1, max_length=15, description="what /proc/<pid>/comm says")
    memory_mib: float = Field(ge=0)
    share: float = Field(default=1.0, gt=0, description="weight in the split of the device's load curve")
    load: LoadCurve | None = Field(default=None, description="own utilization curve; default: a share of the device's")
    namespace_pid: int | None = Field(
        default=None,
        gt=0,
        lt=2**22,
        description="the process runs in the exporter's own PID namespace (exporter_pid_namespace: container, e.g. "
        "the exporter as a sidecar of the GPU workload), where it has this PID: drivers that translate PIDs list it "
        "under it, while its utilization samples keep the host PID",
    )


class GpuRef(_Model):
    """A GPU (or MIG device, or time-slicing replica) the device plugin allocated to a container."""

    gpu: int = Field(ge=0)
    mig: int | None = Field(default=None, ge=0, description="MIG device index: the container holds that MIG device")
    replica: int | None = Field(default=None, ge=0, description="time-slicing replica: device id GPU-<uuid>::<replica>")
    strategy: Literal["mixed", "single"] = Field(default="mixed", description="MIG strategy of the device plugin")
    resource_name: str | None = Field(default=None, description="default: nvidia.com/gpu, or nvidia.com/mig-<profile>")


class ContainerDevices(_Model):
    """Exactly what pod-resources v1 reports in ContainerDevices."""

    resource_name: str
    device_ids: tuple[str, ...]


class ClaimedDevice(_Model):
    """A GPU, or one MIG device of it, that the DRA driver allocated to a ResourceClaim."""

    gpu: int = Field(ge=0)
    mig: int | None = Field(default=None, ge=0, description="MIG device index: the claim holds that MIG device")


class ResourceClaim(_Model):
    """A ResourceClaim allocated by the NVIDIA DRA driver (gpu.nvidia.com); containers name it in `claims`."""

    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    uid: str | None = Field(default=None, description="default: derived from the seed")
    devices: tuple[ClaimedDevice, ...] = Field(min_length=1)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


class Container(_Model):
    name: str = Field(min_length=1)
    id: str | None = Field(default=None, description="container id (64 hex digits); default: derived from the seed")
    sidecar: bool = Field(default=False, description="a restartable init container (listed before app containers)")
    gpus: tuple[GpuRef, ...] = ()
    devices: tuple[ContainerDevices, ...] = Field(
        (), description="derived from gpus when empty; give it to use other device-id formats"
    )
    pids: tuple[int, ...] = Field(default=(), description="processes running in this container")
    claims: tuple[str, ...] = Field(
        default=(), description="names of ResourceClaims (in the pod's namespace) whose devices this container uses"
    )


class Engine(_Model):
    """A simulated serving engine in the pod (simulation.engines): it serves its engine's `/metrics` on the loopback
    and drives the pod's GPU load from its running batch."""

    kind: Literal["vllm", "sglang", "nim", "triton-trtllm", "dynamo", "tgi"]
    model: str = Field(default="meta-llama/Llama-3.1-8B-Instruct", min_length=1, max_length=200)
    arrivals: LoadCurve = Field(
        default=LoadCurve(baseline=40.0),
        description="request arrivals over time, 0-100: 100 is `peak` times the rate the engine finishes requests "
        "at its largest batch",
    )
    peak: float = Field(
        default=1.5,
        gt=0,
        le=10,
        description="what 100 on the arrivals curve is, as a multiple of the engine's saturation rate (above 1: the "
        "queue grows once arrivals pass 100/peak)",
    )
    old_kv_name: bool = Field(
        default=False,
        description="vLLM only: also serve vllm:gpu_cache_usage_perc (the name before vllm PR #29330)",
    )
    data_parallel: int = Field(
        default=1,
        ge=1,
        le=16,
        description="vLLM only: engine cores behind one API server (`--data-parallel-size`), each serving its own "
        'series of every vllm: family under `engine="0"`, `engine="1"`...; the GPU follows the first core',
    )
    drives_gpu: bool = Field(
        default=True,
        description="the engine's batch sets its pod's GPU load (False: the GPU follows the scenario's curves)",
    )
    port: int | None = Field(
        default=None,
        gt=0,
        lt=65536,
        description="serve on this port of the pod's `ip` (a loopback address of its own, as a pod has its own IP); "
        "default: a port of the kernel's choice on 127.0.0.1. Either way the pod's gpu-pulse.dev/engine-port "
        "annotation names it",
    )


class Pod(_Model):
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    uid: str | None = None
    qos: QosClass = "burstable"
    labels: Mapping[str, str] = Field(default_factory=dict)
    containers: tuple[Container, ...] = Field(min_length=1)
    ip: str | None = Field(
        default=None,
        pattern=r"^[0-9A-Fa-f:.]+$",
        description="status.podIP: with annotations naming a port, the exporter reads an engine there (a real "
        "engine process, or a test's server); default: 127.0.0.1 for a pod with a simulated engine, else none",
    )
    annotations: Mapping[str, str] = Field(
        default_factory=dict, description="metadata.annotations, e.g. prometheus.io/port or gpu-pulse.dev/engine-port"
    )
    ready: bool = Field(default=True, description="the pod's Ready condition")
    engine: Engine | None = None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


class LoseGpu(_Model):
    at: float = Field(ge=0, description="seconds of scenario time")
    action: Literal["lose_gpu"]
    gpu: int = Field(ge=0)


class RestoreGpu(_Model):
    at: float = Field(ge=0)
    action: Literal["restore_gpu"]
    gpu: int = Field(ge=0)


class XidBurst(_Model):
    at: float = Field(ge=0)
    action: Literal["xid"]
    gpu: int = Field(ge=0)
    mig: int | None = Field(default=None, ge=0, description="MIG device index: an XID of that instance only")
    xid: int = Field(gt=0)
    repeat: int = Field(default=1, ge=1, le=10_000)
    every_s: float = Field(default=0.1, gt=0)


class GspTimeout(_Model):
    """An RPC to the GPU's GSP firmware times out: the driver logs Xid 119 to the kernel log and, from R570, posts the
    GPU-unavailable event (simulation/driver.py); the GPU is not lost. Each of `repeat` timeouts makes the NVML calls
    that wait on it slow: every call on the GPU takes `stall_s` until the last timeout is `stall_s` old."""

    at: float = Field(ge=0)
    action: Literal["gsp_timeout"]
    gpu: int = Field(ge=0)
    repeat: int = Field(default=1, ge=1, le=1000)
    every_s: float = Field(default=6.0, gt=0, description="seconds between timeouts (the driver's RPC timeout)")
    stall_s: float = Field(default=0.0, ge=0, description="how long each NVML call on the GPU waits meanwhile")


class SetLoad(_Model):
    at: float = Field(ge=0)
    action: Literal["set_load"]
    target: str = Field(description="a GPU or MIG UUID, a GPU index, or namespace/name of a pod")
    percent: float = Field(ge=0, le=100)


class ReconfigureMig(_Model):
    """What the GPU Operator's mig-manager does: drain the GPU, change its MIG mode and/or its instances.

    `mig` is the new layout: None turns MIG off, a list turns it on (or keeps it on) with these instances. The old
    instances are destroyed: their handles become invalid, and a handle of a slot that is reused names the new
    instance, with its own properties. The GPU's processes are gone (the mig-manager evicts the workloads first).

    A change of the MIG mode needs the GPU idle (nvml.h, nvmlDeviceSetMigMode: the mode is activated by unbinding or
    resetting the device, and "if device unbind fails because the device isn't idle, NVML_ERROR_IN_USE would be
    returned"): while the NVML caller holds the GPU the new mode stays pending (nvmlDeviceGetMigMode: current and
    pending differ), no instance of the new layout exists, and the mig-manager tries again every `retry_every_s`.
    """

    at: float = Field(ge=0)
    action: Literal["reconfigure_mig"]
    gpu: int = Field(ge=0)
    mig: tuple[MigInstance, ...] | None = None
    retry_every_s: float = Field(
        default=10.0, gt=0, description="how soon the mig-manager tries a refused change again"
    )


class StepWallClock(_Model):
    """The host's wall clock is stepped (NTP, an operator): NVML stamps the samples taken from then on with it."""

    at: float = Field(ge=0)
    action: Literal["step_wall_clock"]
    seconds: float = Field(description="how far the clock jumps; negative: back")


class UnloadDriver(_Model):
    """A driver manager unloads the NVIDIA kernel modules before it installs a driver (NVIDIA k8s-driver-manager,
    cmd/driver-manager/main.go `unloadDriver`: delete_module of nvidia_modeset, nvidia_uvm, ..., nvidia, which fails
    while a process holds the driver open: "Could not unload NVIDIA driver kernel modules, driver is in use"). Refused
    while the NVML caller has NVML initialized; the driver pod restarts and tries again every `retry_every_s`."""

    at: float = Field(ge=0)
    action: Literal["unload_driver"]
    retry_every_s: float = Field(default=10.0, gt=0)


class LoadDriver(_Model):
    """The NVIDIA kernel modules of `version` are loaded (a driver container that finished installing, or an admin's
    modprobe after a package upgrade). It waits for an unload still refused: a driver container installs only once
    the old modules are gone."""

    at: float = Field(ge=0)
    action: Literal["load_driver"]
    version: str | None = Field(
        default=None, pattern=r"^\d+\.\d+(\.\d+)?$", description="default: the scenario's driver_version"
    )


class UnbindGpu(_Model):
    """The GPU leaves the nvidia driver (`echo <bus id> > /sys/bus/pci/drivers/nvidia/unbind`, or
    nvmlDeviceRemoveGpu before handing it to vfio-pci). It waits while the GPU is open: open-gpu-kernel-modules
    kernel-open/nvidia/nv-pci.c `nv_pci_remove` loops until the device's usage count is zero, and nvml.h says
    nvmlDeviceRemoveGpu_v2 returns IN_USE "if the device is still in use": so it completes once the NVML caller lets
    go of the GPU (nvmlShutdown)."""

    at: float = Field(ge=0)
    action: Literal["unbind_gpu"]
    gpu: int = Field(ge=0)


class BindGpu(_Model):
    """The GPU is bound to the nvidia driver again and NVML enumerates it, in bus order: "for long-running NVML
    processes the enumeration will change", and handles of the GPUs whose index moved "will not be valid and must be
    re-established" (nvml.h, nvmlDeviceRemoveGpu_v2 and nvmlDeviceDiscoverGpus)."""

    at: float = Field(ge=0)
    action: Literal["bind_gpu"]
    gpu: int = Field(ge=0)


TimelineEvent = Annotated[
    LoseGpu
    | RestoreGpu
    | XidBurst
    | GspTimeout
    | SetLoad
    | ReconfigureMig
    | StepWallClock
    | UnloadDriver
    | LoadDriver
    | UnbindGpu
    | BindGpu,
    Field(discriminator="action"),
]


class Scenario(_Model):
    name: str = Field(min_length=1)
    description: str = ""
    seed: int = 0
    node: str = Field(default="gpu-node-1", min_length=1)
    driver_version: str = Field(default="550.54.15", pattern=r"^\d+\.\d+(\.\d+)?$")
    cuda_driver_version: int = Field(
        default=12040, description="as nvmlSystemGetCudaDriverVersion: 1000*major + 10*minor"
    )
    nvml_version: str = "12.550.54.15"
    kernel_module_version: str | None = Field(
        default=None,
        pattern=r"^\d+\.\d+(\.\d+)?$",
        description="the NVIDIA kernel module loaded at t=0 when it is not driver_version (which is the NVML library "
        "the exporter's container has): a driver upgraded without reloading the modules, so nvmlInit fails with "
        "LIB_RM_VERSION_MISMATCH until a load_driver event loads the matching modules",
    )
    driver_loaded: bool = Field(
        default=True,
        description="False: no NVIDIA kernel module at t=0 (a driver container still installing it): nvmlInit fails "
        "with DRIVER_NOT_LOADED until a load_driver event",
    )
    exporter_pid_namespace: Literal["host", "container"] = Field(
        default="host",
        description="the PID namespace the exporter (the NVML caller) runs in: 'host' (hostPID: true), or its own "
        "container's: then it sees no GPU process in /proc, and drivers that translate PIDs (R535.113+, R545+) leave "
        "every GPU process out of their lists",
    )
    mig_monitor_privilege: bool = Field(
        default=True,
        description="whether the NVML caller may monitor MIG (NVIDIA_MIG_MONITOR_DEVICES=all with CAP_SYS_ADMIN). "
        "Without it (nvml.h, notes on memory info, running processes and nvmlEventSetWait) a MIG-enabled GPU's own "
        "handle gives no aggregate memory or process list, and XID events of single instances do not arrive",
    )
    untyped_fields: tuple[int, ...] = Field(
        default=(),
        description="NVML field ids whose nvmlFieldValue_t.valueType this driver leaves as the caller set it (a "
        "zero-filled array: DOUBLE) while it writes the value as its own type: NVIDIA/DCGM DcgmCacheManager.cpp "
        "works around it for the ECC fields (1-28, 'NVML Bug 2032468': NVML 'isn't setting them') and for memory "
        "temperature (82, 'nvbugs/4300930 affecting r545')",
    )
    missing_functions: tuple[str, ...] = Field(
        default=(),
        description="C functions this (older) driver lacks: pynvml raises NVMLError_FunctionNotFound for them",
    )
    kubernetes_version: str = Field(
        default="1.34",
        pattern=r"^1\.\d+$",
        description="the kubelet's minor release: from 1.34 its KubeletPodResourcesDynamicResources gate is on by "
        "default and pod-resources lists each container's DRA devices; before, the gate is alpha and off",
    )
    kubelet_feature_gates: Mapping[str, bool] = Field(
        default_factory=dict, description="the kubelet's --feature-gates, e.g. KubeletPodResourcesDynamicResources"
    )
    gpus: tuple[Gpu, ...] = ()
    processes: tuple[Process, ...] = ()
    pods: tuple[Pod, ...] = ()
    claims: tuple[ResourceClaim, ...] = Field(
        default=(), description="DRA ResourceClaims; the node then publishes ResourceSlices for its GPUs"
    )
    dra_dynamic_mig: bool = Field(
        default=False,
        description="the NVIDIA DRA driver's dynamic MIG (feature gate DynamicMIG): MIG devices are published as "
        "partitions of their GPU, with parentUUID and profile but no uuid",
    )
    timeline: tuple[TimelineEvent, ...] = ()
    load_file: str | None = Field(
        default=None,
        description="a JSON file of set_load overrides, {target: percent or null}, read once a second when it changed: "
        "how a test moves a running node's load (simulation/loadfile.py)",
    )

    def pod_of_pid(self, pid: int) -> tuple[Pod, Container] | None:
        """The pod and container that run `pid`, if any."""
        for pod in self.pods:
            for container in pod.containers:
                if pid in container.pids:
                    return pod, container
        return None
