"""Who uses which GPU or MIG instance, and what share of it: a pure function over plain data.

Inputs: this cycle's device readings (with NVML's per-process figures), the kubelet's pod-resources list, and two
look-ups: PID -> cgroup owner (pod UID, container ID) and pod UID -> pod (the pod watch). Either look-up may be absent.

Rules:
- A whole GPU held by one pod: `exclusive`, the device's own utilization, memory and power.
- A MIG instance (MIG-<uuid>, MIG-GPU-<uuid>/<gi>/<ci>, GKE nvidia<N>/gi<M>): `mig`, the instance's memory, its
  utilization from GPM activity when the collector has it (else None), no power (NVML has none per instance).
- A shared device (a `::n` replica or GKE `/vgpu<K>` ID, or a `.shared` resource name): one row per sharing pod and
  container. With both look-ups, each row is `process`: the pod's processes on the device, found through their cgroups,
  give its memory (the sum of their framebuffer use) and its utilization, which is the device's utilization split in
  proportion to the pods' summed per-process SM utilization (so the pods' shares add up to the device's figure, less
  what processes outside any sharing pod used). Without them, or when the device is busy but none of its processes
  can be tied to a sharing pod (the host's /proc is not visible, NVML lists no processes), every row is
  `unattributed` with no figures: the whole device's number is never copied onto each pod, nor replaced by zeros.
- MPS (the pods' processes are MPS clients): utilization samples name the MPS server, never a client, so no pod's
  part of the utilization is known: every row is `unattributed`, without utilization or power, but with the memory
  of the pod's clients, which NVML does give per client (nvml.h, nvmlDeviceGetMPSComputeRunningProcesses_v3).
- Power (and so energy) is charged by the same proportion: `exclusive` 1, `process` the pod's part of the SM
  utilization, or an equal part per sharing row (pod, container) when the device was idle in the cycle; none while the
  device is busy but no sample says whose the work is (a `process` row with unknown utilization); `mig` and
  `unattributed` rows carry none.
- A shared device loses the rows of pods the watch knows as finished (Succeeded, Failed).
- A non-shared device claimed by several pods (the kubelet before 1.34 still lists terminated pods whose devices were
  handed on) goes to one pod: drop pods the watch knows as terminated or no longer knows, then prefer a pod with a
  process on the device, then the most recently created, then the one listed last. Each such device counts as a
  conflict.
- Containers are matched by name (pod-resources lists sidecar init containers first: never by position).
- DRA: each device of a container's ResourceClaims (driver, pool, device) is mapped to its GPU or MIG instance by the
  `uuid` attribute its ResourceSlice publishes (`dra`, see resourceslices.py); without a slice, a `gpu.nvidia.com`
  device named `gpu-<minor>` (the NVIDIA DRA driver's name for a whole GPU, NVIDIA/k8s-dra-driver-gpu
  cmd/gpu-kubelet-plugin/deviceinfo.go `CanonicalName`) is the GPU with that minor number; MIG devices need the slice,
  and one published without a uuid (dynamic MIG) is found by its parent and profile when that names one instance
  (device_index.py).
  A claim that several pods reference (a shared ResourceClaim), or a device allocated as one share of its capacity
  (`share_id`), is shared like a time-sliced GPU; the rows carry the claim (`PodDeviceUse.claim`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from exporter.attribution.cgroup import CgroupOwner
from exporter.attribution.device_index import DeviceIndex
from exporter.attribution.directory import PodDirectory
from exporter.attribution.labels import PodLabelPolicy
from exporter.attribution.resourceslices import DraDevices
from exporter.kubelet.device_ids import DeviceIdError, ResourceNames, parse_device_id
from exporter.kubelet.podresources import PodResources
from exporter.snapshot import (
    DeviceReading,
    DraClaim,
    PodDeviceUse,
    PodRef,
    ProcessUsage,
    ShareMethod,
)
from toolkit.pods import Pod

OwnerLookup = Callable[[int], CgroupOwner | None]

# Catalogue keys this module reads from DeviceReading.values (native NVML units).
UTILIZATION = "gpu_util"  # %
MEMORY_USED = "fb_used"  # bytes
POWER = "power_usage"  # mW
MIG_ACTIVITY = ("gr_engine_active", "sm_active")  # % (GPM), first present wins


@dataclass(frozen=True, slots=True)
class PodShare:
    """One (pod, container, device) row, and the part of the device's power and energy charged to it."""

    use: PodDeviceUse
    fraction: float | None  # 0-1; None: no power/energy share (MIG, unattributed)


