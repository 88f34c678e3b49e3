"""Where a pod's engine is read: its own IP, on the port its annotations or containers name, and nowhere else."""

from __future__ import annotations

import pytest

from exporter.engines.endpoint import Endpoint, Refusal, locate
from toolkit.pods import Pod, PodParser


def pod(annotations: dict[str, str] | None = None, ports: tuple[int, ...] = (), ip: str | None = "10.0.0.7") -> Pod:
    return Pod("ml", "llm-0", uid="u", pod_ip=ip, annotations=annotations or {}, ports=ports, ready=True)


def test_gpu_pulse_annotations_win_over_prometheus_ones() -> None:
    found = locate(
        pod(
            {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",  # a sidecar's
                "gpu-pulse.dev/engine-port": "8000",
            }
        )
    )
    assert found == Endpoint("http", "10.0.0.7", 8000, ("/metrics",), "gpu-pulse.dev/engine-port")


def test_prometheus_annotations_only_when_scrape_is_true() -> None:
    annotations = {"prometheus.io/port": "8080", "prometheus.io/path": "/stats/prometheus"}
    assert locate(pod({**annotations, "prometheus.io/scrape": "false"})) is None
    found = locate(pod({**annotations, "prometheus.io/scrape": "true"}))
    assert isinstance(found, Endpoint)
    assert found.url(found.paths[0]) == "http://10.0.0.7:8080/stats/prometheus"


def test_a_well_known_container_port_is_tried_with_its_engines_paths() -> None:
    found = locate(pod(ports=(8000,)))
    assert isinstance(found, Endpoint)
    assert found.paths == ("/metrics", "/v1/metrics")  # vLLM, then NIM's
    assert locate(pod(ports=(5432,))) is None


@pytest.mark.parametrize(
    "annotations",
    [
        {"gpu-pulse.dev/engine-port": "8000", "gpu-pulse.dev/engine-path": "http://metadata.internal/latest"},
        {"gpu-pulse.dev/engine-port": "8000", "gpu-pulse.dev/engine-path": "//evil.example/metrics"},
        {"gpu-pulse.dev/engine-port": "8000", "gpu-pulse.dev/engine-path": "/metrics@evil.example"},
        {"gpu-pulse.dev/engine-port": "evil.example:80"},
        {"prometheus.io/scrape": "true", "prometheus.io/port": "99999"},
        {"gpu-pulse.dev/engine-port": "8000", "gpu-pulse.dev/engine-scheme": "file"},
    ],
)
def test_annotations_naming_another_host_are_refused(annotations: dict[str, str]) -> None:
    assert isinstance(locate(pod(annotations)), Refusal)


def test_ipv6_pod_ips_are_bracketed() -> None:
    found = locate(pod({"gpu-pulse.dev/engine-port": "8000"}, ip="fd00::7"))
    assert isinstance(found, Endpoint)
    assert found.url("/metrics") == "http://[fd00::7]:8000/metrics"


def test_the_pod_parser_keeps_what_locates_an_engine_only_when_asked() -> None:
    obj = {
        "metadata": {
            "namespace": "ml",
            "name": "llm-0",
            "uid": "U",
            "annotations": {"prometheus.io/port": "8000", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
        },
        "spec": {
            "containers": [
                {"name": "vllm", "ports": [{"containerPort": 8000}, {"containerPort": 53, "protocol": "UDP"}]}
            ]
        },
        "status": {"podIP": "10.0.0.7", "conditions": [{"type": "Ready", "status": "False"}]},
    }
    kept = PodParser(serving=True)(obj)
    assert dict(kept.annotations) == {"prometheus.io/port": "8000"}
    assert kept.ports == (8000,)
    assert kept.ready is False
    plain = PodParser()(obj)
    assert plain.ready is None and not plain.annotations and plain.ports == ()
