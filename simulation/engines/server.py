"""The simulated engines of a node's pods, served over HTTP on the loopback, and coupled to the simulated GPUs.

Each pod whose scenario entry has an `engine` gets a `ServingEngine` (simulation.engines.model) driven by its arrival
curve in scenario time, and an HTTP server on the pod's `ip` (default 127.0.0.1) and the engine's `port` (default one
of the kernel's choice); the port is put in the pod's `gpu-pulse.dev/engine-port` annotation, as a real pod's manifest
would name its engine's port. A driver thread
advances every engine twice a second and sets its pod's GPU load to the engine's duty cycle, so the GPU series and the
engine series tell one story.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from simulation.engines.expositions import (
    SGLANG_ITL_BUCKETS,
    SGLANG_TTFT_BUCKETS,
    VLLM_ITL_BUCKETS,
    VLLM_TTFT_BUCKETS,
    dynamo_metrics,
    nim_metrics,
    sglang_metrics,
    tgi_metrics,
    triton_trtllm_metrics,
    vllm_metrics,
)
from simulation.engines.model import ServingEngine
from simulation.scenario import Pod

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
DRIVE_SECONDS = 0.5
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
METRICS_PATHS = {
    "nim": "/v1/metrics"
}  # NIM for LLMs serves its metrics there; the others on /metrics  # prometheus_client's CONTENT_TYPE_LATEST


@dataclass
class SimulatedEngine:
    pod: Pod
    engine: ServingEngine
    render: Callable[[], str]
    lock: threading.Lock
    path: str = "/metrics"
    server: ThreadingHTTPServer | None = None
    others: tuple[ServingEngine, ...] = ()  # a data-parallel vLLM's further engine cores (`engine="1"`...)

    def advance(self, t: float) -> None:
        """Every engine core up to scenario time `t` (the caller holds the lock)."""
        self.engine.advance(t)
        for core in self.others:
            core.advance(t)

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.server_address[1])

    def metrics(self, t: float) -> bytes:
        with self.lock:
            self.advance(t)
            return self.render().encode()


def simulated_engine(pod: Pod, curve: Callable[[float], float], created: float) -> SimulatedEngine:
    """The engine of `pod` (which has one), its arrivals `curve` in percent of its saturation rate."""
    spec = pod.engine
    assert spec is not None
    buckets = {
        "vllm": (VLLM_TTFT_BUCKETS, VLLM_ITL_BUCKETS),
        "nim": (VLLM_TTFT_BUCKETS, VLLM_ITL_BUCKETS),
        "dynamo": (VLLM_TTFT_BUCKETS, VLLM_ITL_BUCKETS),
        "sglang": (SGLANG_TTFT_BUCKETS, SGLANG_ITL_BUCKETS),
    }.get(spec.kind, ((), ()))
    engine = ServingEngine(curve, ttft_buckets=buckets[0], itl_buckets=buckets[1])
    # vLLM's data-parallel API server balances requests over its engine cores: each takes its share of the arrivals
    others = tuple(
        ServingEngine(curve, ttft_buckets=buckets[0], itl_buckets=buckets[1])
        for _ in range(spec.data_parallel - 1 if spec.kind == "vllm" else 0)
    )
    model, old = spec.model, spec.old_kv_name
    renders: dict[str, Callable[[], str]] = {
        "vllm": lambda: vllm_metrics((engine, *others), model, created, old_kv_name=old),
        "sglang": lambda: sglang_metrics(engine, model, created),
        "nim": lambda: nim_metrics(engine, model, created),
        "triton-trtllm": lambda: triton_trtllm_metrics(engine),
        "dynamo": lambda: dynamo_metrics(engine, model, created),
        "tgi": lambda: tgi_metrics(engine),
    }
    return SimulatedEngine(
        pod, engine, renders[spec.kind], threading.Lock(), path=METRICS_PATHS.get(spec.kind, "/metrics"), others=others
    )


def _handler(engine: SimulatedEngine, now: Callable[[], float]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn (vLLM, SGLang) and axum (TGI) serve

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != engine.path:
                self.send_error(404)
                return
            body = engine.metrics(now())
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


class EngineFleet:
    """The simulated engines of one node: started with the node, stopped with it."""

    def __init__(
        self,
        engines: list[SimulatedEngine],
        now: Callable[[], float],
        set_load: Callable[[str, float], None],
    ) -> None:
        self.engines = engines
        self._now = now
        self._set_load = set_load
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._refused: set[str] = set()

    def start(self) -> None:
        for engine in self.engines:
            spec = engine.pod.engine
            address = (engine.pod.ip or LOOPBACK, spec.port or 0) if spec is not None else (LOOPBACK, 0)
            engine.server = ThreadingHTTPServer(address, _handler(engine, self._now))
            engine.server.daemon_threads = True
            thread = threading.Thread(target=engine.server.serve_forever, name=f"engine-{engine.pod.name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        driver = threading.Thread(target=self._drive, name="engine-driver", daemon=True)
        driver.start()
        self._threads.append(driver)

    def ports(self) -> dict[str, int]:
        """namespace/name -> the port its engine serves on."""
        return {engine.pod.ref: engine.port for engine in self.engines if engine.server is not None}

    def drive_once(self) -> None:
        t = self._now()
        for engine in self.engines:
            with engine.lock:
                engine.advance(t)
                state = engine.engine.state
            ref = engine.pod.ref
            if ref in self._refused or (engine.pod.engine is not None and not engine.pod.engine.drives_gpu):
                continue
            try:
                self._set_load(ref, state.gpu_percent)
            except ValueError as error:  # a pod that holds no simulated GPU: its engine still serves
                self._refused.add(ref)
                log.info("the simulated engine of %s drives no GPU: %s", ref, error)

    def _drive(self) -> None:
        while not self._stop.wait(DRIVE_SECONDS):
            self.drive_once()

    def stop(self) -> None:
        self._stop.set()
        for engine in self.engines:
            if engine.server is not None:
                engine.server.shutdown()
                engine.server.server_close()