@dataclass(frozen=True, slots=True)
class AttributionResult:
    shares: tuple[PodShare, ...] = ()
    conflicts: int = 0  # non-shared devices claimed by more than one pod
    unknown_device_ids: int = 0  # IDs under a GPU resource name in no known format
    unmatched_device_ids: int = 0  # well-formed IDs (or gpu.nvidia.com DRA devices) naming no device on this node
    unattributed_processes: int = 0  # processes on shared devices that belong to none of the sharing pods
    mps_devices: int = 0  # shared devices whose pods run as MPS clients (utilization unattributed)
    ambiguous_dra_devices: int = 0  # dynamic MIG devices (no uuid) that fit several instances: matched to none

    @property
    def uses(self) -> tuple[PodDeviceUse, ...]:
        return tuple(share.use for share in self.shares)


@dataclass(slots=True)
class _Claim:
    order: int  # position of the pod in the List reply
    pod: PodResources
    container: str
    device: DeviceReading
    shared: bool
    claim: DraClaim | None = None


def attribute(
    devices: Sequence[DeviceReading],
    pods: Sequence[PodResources],
    *,
    resource_names: ResourceNames | None = None,
    owner_of: OwnerLookup | None = None,
    directory: PodDirectory | None = None,
    labels: PodLabelPolicy | None = None,
    dra: DraDevices | None = None,
) -> AttributionResult:
    """Map this cycle's devices to the pods holding them. Pure: reads only its arguments (and the look-ups)."""
    names = resource_names or ResourceNames()
    policy = labels or PodLabelPolicy()
    index = DeviceIndex.of(devices)
    claims, unknown, unmatched = _claims(pods, names, index)
    dra_claims, dra_unmatched, ambiguous = _dra_claims(pods, index, dra)
    claims += dra_claims
    unmatched += dra_unmatched
    by_device: dict[str, list[_Claim]] = {}
    for claim in claims:
        by_device.setdefault(claim.device.uuid, []).append(claim)

    process_pods = _ProcessPods(owner_of, directory)
    shares: list[PodShare] = []
    conflicts = unattributed_processes = mps_devices = 0
    for device in devices:
        device_claims = by_device.get(device.uuid)
        if not device_claims:
            continue
        distinct_pods = {c.pod.key for c in device_claims}
        if any(c.shared for c in device_claims):
            device_claims = _without_terminated(device_claims, directory)
            rows, stray = _shared(device, device_claims, process_pods, directory, policy)
            shares.extend(rows)
            unattributed_processes += stray
            mps_devices += any(p.mps_client for p in device.processes)
            continue
        if len(distinct_pods) > 1:
            conflicts += 1
            device_claims = _resolve_conflict(device, device_claims, process_pods, directory)
        for claim in device_claims:
            shares.append(_whole(device, claim, directory, policy))
    return AttributionResult(
        tuple(shares), conflicts, unknown, unmatched, unattributed_processes, mps_devices, ambiguous
    )


def _claims(pods: Sequence[PodResources], names: ResourceNames, index: DeviceIndex) -> tuple[list[_Claim], int, int]:
    claims: dict[tuple[tuple[str, str], str, str], _Claim] = {}
    unknown = unmatched = 0
    for order, pod in enumerate(pods):
        for container in pod.containers:
            for allocation in container.devices:
                if allocation.resource_name not in names:
                    continue
                shared_name = names.shared(allocation.resource_name)
                for raw in allocation.device_ids:
                    try:
                        ref = parse_device_id(raw)
                    except DeviceIdError:
                        unknown += 1
                        continue
                    device = index.resolve(ref)
                    if device is None:
                        unmatched += 1
                        continue
                    key = (pod.key, container.name, device.uuid)
                    shared = ref.shared or shared_name
                    previous = claims.get(key)
                    if previous is not None:  # two replicas of one device in one container; or a listed twice pod
                        previous.shared = previous.shared or shared
                        previous.order = order
                        continue
                    claims[key] = _Claim(order, pod, container.name, device, shared)
    return list(claims.values()), unknown, unmatched


