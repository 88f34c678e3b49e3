"""The bytes of every `/pods` answer of one snapshot: the whole document, and the document filtered to namespaces.

Each pod is encoded once and the answers are joins of those pieces (toolkit.pods_contract encodes them); the whole
document is read back as a reader reads it before it is published, so the exporter never serves what a reader refuses.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import msgspec

from toolkit.pods_contract import NodePods, encode_json, parse_node_pods


@dataclass(frozen=True, slots=True)
class SerializedPods:
    """The `/pods` JSON of one snapshot: the whole document, and the document filtered to each namespace."""

    full: bytes
    by_namespace: Mapping[str, bytes]
    no_pods: bytes  # the document for a namespace that has no pods on this node
    head: bytes  # the document up to its pods: `head + pods + b"]}"` is a document
    namespace_pods: Mapping[str, bytes]  # each namespace's pods, serialized and joined

    def for_namespace(self, namespace: str | None) -> bytes:
        if namespace is None:
            return self.full
        return self.by_namespace.get(namespace, self.no_pods)

    def for_namespaces(self, namespaces: Collection[str] | None) -> bytes:
        """The document filtered to `namespaces` (the whole document for None)."""
        if namespaces is None:
            return self.full
        if len(namespaces) == 1:
            return self.for_namespace(next(iter(namespaces)))
        parts = [self.namespace_pods[n] for n in sorted(set(namespaces)) if n in self.namespace_pods]
        return self.head + b",".join(parts) + b"]}"

    @classmethod
    def of(cls, document: NodePods) -> SerializedPods:
        """Serialize each pod once; the whole document and the per-namespace ones are joins of those pieces.
        PodsDocumentError when a reader would refuse the document (the filtered ones are parts of it)."""
        empty = encode_json(msgspec.structs.replace(document, pods=()))
        tail = b'"pods":[]}'
        if not empty.endswith(tail):  # `pods` must stay NodePods' last field for the joins below
            raise AssertionError("NodePods must end with its pods field")
        head = empty[: -len(tail)] + b'"pods":['
        serialized = [(pod.namespace, encode_json(pod)) for pod in document.pods]
        pieces: dict[str, list[bytes]] = {}
        for namespace, piece in serialized:
            pieces.setdefault(namespace, []).append(piece)
        joined = {ns: b",".join(parts) for ns, parts in sorted(pieces.items())}
        by_namespace = {ns: head + pods + b"]}" for ns, pods in joined.items()}
        everything = head + b",".join(piece for _, piece in serialized) + b"]}"
        parse_node_pods(everything)
        return cls(everything, MappingProxyType(by_namespace), empty, head, MappingProxyType(joined))
