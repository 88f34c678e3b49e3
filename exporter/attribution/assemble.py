"""Assemble the pod side of the exporter from configuration values: the one call the CLI makes.

    attributor = build_pod_side(node_name=..., kubelet_socket=..., kubelet_interval=..., resource_names=...,
                                proc_root=..., kubernetes=..., kubeconfig=..., pod_labels=...)
    loop = PollLoop(..., attributor=attributor, pods_view=PodsDocumentBuilder(interval_seconds=...))

Bad values raise ValueError with one line naming the flag.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from exporter.attribution.attributor import (
    DEFAULT_MAX_MAPPING_AGE,
    KubeletPodAttributor,
    WatchedPods,
    WatchedSlices,
)
from exporter.attribution.labels import PodLabelPolicy
from exporter.attribution.podwatch import PodWatch
from exporter.attribution.proc import ProcessOwners
from exporter.attribution.slicewatch import ResourceSliceWatch
from exporter.kubelet.client import DEFAULT_SOCKET, PodResourcesClient
from exporter.kubelet.device_ids import ResourceNames

log = logging.getLogger(__name__)


def build_pod_side(
    *,
    node_name: str,
    kubelet_socket: Path | str = DEFAULT_SOCKET,
    kubelet_interval: float = 5.0,
    resource_names: Iterable[str] | str = (),
    proc_root: Path | str = Path("/proc"),
    kubernetes: bool = False,
    kubeconfig: Path | str | None = None,
    pod_labels: str | None = None,
    max_mapping_age: float | None = None,
    directory: WatchedPods | None = None,
    slices: WatchedSlices | None = None,
) -> KubeletPodAttributor:
    """A PodAttributor for the poll loop (not started: the loop calls start()).

    `resource_names` are extra extended-resource names that carry NVIDIA GPUs (a list, or the flag's comma-separated
    form). `kubernetes` turns on the pod watch and the watch of this node's ResourceSlices (DRA devices) (in-cluster
    credentials, or `kubeconfig`); `directory` and `slices` give the pods and the slices instead (the simulated node).
    The mapping is kept for `max_mapping_age` seconds after the kubelet stops answering
    (default: the larger of 60 s and four kubelet intervals).
    """
    if kubelet_interval <= 0:
        raise ValueError(f"--kubelet-interval must be a positive number of seconds, got {kubelet_interval}")
    if isinstance(resource_names, str):  # the flag's form: comma-separated
        resource_names = resource_names.split(",")
    try:
        names = ResourceNames.of(resource_names)
    except ValueError as error:
        raise ValueError(f"--resource-names: {error}") from None
    labels = PodLabelPolicy.parse(pod_labels)
    owners = ProcessOwners(proc_root)
    if not owners.available():
        log.warning(
            "--proc-root %s is not a directory: processes on shared GPUs cannot be tied to pods (mount the host's "
            "/proc, or run with hostPID)",
            proc_root,
        )
    pods, dra = directory, slices
    if kubernetes or kubeconfig is not None:
        from toolkit.kubeclient import api_client  # the kubernetes client, only with --kubernetes

        api = (
            api_client(kubeconfig=None if kubeconfig is None else Path(kubeconfig), in_cluster_flag="--kubernetes")
            if pods is None or dra is None
            else None
        )
        pods = pods or PodWatch(api, node_name)
        dra = dra or ResourceSliceWatch(api, node_name)
    client = PodResourcesClient(kubelet_socket, interval=kubelet_interval, call_timeout=min(10.0, kubelet_interval))
    age = max_mapping_age if max_mapping_age is not None else max(DEFAULT_MAX_MAPPING_AGE, 4 * kubelet_interval)
    return KubeletPodAttributor(
        client,
        owners=owners,
        pods=pods,
        slices=dra,
        resource_names=names,
        labels=labels,
        max_mapping_age=age,
    )