def _dra_claims(
    pods: Sequence[PodResources], index: DeviceIndex, dra: DraDevices | None
) -> tuple[list[_Claim], int, int]:
    """The claims on GPUs made through DRA ResourceClaims; a claim several pods reference makes its devices shared.
    Also the count of GPU devices found on no device here, and of those that fit several (dynamic MIG)."""
    pods_of_claim: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for pod in pods:
        for container in pod.containers:
            for allocation in container.claims:
                pods_of_claim.setdefault(allocation.key, set()).add(pod.key)
    claims: dict[tuple[tuple[str, str], str, str], _Claim] = {}
    unmatched = ambiguous = 0
    for order, pod in enumerate(pods):
        for container in pod.containers:
            for allocation in container.claims:
                shared_claim = len(pods_of_claim[allocation.key]) > 1
                for allocated in allocation.devices:
                    match = index.resolve_dra(allocated, dra)
                    device = match.reading
                    if device is None:
                        unmatched += match.gpu
                        ambiguous += match.ambiguous
                        continue
                    key = (pod.key, container.name, device.uuid)
                    shared = shared_claim or allocated.share_id is not None
                    previous = claims.get(key)
                    if previous is not None:
                        previous.shared = previous.shared or shared
                        previous.order = order
                        continue
                    ref = DraClaim(*allocation.key, allocated.driver, allocated.pool, allocated.device)
                    claims[key] = _Claim(order, pod, container.name, device, shared, ref)
    return list(claims.values()), unmatched, ambiguous


class _ProcessPods:
    """PID -> (pod meta, container name), through the cgroup look-up and the pod directory; memoized per call."""

    def __init__(self, owner_of: OwnerLookup | None, directory: PodDirectory | None) -> None:
        self.enabled = owner_of is not None and directory is not None
        self._owner_of = owner_of
        self._directory = directory
        self._memo: dict[int, tuple[Pod, str | None] | None] = {}

    def of(self, pid: int) -> tuple[Pod, str | None] | None:
        if not self.enabled:
            return None
        if pid in self._memo:
            return self._memo[pid]
        assert self._owner_of is not None and self._directory is not None
        found: tuple[Pod, str | None] | None = None
        owner = self._owner_of(pid)
        if owner is not None:
            meta = self._directory.by_uid(owner.pod_uid)
            if meta is not None:
                container = meta.containers.get(owner.container_id) if owner.container_id else None
                found = (meta, container)
        self._memo[pid] = found
        return found


def _pod_ref(pod: PodResources, container: str, directory: PodDirectory | None, policy: PodLabelPolicy) -> PodRef:
    meta = directory.by_name(pod.namespace, pod.name) if directory is not None else None
    if meta is None:
        return PodRef(pod.namespace, pod.name, container)
    return PodRef(pod.namespace, pod.name, container, uid=meta.uid, labels=policy.select(meta.labels))


def _whole(device: DeviceReading, claim: _Claim, directory: PodDirectory | None, policy: PodLabelPolicy) -> PodShare:
    ref = _pod_ref(claim.pod, claim.container, directory, policy)
    memory = device.values.get(MEMORY_USED)
    memory_bytes = None if memory is None else int(memory)
    if device.is_mig:
        activity = next((device.values[k] for k in MIG_ACTIVITY if k in device.values), None)
        utilization = device.values.get(UTILIZATION, activity)
        use = PodDeviceUse(ref, device.uuid, ShareMethod.MIG, utilization, memory_bytes, claim=claim.claim)
        return PodShare(use, None)
    use = PodDeviceUse(
        ref,
        device.uuid,
        ShareMethod.EXCLUSIVE,
        device.values.get(UTILIZATION),
        memory_bytes,
        power_milliwatts=device.values.get(POWER),
        claim=claim.claim,
    )
    return PodShare(use, 1.0)


def _memory_of(processes: list[ProcessUsage]) -> int | None:
    """The framebuffer a row's processes use: 0 for none, None when NVML could not say for any of them."""
    memories = [p.used_memory_bytes for p in processes if p.used_memory_bytes is not None]
    return sum(memories) if memories or not processes else None


def _without_terminated(claims: list[_Claim], directory: PodDirectory | None) -> list[_Claim]:
    """Drop the claims of pods the pod watch knows as finished (a stale replica of a terminated pod)."""
    if directory is None:
        return claims
    kept = [c for c in claims if not ((m := directory.by_name(*c.pod.key)) is not None and m.terminated)]
    return kept or claims


