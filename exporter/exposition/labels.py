"""Label sets of device, identity and per-pod series in each dialect, as ordered (name, value) pairs.

The dcgm dialect reproduces dcgm-exporter (its etc/default-counters.csv and label rendering): `gpu`, `UUID`,
`pci_bus_id`, `device`, `modelName`, for MIG `GPU_I_PROFILE` and `GPU_I_ID`, then `Hostname` and
`DCGM_FI_DRIVER_VERSION`; MIG series carry the parent GPU's index and UUID. Pod labels (`container`, `namespace`, `pod`)
follow where a pod is attributed, and for a device held through a DRA ResourceClaim the labels dcgm-exporter adds
(NVIDIA/dcgm-exporter internal/pkg/transformation/const.go): `dra_claim_name`, `dra_claim_namespace`,
`dra_driver_name`, `dra_pool_name`, `dra_device_name`. The prometheus dialect uses `gpu`, `uuid`, `model`, `node`,
and for MIG `gpu_instance`, `mig_profile`; its device series carry no pod labels.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from exporter.catalogue import (
    DCGM_DEVICE_LABELS,
    DCGM_DRA_LABELS,
    DCGM_MIG_LABELS,
    DCGM_POD_LABELS,
    DCGM_TRAILING_LABELS,
    INFOROM_KEYS,
    LABEL_BY_KEY,
    POD_CLAIM_LABELS,
    POD_LABELS,
    PROM_DEVICE_LABELS,
    PROM_MIG_LABELS,
    Dialect,
)
from exporter.snapshot import DeviceReading, DraClaim, GpuIdentity, MigIdentity, PodDeviceUse, PodRef

Pairs = tuple[tuple[str, str], ...]

_INVALID_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")


def device_name(gpu: GpuIdentity) -> str:
    """The `device` label of the dcgm dialect: dcgm-exporter writes `nvidia<GPU index>` (not the minor number)."""
    return f"nvidia{gpu.index}"


def device_node(gpu: GpuIdentity) -> str:
    """The GPU's device node: /dev/nvidia<minor>."""
    return f"nvidia{gpu.minor_number}"


# dcgm label fields on every series: (GpuIdentity attribute, label name); the driver version is always there
DEFAULT_LABEL_FIELDS: tuple[tuple[str, str], ...] = (("driver_version", DCGM_TRAILING_LABELS[1]),)


def device_pairs(
    identity: GpuIdentity | MigIdentity,
    node: str,
    dialect: Dialect,
    hostname_label: str = DCGM_TRAILING_LABELS[0],
    label_fields: tuple[tuple[str, str], ...] = DEFAULT_LABEL_FIELDS,
) -> Pairs:
    """The labels of every series of one GPU or MIG instance (without pod labels). `hostname_label` spells the dcgm
    dialect's node-name label (`Hostname`, or `hostname` as dcgm-exporter after 4.5.3-4.8.2 does); `label_fields`
    are the dcgm label fields to add after it, (attribute, label name), in label-name order as dcgm-exporter's
    template ranges over them; one the GPU has no value for is left out, as dcgm-exporter skips a blank value."""
    gpu = identity.parent if isinstance(identity, MigIdentity) else identity
    if dialect is Dialect.DCGM:
        values: list[str] = [str(gpu.index), gpu.uuid, gpu.pci_bus_id, device_name(gpu), gpu.model]
        names: list[str] = list(DCGM_DEVICE_LABELS)
        if isinstance(identity, MigIdentity):
            names += DCGM_MIG_LABELS
            values += [identity.profile, str(identity.gpu_instance_id)]
        names.append(hostname_label)
        values.append(node)
        for key, name in label_fields:
            value = gpu.label_value(key)
            if value or key == "driver_version":  # the driver version label is there even when NVML said nothing
                names.append(name)
                values.append(value or "")
        return tuple(zip(names, values, strict=True))
    pairs: list[tuple[str, str]] = list(
        zip(PROM_DEVICE_LABELS, (str(gpu.index), gpu.uuid, gpu.model, node), strict=True)
    )
    if isinstance(identity, MigIdentity):
        pairs += zip(PROM_MIG_LABELS, (str(identity.gpu_instance_id), identity.profile), strict=True)
    return tuple(pairs)


