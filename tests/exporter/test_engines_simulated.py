"""Engines end to end on a simulated node: the exporter (`--simulate` with pods running simulated vLLM and TGI engines,
`--engines`) finds each engine from its pod object, reads it, and serves its figures in `/pods` and on `/metrics` in
both dialects; the engine drives the pod's GPU, pinned near 100% while the queue grows. An engine that drips is
refused while the GPU series keep flowing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from exporter.catalogue import Dialect
from tests.support.exporters import ExporterProcess, start_exporter
from tests.support.processes import ChildProcesses
from tests.support.waiting import patience, wait_for
from toolkit.pods_contract import InferenceFigures, NodePods

SCENARIO = {
    "name": "engines",
    "node": "llm-node-1",
    "gpus": [{"model": "H100-SXM5-80GB"}, {"model": "H100-SXM5-80GB"}, {"model": "H100-SXM5-80GB"}],
    "processes": [
        {"pid": 41001, "gpu": 0, "name": "python3", "memory_mib": 70000},
        {"pid": 41002, "gpu": 1, "name": "text-generation", "memory_mib": 60000},
        {"pid": 41003, "gpu": 2, "name": "python3", "memory_mib": 70000},
    ],
    "pods": [
        {
            "namespace": "demo",
            "name": "llm-inference-0",
            "labels": {"app": "llm-inference"},
            "containers": [{"name": "vllm", "gpus": [{"gpu": 0}], "pids": [41001]}],
            # arrivals above what it finishes at its largest batch: the queue grows
            "engine": {"kind": "vllm", "model": "llama-8b", "arrivals": {"baseline": 100}, "peak": 1.6},
        },
        {
            "namespace": "demo",
            "name": "embeddings-0",
            "labels": {"app": "embeddings"},
            "containers": [{"name": "tgi", "gpus": [{"gpu": 1}], "pids": [41002]}],
            "engine": {"kind": "tgi", "arrivals": {"baseline": 20}},
        },
        {
            "namespace": "demo",
            "name": "nim-0",
            "labels": {"app": "nim"},
            "containers": [{"name": "nim", "gpus": [{"gpu": 2}], "pids": [41003]}],
            "engine": {"kind": "nim", "model": "meta/llama-3.1-8b-instruct"},  # on /v1/metrics
        },
    ],
}


@pytest.fixture(scope="module")
def exporters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[Dialect, ExporterProcess]]:
    workdir = tmp_path_factory.mktemp("engines")
    scenario = workdir / "engines.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    processes = ChildProcesses(workdir)
    try:
        yield {
            dialect: start_exporter(processes, f"node-{dialect}", scenario, dialect=dialect, extra_args=("--engines",))
            for dialect in Dialect
        }
    finally:
        processes.stop_all()


def ready(document: NodePods, name: str) -> bool:
    pod = next((p for p in document.pods if p.name == name), None)
    return pod is not None and pod.inference is not None and pod.inference.state == "ready"


@pytest.mark.parametrize("dialect", list(Dialect))
def test_pods_and_metrics_carry_each_engines_figures(
    exporters: dict[Dialect, ExporterProcess], dialect: Dialect
) -> None:
    exporter = exporters[dialect]
    wait_for(
        lambda: all(ready(exporter.document(), name) for name in ("llm-inference-0", "embeddings-0", "nim-0")),
        "every engine ready in /pods",
        patience(60),
    )
    # the percentiles need two reads of the histograms
    wait_for(
        lambda: any(
            p.inference is not None
            and p.inference.time_to_first_token_seconds is not None
            and p.inference.time_to_first_token_seconds.p90 is not None
            for p in exporter.document().pods
        ),
        "a TTFT p90",
        patience(30),
    )
    # arrivals above what the full batch finishes: once the batch is full, the queue grows
    wait_for(lambda: (_inference(exporter, "llm-inference-0").queued_requests or 0) > 0, "a queue", patience(60))
    document = exporter.document()
    pods = {p.name: p for p in document.pods}
    vllm = pods["llm-inference-0"].inference
    assert vllm is not None and vllm.engine == "vllm" and vllm.model == "llama-8b"
    assert vllm.queued_requests is not None and vllm.queued_requests > 0
    assert vllm.kv_cache_utilization is not None and 0 < vllm.kv_cache_utilization <= 1
    tgi = pods["embeddings-0"].inference
    assert tgi is not None and tgi.engine == "tgi" and tgi.kv_cache_utilization is None
    # the engine drives its GPU: a full batch pins the duty cycle near 100 %
    wait_for(
        lambda: _utilization(exporter, "llm-inference-0") > 0.95, "the engine's batch pinning its GPU", patience(20)
    )
    families = {f.name: f for f in text_string_to_metric_families(exporter.metrics())}
    queued = families["gpu_pulse_pod_inference_queued_requests"]
    labels = {s.labels["pod"]: s.labels for s in queued.samples}
    assert labels["llm-inference-0"]["engine"] == "vllm" and labels["llm-inference-0"]["model"] == "llama-8b"
    state = families["gpu_pulse_pod_inference_engine_state"]
    assert {s.labels["pod"]: s.labels["state"] for s in state.samples} == {
        "llm-inference-0": "ready",
        "embeddings-0": "ready",
        "nim-0": "ready",
    }
    assert labels["nim-0"]["engine"] == "nim"
    assert families["gpu_pulse_engine_reads"].samples[0].value > 0  # counter family, `_total` sample


def _inference(exporter: ExporterProcess, name: str) -> InferenceFigures:
    """The pod's engine figures in /pods; ValueError (for wait_for: not yet) while it has none."""
    pod = next((p for p in exporter.document().pods if p.name == name), None)
    if pod is None or pod.inference is None:
        raise ValueError(f"no engine figures for {name} yet")
    return pod.inference


