"""Simulated node endpoints: small HTTP servers that answer `/pods` and `/metrics` as a gpu-pulse exporter would.

They stand in for the exporters (external processes, from the adapter's point of view) in adapter tests: `/pods`
serves a `toolkit.pods_contract.NodePods` document, the very structs the exporter serializes (or, asked with
`watch=1`, a stream of them, one line each interval, as the exporter streams; `streams=False` makes a node of an
exporter version without streams), and `/metrics` the
exporter's own exposition rendering (prometheus dialect) of a snapshot holding the same figures. A node can be stopped
(connection refused), frozen (its figures stop advancing, like an exporter whose poll loop hangs) or slowed.

A pod may also carry what its serving engine reports (`InferenceFigures`): `/pods` serves them, and `/metrics` the
`gpu_pulse_pod_inference_*` series of the exporter's contract for them (`inference_exposition`).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate

import msgspec
from aiohttp import web

from exporter.catalogue import Dialect
from exporter.exposition.render import render_exposition
from exporter.snapshot import DeviceReading, GpuIdentity, MigIdentity, PodDeviceUse, PodRef, ShareMethod, Snapshot
from toolkit.pods_contract import (
    ANSWERED_AT_HEADER,
    STREAM_CONTENT_TYPE,
    ContainerView,
    DeviceFigures,
    EngineState,
    InferenceFigures,
    LatencyQuantiles,
    NodePods,
    PodView,
    answered_at_header,
    encode_node_pods,
    stream_event,
)


@dataclass
class Gpu:
    """One device a pod's container uses, with the pod's figures on it."""

    utilization: float | None = 50.0
    memory_used: int | None = 10 * 2**30
    memory_total: int | None = 80 * 2**30
    power: float | None = 200.0
    index: int = 0
    share: str = "exclusive"
    mig_profile: str | None = None
    gpu_instance: int | None = None
    container: str = "main"

    def figures(self, node: str) -> DeviceFigures:
        gpu_uuid = f"GPU-{node}-{self.index:04d}"
        uuid = gpu_uuid if self.gpu_instance is None else f"MIG-{node}-{self.index}-{self.gpu_instance}"
        return DeviceFigures(
            uuid=uuid,
            gpu=self.index,
            gpu_uuid=gpu_uuid,
            model="NVIDIA H100 80GB HBM3",
            gpu_instance=self.gpu_instance,
            mig_profile=self.mig_profile,
            share=self.share,  # type: ignore[arg-type]
            utilization_percent=self.utilization,
            memory_used_bytes=self.memory_used,
            memory_total_bytes=self.memory_total,
            power_watts=self.power,
            sharing_pods=1,
            energy_joules=None,
        )


@dataclass
class _Pod:
    namespace: str
    name: str
    gpus: list[Gpu]
    uid: str | None = None
    window: float = 30.0
    inference: InferenceFigures | None = None  # its sample time is the node's at each document


@dataclass
class SimulatedNode:
    """A node's exporter `/pods` endpoint. `lag` is how old the figures are when served (sample time = now - lag)."""

    name: str
    host: str = "127.0.0.1"
    port: int = 0
    # a listening socket to serve on (tests/support/loopback.py), kept open across stop() and start(): the node keeps
    # its address while stopped, and connections to it wait instead of being refused
    listener: socket.socket | None = None
    interval: float = 1.0
    lag: float = 0.5
    clock: Callable[[], float] = time.time
    delay: float = 0.0  # seconds to wait before answering
    broken: str | None = None  # a body to answer instead of the document (a misbehaving exporter)
    exposition_time: float | None = None  # give /metrics samples this explicit timestamp (Unix seconds)
    pods: dict[tuple[str, str], _Pod] = field(default_factory=dict)
    streams: bool = True  # answer watch=1 with a stream (an exporter with streams)
    streams_taken: bool = False  # every stream slot held by others: watch=1 is 429, as exporter/server.py answers
    stream_seconds: float = 300.0  # how long a stream lasts before this node ends it
    pace: float | None = None  # real seconds between two streamed documents (default: the interval, or `every`)
    requests: int = 0
    documents: int = 0  # documents sent, plain or streamed
    open_streams: int = 0
    scrapes: int = 0
    namespaces_asked: list[tuple[str, ...] | None] = field(default_factory=list)
    _frozen_at: float | None = None
    _runner: web.AppRunner | None = None

    def set_pod(
        self,
        namespace: str,
        name: str,
        gpus: Sequence[Gpu] = (Gpu(),),
        *,
        uid: str | None = None,
        window: float = 30.0,
        inference: InferenceFigures | None = None,
    ) -> None:
        self.pods[(namespace, name)] = _Pod(namespace, name, list(gpus), uid, window, inference)

    def set_inference(self, namespace: str, name: str, inference: InferenceFigures | None) -> None:
        """What the pod's serving engine reports from now on (None: no engine read)."""
        self.pods[(namespace, name)].inference = inference

    def remove_pod(self, namespace: str, name: str) -> None:
        self.pods.pop((namespace, name), None)

    def freeze(self) -> None:
        """From now on the figures keep their current sample time (the exporter's poll loop hangs)."""
        self._frozen_at = self.clock() - self.lag

    def document(self, namespaces: Collection[str] | str | None) -> NodePods:
        if isinstance(namespaces, str):
            namespaces = (namespaces,)
        now = self.clock()
        sampled = self._frozen_at if self._frozen_at is not None else now - self.lag
        views = []
        for pod in sorted(self.pods.values(), key=lambda p: (p.namespace, p.name)):
            if namespaces is not None and pod.namespace not in namespaces:
                continue
            containers: dict[str, list[DeviceFigures]] = {}
            for gpu in pod.gpus:
                containers.setdefault(gpu.container, []).append(gpu.figures(self.name))
            views.append(
                PodView(
                    namespace=pod.namespace,
                    name=pod.name,
                    uid=pod.uid,
                    containers=tuple(ContainerView(name=c, devices=tuple(d)) for c, d in containers.items()),
                    sampled_at=datetime.fromtimestamp(sampled, UTC),
                    window_seconds=pod.window,
                    inference=None
                    if pod.inference is None
                    else msgspec.structs.replace(pod.inference, sampled_at=datetime.fromtimestamp(sampled, UTC)),
                )
            )
        return NodePods(
            node=self.name,
            generated_at=datetime.fromtimestamp(sampled, UTC),
            interval_seconds=self.interval,
            kubelet_up=True,
            pods=tuple(views),
        )

    def snapshot(self) -> Snapshot:
        """The exporter-side snapshot behind the same figures (device readings and per-pod device uses)."""
        devices: dict[str, DeviceReading] = {}
        uses: list[PodDeviceUse] = []
        for pod in sorted(self.pods.values(), key=lambda p: (p.namespace, p.name)):
            for gpu in pod.gpus:
                figures = gpu.figures(self.name)
                parent = GpuIdentity(
                    gpu.index, figures.gpu_uuid, figures.model, f"00000000:{gpu.index:02X}:00.0", gpu.index
                )
                identity: GpuIdentity | MigIdentity = parent
                if gpu.gpu_instance is not None:
                    identity = MigIdentity(
                        parent, gpu.gpu_instance, figures.uuid, gpu.gpu_instance, 0, gpu.mig_profile or ""
                    )
                values = {"fb_total": float(gpu.memory_total)} if gpu.memory_total is not None else {}
                devices.setdefault(figures.uuid, DeviceReading(identity, up=True, values=values))
                uses.append(
                    PodDeviceUse(
                        pod=PodRef(pod.namespace, pod.name, gpu.container, pod.uid),
                        device_uuid=figures.uuid,
                        share=ShareMethod(gpu.share),
                        utilization_percent=gpu.utilization,
                        memory_used_bytes=gpu.memory_used,
                        power_milliwatts=None if gpu.power is None else gpu.power * 1000,
                    )
                )
        return Snapshot(taken_at=self.clock(), node=self.name, devices=tuple(devices.values()), pods=tuple(uses))

    async def _metrics(self, request: web.Request) -> web.Response:
        self.scrapes += 1
        body = render_exposition(self.snapshot(), Dialect.PROMETHEUS, interval_seconds=self.interval)
        body += inference_exposition(self.name, self.pods.values(), self.clock())
        if self.exposition_time is not None:  # the text format allows a timestamp (ms) after each sample's value
            stamp = f" {int(self.exposition_time * 1000)}"
            lines = body.decode().splitlines()
            body = "".join(f"{line}{'' if line.startswith('#') else stamp}\n" for line in lines).encode()
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        namespaces = tuple(request.query.getall("namespace", [])) or None
        self.namespaces_asked.append(namespaces)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.streams and request.query.get("watch") in ("1", "true"):
            if self.streams_taken:
                refused = "at most 16 /pods streams at once\n"
                return web.Response(status=429, text=refused, headers={"Retry-After": "10"})
            return await self._stream(request, namespaces)
        if self.broken is not None:
            return web.Response(text=self.broken, content_type="application/json")
        self.documents += 1
        body = encode_node_pods(self.document(namespaces))
        # the answer is dated on this node's clock, like a real exporter's
        now = self.clock()
        headers = {"Date": formatdate(now, usegmt=True), ANSWERED_AT_HEADER: answered_at_header(now)}
        return web.Response(body=body, content_type="application/json", headers=headers)

    async def _stream(self, request: web.Request, namespaces: tuple[str, ...] | None) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": STREAM_CONTENT_TYPE})
        await response.prepare(request)
        every = self.pace if self.pace is not None else max(self.interval, float(request.query.get("every", "0")))
        ends = time.monotonic() + self.stream_seconds
        self.open_streams += 1
        try:
            while time.monotonic() < ends:
                if self.broken is not None:
                    line = self.broken.encode() + b"\n"
                else:
                    body = encode_node_pods(self.document(namespaces))
                    line = stream_event(self.clock(), body)  # dated on this node's clock
                self.documents += 1
                await response.write(line)
                await asyncio.sleep(every)
            await response.write_eof()
        except ConnectionResetError:
            pass
        finally:
            self.open_streams -= 1
        return response

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/pods", self._pods)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site: web.BaseSite
        if self.listener is not None:  # the site closes its own copy when it stops
            site = web.SockSite(self._runner, self.listener.dup())
        else:
            site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.host, self.port = self._runner.addresses[0][:2]
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