def _resolve_conflict(
    device: DeviceReading, claims: list[_Claim], process_pods: _ProcessPods, directory: PodDirectory | None
) -> list[_Claim]:
    """Keep the claims of the one pod that most likely holds the device now (see the module rules)."""
    candidates = claims
    metas: dict[tuple[str, str], Pod | None] = {}
    if directory is not None:
        metas = {c.pod.key: directory.by_name(*c.pod.key) for c in claims}
        alive = [c for c in candidates if (m := metas[c.pod.key]) is not None and not m.terminated]
        candidates = alive or candidates
    running_here = {found.namespace_name for p in device.processes if (found := _found(process_pods, p)) is not None}
    with_processes = [c for c in candidates if c.pod.key in running_here]
    candidates = with_processes or candidates

    def recency(claim: _Claim) -> tuple[float, int]:
        meta = metas.get(claim.pod.key)
        created = meta.created_at if meta is not None and meta.created_at is not None else float("-inf")
        return (created, claim.order)

    winner = max(candidates, key=recency).pod.key
    return [c for c in claims if c.pod.key == winner]


def _found(process_pods: _ProcessPods, process: ProcessUsage) -> _Found | None:
    found = process_pods.of(process.pid)
    return None if found is None else _Found(found[0], found[1])


@dataclass(frozen=True, slots=True)
class _Found:
    meta: Pod
    container: str | None

    @property
    def namespace_name(self) -> tuple[str, str]:
        return (self.meta.namespace, self.meta.name)


def _shared(
    device: DeviceReading,
    claims: list[_Claim],
    process_pods: _ProcessPods,
    directory: PodDirectory | None,
    policy: PodLabelPolicy,
) -> tuple[list[PodShare], int]:
    """One row per sharing (pod, container); figures from the pods' processes when they can be tied to pods."""
    claims = sorted(claims, key=lambda c: (c.pod.namespace, c.pod.name, c.container))
    sharing = len({c.pod.key for c in claims})
    refs = [_pod_ref(c.pod, c.container, directory, policy) for c in claims]
    unattributed = [
        PodShare(
            PodDeviceUse(ref, device.uuid, ShareMethod.UNATTRIBUTED, None, None, sharing_pods=sharing, claim=c.claim),
            None,
        )
        for ref, c in zip(refs, claims, strict=True)
    ]
    if not process_pods.enabled:
        return unattributed, 0

    # Assign each process to a row: its pod's row for its container, else that pod's first row on this device.
    rows_of_pod: dict[tuple[str, str], list[int]] = {}
    for i, claim in enumerate(claims):
        rows_of_pod.setdefault(claim.pod.key, []).append(i)
    assigned: list[list[ProcessUsage]] = [[] for _ in claims]
    stray = 0
    for process in device.processes:
        found = _found(process_pods, process)
        pod_rows = rows_of_pod.get(found.namespace_name) if found is not None else None
        if found is None or pod_rows is None:
            stray += 1
            continue
        row = next((i for i in pod_rows if claims[i].container == found.container), pod_rows[0])
        assigned[row].append(process)
    device_util = device.values.get(UTILIZATION)
    if not any(assigned) and (device.processes or (device_util or 0.0) > 0):
        # busy, but no process could be tied to a sharing pod (no host /proc, no process list): say so, never 0
        return unattributed, stray
    if any(p.mps_client for p in device.processes):  # samples name the MPS server: memory only
        return [
            PodShare(replace(row.use, memory_used_bytes=_memory_of(processes)), None)
            for row, processes in zip(unattributed, assigned, strict=True)
        ], stray

    sampled = [p.sm_util_percent for p in device.processes if p.sm_util_percent is not None]
    total_sm = float(sum(sampled))
    power = device.values.get(POWER)
    shares: list[PodShare] = []
    for ref, processes, claim in zip(refs, assigned, claims, strict=True):
        pod_sm = float(sum(p.sm_util_percent for p in processes if p.sm_util_percent is not None))
        memory = _memory_of(processes)
        utilization: float | None
        fraction: float | None
        if total_sm > 0:
            fraction = pod_sm / total_sm
            utilization = fraction * device_util if device_util is not None else pod_sm
        elif sampled or device_util == 0:  # idle: an equal part of the idle power
            fraction, utilization = 1.0 / len(claims), 0.0
        else:  # busy, and no sample says whose the work is (samples stopped): no part of it is known
            fraction = utilization = None
        use = PodDeviceUse(
            ref,
            device.uuid,
            ShareMethod.PROCESS,
            utilization,
            memory,
            power_milliwatts=None if power is None or fraction is None else power * fraction,
            sharing_pods=sharing,
            claim=claim.claim,
        )
        shares.append(PodShare(use, fraction))
    return shares, stray