def dcgm_pod_pairs(pod: PodRef, claim: DraClaim | None = None) -> Pairs:
    """The pod labels dcgm-exporter appends to a device series of an attributed device (and its DRA labels)."""
    pairs = tuple(zip(DCGM_POD_LABELS, (pod.container, pod.namespace, pod.name), strict=True))
    if claim is None:
        return pairs
    values = (claim.name, claim.namespace, claim.driver, claim.pool, claim.device)
    return pairs + tuple(zip(DCGM_DRA_LABELS, values, strict=True))


def info_pairs(identity: GpuIdentity | MigIdentity, node: str) -> Pairs:
    """Labels of `nvidia_gpu_info` (prometheus dialect): identity details that stay off the other series."""
    gpu = identity.parent if isinstance(identity, MigIdentity) else identity
    pairs: list[tuple[str, str]] = [
        ("gpu", str(gpu.index)),
        ("uuid", gpu.uuid),
        ("model", gpu.model),
        ("node", node),
        ("pci_bus_id", gpu.pci_bus_id),
        ("device", device_node(gpu)),
        ("driver_version", gpu.driver_version),
        ("cuda_version", gpu.cuda_driver_version),
        ("nvml_version", gpu.nvml_version),
        ("brand", gpu.brand or ""),
        ("serial", gpu.serial or ""),
        ("vbios_version", gpu.vbios_version or ""),
        ("mig_mode", "enabled" if gpu.mig_enabled else "disabled"),
    ]
    if isinstance(identity, MigIdentity):
        pairs += [
            ("gpu_instance", str(identity.gpu_instance_id)),
            ("mig_profile", identity.profile),
            ("mig_uuid", identity.uuid),
        ]
    return tuple(pairs)


def inforom_pairs(gpu: GpuIdentity, node: str) -> Pairs | None:
    """Labels of `nvidia_gpu_inforom_info` (prometheus dialect): the InfoROM versions DCGM's label fields give, or
    None when the GPU gives none."""
    versions = [(LABEL_BY_KEY[key].prometheus_label, gpu.label_value(key) or "") for key in INFOROM_KEYS]
    if not any(value for _, value in versions):
        return None
    return (("gpu", str(gpu.index)), ("uuid", gpu.uuid), ("model", gpu.model), ("node", node), *versions)


def pod_label_name(key: str) -> str:
    """A Kubernetes pod label key as a Prometheus label name: `label_` + the key with invalid characters as `_`."""
    return "label_" + _INVALID_LABEL_CHARS.sub("_", key)


def pod_series_pairs(use: PodDeviceUse, device: DeviceReading | None, node: str) -> Pairs:
    """Labels of the `gpu_pulse_pod_*` series of one (pod, container, device) edge.

    `gpu` and `uuid` name the physical GPU; `gpu_instance` and `mig_profile` are empty unless the device is a MIG
    instance. A device the snapshot does not hold (it vanished this cycle) keeps its UUID and an empty `gpu`.
    A device held through a DRA ResourceClaim adds `dra_claim_name` and `dra_claim_namespace` (dcgm-exporter's names).
    Exported pod labels (`PodRef.labels`, already filtered by `--pod-labels`) follow as `label_<key>`.
    """
    gpu_index, gpu_uuid, instance, profile = "", use.device_uuid, "", ""
    if device is not None:
        ident = device.identity
        gpu = device.gpu
        gpu_index, gpu_uuid = str(gpu.index), gpu.uuid
        if isinstance(ident, MigIdentity):
            instance, profile = str(ident.gpu_instance_id), ident.profile
    pod = use.pod
    values = (node, pod.namespace, pod.name, pod.container, gpu_index, gpu_uuid, instance, profile, str(use.share))
    pairs = tuple(zip(POD_LABELS, values, strict=True))
    if use.claim is not None:
        pairs += tuple(zip(POD_CLAIM_LABELS, (use.claim.name, use.claim.namespace), strict=True))
    return pairs + _extra_pod_labels(pod.labels, frozenset(POD_LABELS + POD_CLAIM_LABELS))


def _extra_pod_labels(labels: Mapping[str, str], taken: frozenset[str]) -> Pairs:
    if not labels:
        return ()
    seen = set(taken)
    extra: list[tuple[str, str]] = []
    for key in sorted(labels):
        name = pod_label_name(key)
        if name in seen:  # two keys that sanitise alike: the first (in key order) wins
            continue
        seen.add(name)
        extra.append((name, labels[key]))
    return tuple(extra)
