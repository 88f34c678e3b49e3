"""Whether the kubelet lists the pods' DRA devices at all.

pod-resources fills a container's `dynamic_resources` only while the kubelet's feature gate
KubeletPodResourcesDynamicResources is on: alpha and off by default from Kubernetes 1.27, beta and on by default from
1.34 (kubernetes/kubernetes pkg/features/kube_features.go). With the gate off, a pod whose containers use
ResourceClaims is listed without a single device, its GPUs are reported without it, and nothing in pod-resources says
why. The pod watch knows which pods use claims (`resources.claims` of a container): such a pod, running, listed with
no dynamic resource at all, means the gate is off. `KubeletDraCheck` says so once in the log and as the collector
status `kubelet_dra`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from exporter.attribution.directory import PodDirectory
from exporter.kubelet.podresources import PodResources
from exporter.snapshot import CollectorStatus
from toolkit.logs import fields

log = logging.getLogger(__name__)


def pods_without_dra_devices(listed: Sequence[PodResources], directory: PodDirectory) -> list[tuple[str, str]]:
    """The running pods the directory knows to use ResourceClaims that the kubelet lists without any DRA device."""
    found: list[tuple[str, str]] = []
    for pod in listed:
        if any(container.claims for container in pod.containers):
            continue
        meta = directory.by_name(pod.namespace, pod.name)
        if meta is not None and meta.uses_claims and meta.phase == "Running":
            found.append(pod.key)
    return found


class KubeletDraCheck:
    """Follows, cycle after cycle, whether the kubelet lists the DRA devices of the pods that use claims."""

    def __init__(self) -> None:
        self._seen_claims = False  # a pod using claims was ever listed: from then on the status is reported
        self._unlisted: set[tuple[str, str]] = set()  # every pod ever found without its devices (a counter's base)
        self._warned = False

    def status(self, listed: Sequence[PodResources], directory: PodDirectory | None) -> CollectorStatus | None:
        """This cycle's `kubelet_dra` status; None while no pod using claims was ever seen (or no pod watch runs)."""
        if directory is None:
            return None
        missing = pods_without_dra_devices(listed, directory)
        using = bool(missing) or any(c.claims for pod in listed for c in pod.containers)
        self._seen_claims = self._seen_claims or using
        if not self._seen_claims:
            return None
        self._unlisted.update(missing)
        if missing and not self._warned:
            log.warning(
                "%d pod(s) on this node use DRA ResourceClaims (e.g. %s), but the kubelet lists none of their "
                "devices in pod-resources: its KubeletPodResourcesDynamicResources feature gate is off (alpha and off "
                "by default before Kubernetes 1.34). Their GPUs are reported without pods; enable the gate on the "
                "kubelet, or upgrade the node to 1.34",
                len(missing),
                "/".join(missing[0]),
                extra=fields(pod="/".join(missing[0]), reason="KubeletPodResourcesDynamicResources"),
            )
        elif not missing and self._warned:
            log.info("the kubelet lists the DRA devices of this node's pods again")
        self._warned = bool(missing)
        return CollectorStatus("kubelet_dra", not missing, 0.0, float(len(self._unlisted)))