_PLACEHOLDER_TIME = datetime(2026, 1, 1, tzinfo=UTC)


def engine(
    queued: float | None = 3.0,
    *,
    state: EngineState = "ready",
    running: float | None = 8.0,
    kv: float | None = 0.42,
    ttft: tuple[float, float, float] | None = (0.05, 0.25, 1.5),
    itl: tuple[float, float, float] | None = (0.01, 0.02, 0.08),
    rps: float | None = 4.5,
    tokens: float | None = 1250.0,
    model: str = "meta-llama/Llama-3.1-8B-Instruct",
) -> InferenceFigures:
    """What a vLLM engine reports, normalised. Figures stay as given whatever the state: the adapter must leave out a
    pod whose engine is not ready even where an exporter sent figures beside that state."""

    def quantiles(values: tuple[float, float, float] | None) -> LatencyQuantiles | None:
        return None if values is None else LatencyQuantiles(p50=values[0], p90=values[1], p99=values[2])

    return InferenceFigures(
        state=state,
        reason=None if state == "ready" else "pod not Ready",
        engine="vllm",
        model=model,
        sampled_at=_PLACEHOLDER_TIME,  # each document's sample time replaces it
        window_seconds=60.0,
        queued_requests=queued,
        running_requests=running,
        kv_cache_utilization=kv,
        time_to_first_token_seconds=quantiles(ttft),
        inter_token_latency_seconds=quantiles(itl),
        requests_per_second=rps,
        generated_tokens_per_second=tokens,
    )


