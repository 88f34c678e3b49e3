"""Pod attribution: which pod and container uses which GPU or MIG instance, and what share of it.

`build_pod_side` assembles the `PodAttributor` the poll loop calls (kubelet pod-resources client, proc tree, optional
pod watch); `PodsDocumentBuilder` turns snapshots into the `/pods` document; `attribute` is the pure rule set.
"""

from exporter.attribution.assemble import build_pod_side
from exporter.attribution.attribute import AttributionResult, PodShare, attribute
from exporter.attribution.attributor import KubeletPodAttributor
from exporter.attribution.pods_builder import PodsDocumentBuilder

__all__ = [
    "AttributionResult",
    "KubeletPodAttributor",
    "PodShare",
    "PodsDocumentBuilder",
    "attribute",
    "build_pod_side",
]
