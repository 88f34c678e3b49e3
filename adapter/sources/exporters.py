"""Where the exporter of a node answers: found from its pod in the pod cache, from a URL template, or from a map."""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Mapping
from typing import Protocol

from adapter.selectors import Selector
from adapter.sources.metricsource import PodDirectory
from toolkit.pods import Pod


class ExporterLocator(Protocol):
    def base_url(self, node: str) -> str | None:
        """The exporter's base URL on `node` (no trailing slash), or None when the node has no exporter."""
        ...

    def base_urls(self, nodes: Collection[str]) -> dict[str, str]:
        """`base_url` of each of `nodes` that has an exporter (a 1,000-pod answer asks about some 800 nodes)."""
        ...

    def known_nodes(self) -> Collection[str] | None:
        """The nodes known to have an exporter, to follow before any question comes (None: not known yet)."""
        ...


def _host(ip: str) -> str:
    try:
        return f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
    except ValueError:
        return ip


class PodExporters:
    """The exporter pods in the pod cache: a Running pod on the node whose labels match `selector`, at pod_ip:port."""

    def __init__(
        self,
        pods: PodDirectory,
        selector: Selector,
        port: int,
        scheme: str = "http",
        namespace: str | None = None,
    ) -> None:
        self._pods = pods
        self._selector = selector
        self._port = port
        self._scheme = scheme
        self._namespace = namespace
        # node -> the exporter pod found there and its URL; valid while the pod cache holds that very pod object (a
        # changed pod is a new object), so a query over 1,000 nodes does not look through each node's pods again
        self._found: dict[str, tuple[Pod, str]] = {}

    def base_url(self, node: str) -> str | None:
        return self.base_urls((node,)).get(node)

    def base_urls(self, nodes: Collection[str]) -> dict[str, str]:
        remembered = self._found
        known = [(node, found) for node in nodes if (found := remembered.get(node)) is not None]
        current = self._pods.get_many([(pod.namespace, pod.name) for _, (pod, _) in known])
        urls: dict[str, str] = {}
        for (node, (pod, url)), now in zip(known, current, strict=True):
            if now is pod:
                urls[node] = url
            else:
                del remembered[node]
        for node in nodes:
            if node not in urls and (found_url := self._look_up(node)) is not None:
                urls[node] = found_url
        return urls

    def known_nodes(self) -> Collection[str] | None:
        """The nodes of the running exporter pods, once the pod cache has synced."""
        if not self._pods.synced:
            return None
        pods = (
            self._pods.pods_in_namespace(self._namespace, self._selector)
            if self._namespace is not None
            else [pod for pod in self._pods.all_pods() if self._selector.matches(pod.labels)]
        )
        return {pod.node for pod in pods if pod.node and pod.phase == "Running" and pod.pod_ip}

    def _look_up(self, node: str) -> str | None:
        """The exporter pod on `node`, found among its pods, remembered with its URL."""
        for pod in self._pods.pods_on_node(node):
            if pod.phase != "Running" or not pod.pod_ip:
                continue
            if self._namespace is not None and pod.namespace != self._namespace:
                continue
            if self._selector.matches(pod.labels):
                url = f"{self._scheme}://{_host(pod.pod_ip)}:{self._port}"
                self._found[node] = (pod, url)
                return url
        return None


class TemplateExporters:
    """A URL template with `{node}`, e.g. `http://{node}:9400` where node names resolve (host-network exporters)."""

    def __init__(self, template: str) -> None:
        if "{node}" not in template:
            raise ValueError(f"exporter URL template {template!r} must contain {{node}}")
        self._template = template.rstrip("/")

    def base_url(self, node: str) -> str | None:
        return self._template.replace("{node}", node)

    def base_urls(self, nodes: Collection[str]) -> dict[str, str]:
        return {node: self._template.replace("{node}", node) for node in nodes}

    def known_nodes(self) -> Collection[str] | None:
        return ()  # any node name makes a URL: which nodes have GPUs is learnt from the questions


class StaticExporters:
    """A fixed node -> URL map (`--exporter-endpoints node-a=http://10.0.0.5:9400,...`)."""

    def __init__(self, endpoints: Mapping[str, str]) -> None:
        self._endpoints = {node: url.rstrip("/") for node, url in endpoints.items()}

    def base_url(self, node: str) -> str | None:
        return self._endpoints.get(node)

    def base_urls(self, nodes: Collection[str]) -> dict[str, str]:
        endpoints = self._endpoints
        return {node: endpoints[node] for node in nodes if node in endpoints}

    def known_nodes(self) -> Collection[str] | None:
        return tuple(self._endpoints)


def parse_endpoint_map(text: str) -> dict[str, str]:
    """`node-a=http://host:port,node-b=...` as a dict; raises ValueError naming the bad entry."""
    endpoints: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        node, sep, url = entry.partition("=")
        node, url = node.strip(), url.strip()
        if not sep or not node or not url.startswith(("http://", "https://")):
            raise ValueError(f"exporter endpoint {entry!r} must look like node-name=http://host:port")
        if node in endpoints:
            raise ValueError(f"exporter endpoint for node {node!r} is given twice")
        endpoints[node] = url
    return endpoints