# ---- the exporter's inference series, as the contract between exporter and adapter names them (issue 37) -----------
_INFERENCE_GAUGES = (
    ("gpu_pulse_pod_inference_queued_requests", "queued_requests"),
    ("gpu_pulse_pod_inference_running_requests", "running_requests"),
    ("gpu_pulse_pod_inference_kv_cache_utilization_ratio", "kv_cache_utilization"),
)
_INFERENCE_QUANTILES = (
    ("gpu_pulse_pod_inference_time_to_first_token_seconds", "time_to_first_token_seconds"),
    ("gpu_pulse_pod_inference_inter_token_latency_seconds", "inter_token_latency_seconds"),
)
_INFERENCE_COUNTERS = (
    ("gpu_pulse_pod_inference_requests_total", "requests_per_second"),
    ("gpu_pulse_pod_inference_generated_tokens_total", "generated_tokens_per_second"),
)
COUNTERS_FROM = 1_000_000.0  # what the counters held when the node started: a rate is never one of a new series


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def inference_exposition(node: str, pods: Collection[_Pod], now: float, started: float = 0.0) -> bytes:
    """The `gpu_pulse_pod_inference_*` series of `pods` in the text format: one copy per (pod, container, device) edge
    with the per-pod series' labels plus `engine` and `model` (the contract lets the exporter repeat a pod's figure on
    each of its devices; the adapter's queries keep one per pod). Figures only for a ready engine; the state series
    for every pod with engine figures. Counters grow at the pod's rates since `started` (Unix seconds)."""
    lines: list[str] = []
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        figures = pod.inference
        if figures is None:
            continue
        for gpu in pod.gpus:
            edge = {
                "node": node,
                "namespace": pod.namespace,
                "pod": pod.name,
                "container": gpu.container,
                "gpu": str(gpu.index),
                "uuid": f"GPU-{node}-{gpu.index:04d}",
                "share": gpu.share,
                "engine": figures.engine or "",
                "model": figures.model or "",
            }
            state = edge | {"state": figures.state}
            lines.append(f"gpu_pulse_pod_inference_engine_state{{{_labels(state)}}} 1")
            if figures.state != "ready":
                continue
            for name, attribute in _INFERENCE_GAUGES:
                value = getattr(figures, attribute)
                if value is not None:
                    lines.append(f"{name}{{{_labels(edge)}}} {value!r}")
            for name, attribute in _INFERENCE_QUANTILES:
                quantiles = getattr(figures, attribute)
                for quantile, value in (
                    ("0.5", quantiles and quantiles.p50),
                    ("0.9", quantiles and quantiles.p90),
                    ("0.99", quantiles and quantiles.p99),
                ):
                    if value is not None:
                        lines.append(f"{name}{{{_labels(edge | {'quantile': quantile})}}} {value!r}")
            for name, attribute in _INFERENCE_COUNTERS:
                rate = getattr(figures, attribute)
                if rate is not None:
                    lines.append(f"{name}{{{_labels(edge)}}} {COUNTERS_FROM + rate * (now - started)!r}")
    return "".join(line + "\n" for line in lines).encode()