def _utilization(exporter: ExporterProcess, name: str) -> float:
    """The pod's GPU utilization ratio as /metrics has it now (not the /pods window's mean)."""
    for family in text_string_to_metric_families(exporter.metrics()):
        if family.name == "gpu_pulse_pod_gpu_utilization_ratio":
            return max((s.value for s in family.samples if s.labels["pod"] == name), default=0.0)
    return 0.0


class _Dripping(BaseHTTPRequestHandler):
    """An engine endpoint that answers one byte at a time, forever."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"v")
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:  # the exporter hung up
            return

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_gpu_series_keep_flowing_while_an_engine_drips(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Dripping)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scenario = {
        "name": "dripping",
        "node": "drip-node",
        "gpus": [{"model": "H100-SXM5-80GB", "load": {"baseline": 50}}],
        "processes": [{"pid": 42001, "gpu": 0, "name": "python3", "memory_mib": 1000}],
        "pods": [
            {
                "namespace": "demo",
                "name": "slow-0",
                "containers": [{"name": "vllm", "gpus": [{"gpu": 0}], "pids": [42001]}],
                "ip": "127.0.0.1",  # fronts this test's server
                "annotations": {"gpu-pulse.dev/engine-port": str(server.server_address[1])},
            }
        ],
    }
    path = tmp_path / "dripping.yaml"
    path.write_text(yaml.safe_dump(scenario))
    processes = ChildProcesses(tmp_path)
    try:
        exporter = start_exporter(processes, "drip-node", path, extra_args=("--engines",))
        wait_for(lambda: _inference(exporter, "slow-0").state == "refused", "the dripping engine refused", patience(30))
        assert "no complete answer within" in (_inference(exporter, "slow-0").reason or "")
        # the GPU poll goes on: every scrape gets a newer snapshot, with the pod's GPU figures
        first = _snapshot_time(exporter)
        wait_for(lambda: _snapshot_time(exporter) >= first + 2, "two more polls", patience(10))
        assert _utilization(exporter, "slow-0") > 0
    finally:
        processes.stop_all()
        server.shutdown()


def _snapshot_time(exporter: ExporterProcess) -> float:
    for family in text_string_to_metric_families(exporter.metrics()):
        if family.name == "gpu_pulse_snapshot_timestamp_seconds":
            return family.samples[0].value
    raise AssertionError("no gpu_pulse_snapshot_timestamp_seconds")
