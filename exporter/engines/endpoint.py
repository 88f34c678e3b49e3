"""Where a pod's serving engine serves its metrics, from the pod object alone, and never anywhere but the pod's IP.

In order of precedence:
1. `gpu-pulse.dev/engine-port` (with optional `gpu-pulse.dev/engine-path`, default `/metrics`, and
   `gpu-pulse.dev/engine-scheme`, `http` or `https`): for a pod whose Prometheus annotations point at a sidecar;
2. `prometheus.io/port`, `prometheus.io/path` and `prometheus.io/scheme`, when `prometheus.io/scrape` is "true" (the
   convention of Prometheus' kubernetes_sd example configuration, prometheus/prometheus
   documentation/examples/prometheus-kubernetes.yml);
3. a container port an engine serves on by default: vLLM's and NIM's 8000 (`vllm serve --port`; NIM's
   NIM_SERVER_PORT, metrics on `/v1/metrics`), SGLang's 30000 (`--port`), Triton's metrics port 8002
   (`--metrics-port`), TGI's 80 in its container image (`--port`, `PORT`).

Annotations are a tenant's input: the host is always `status.podIP`; a port, path or scheme that is not one refuses
the pod with a reason (a path with a scheme or host, `//`, `@`, a query), rather than dialling what it names.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass

from toolkit.pods import Pod

ANNOTATION_PORT = "gpu-pulse.dev/engine-port"
ANNOTATION_PATH = "gpu-pulse.dev/engine-path"
ANNOTATION_SCHEME = "gpu-pulse.dev/engine-scheme"
PROMETHEUS_SCRAPE = "prometheus.io/scrape"
PROMETHEUS_PORT = "prometheus.io/port"
PROMETHEUS_PATH = "prometheus.io/path"
PROMETHEUS_SCHEME = "prometheus.io/scheme"
DEFAULT_PATH = "/metrics"
# container port -> the paths its engine serves metrics on, tried in order until one answers
WELL_KNOWN_PORTS: Mapping[int, tuple[str, ...]] = {
    8000: ("/metrics", "/v1/metrics"),  # vLLM, Dynamo's frontend (DYN_HTTP_PORT); NIM for LLMs on /v1/metrics
    30000: ("/metrics",),  # SGLang
    8002: ("/metrics",),  # Triton Inference Server's metrics port
    80: ("/metrics",),  # TGI's container image
}
_PATH = re.compile(r"/[A-Za-z0-9._~!$&'()*+,;=:%/-]*")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where to read: `scheme://ip:port` + one of `paths` (several only for a well-known port)."""

    scheme: str
    ip: str
    port: int
    paths: tuple[str, ...]
    source: str  # which annotations or port gave it, for reasons and logs

    def url(self, path: str) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"{self.scheme}://{host}:{self.port}{path}"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a pod's annotations are not followed."""

    reason: str


def _port(value: str, key: str) -> int | Refusal:
    text = value.strip()
    if not text.isdigit() or not 0 < int(text) < 65536:
        return Refusal(f"{key} {value[:40]!r} is not a port number")
    return int(text)


def _path(value: str | None, key: str) -> str | Refusal:
    if value is None or not value.strip():
        return DEFAULT_PATH
    text = value.strip()
    if not _PATH.fullmatch(text) or text.startswith("//") or "@" in text:
        return Refusal(f"{key} {value[:60]!r} is not a path on the pod (only the pod's own IP is dialled)")
    return text


def _scheme(value: str | None, key: str) -> str | Refusal:
    text = (value or "http").strip().lower()
    if text not in ("http", "https"):
        return Refusal(f"{key} {value!r} is not http or https")
    return text


def _from(annotations: Mapping[str, str], ip: str, port_key: str, path_key: str, scheme_key: str) -> Endpoint | Refusal:
    port = _port(annotations[port_key], port_key)
    if isinstance(port, Refusal):
        return port
    path = _path(annotations.get(path_key), path_key)
    if isinstance(path, Refusal):
        return path
    scheme = _scheme(annotations.get(scheme_key), scheme_key)
    if isinstance(scheme, Refusal):
        return scheme
    return Endpoint(scheme, ip, port, (path,), port_key)


def locate(pod: Pod) -> Endpoint | Refusal | None:
    """The pod's engine endpoint; a Refusal when its annotations name something other than a port and path on the
    pod's IP; None when nothing says it serves one (no annotation, no well-known port) or it has no IP yet."""
    annotations = pod.annotations
    ip = pod.pod_ip
    if ip is not None:
        try:
            ip = str(ipaddress.ip_address(ip))
        except ValueError:
            return Refusal(f"status.podIP {ip[:40]!r} is not an IP address")
    if ANNOTATION_PORT in annotations:
        if ip is None:
            return None
        return _from(annotations, ip, ANNOTATION_PORT, ANNOTATION_PATH, ANNOTATION_SCHEME)
    if annotations.get(PROMETHEUS_SCRAPE, "").strip().lower() == "true" and PROMETHEUS_PORT in annotations:
        if ip is None:
            return None
        return _from(annotations, ip, PROMETHEUS_PORT, PROMETHEUS_PATH, PROMETHEUS_SCHEME)
    for port in pod.ports:
        paths = WELL_KNOWN_PORTS.get(port)
        if paths is not None:
            return None if ip is None else Endpoint("http", ip, port, paths, f"container port {port}")
    return None


def serves_engine(pod: Pod) -> bool:
    """Whether the pod object says it serves an engine's metrics at all (for pods without an IP yet)."""
    annotations = pod.annotations
    return (
        ANNOTATION_PORT in annotations
        or (annotations.get(PROMETHEUS_SCRAPE, "").strip().lower() == "true" and PROMETHEUS_PORT in annotations)
        or any(port in WELL_KNOWN_PORTS for port in pod.ports)
    )
