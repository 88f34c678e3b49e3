"""Simulated node endpoints: small HTTP servers that answer `/pods` and `/metrics` as a gpu-pulse exporter would.

They stand in for the exporters (external processes, from the adapter's point of view) in adapter tests: `/pods`
serves a `toolkit.pods_contract.NodePods` document, the very structs the exporter serializes (or, asked with
`watch=1`, a stream of them, one line each interval, as the exporter streams; `streams=False` makes a node of an
exporter version without streams), and `/metrics` the
exporter's own exposition rendering (prometheus dialect) of a snapshot holding the same figures. A node can be stopped
(connection refused), frozen (its figures stop advancing, like an exporter whose poll loop hangs) or slowed.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate

from aiohttp import web

from exporter.catalogue import Dialect
from exporter.exposition.render import render_exposition
from exporter.snapshot import DeviceReading, GpuIdentity, MigIdentity, PodDeviceUse, PodRef, ShareMethod, Snapshot
from toolkit.pods_contract import (
    ANSWERED_AT_HEADER,
    STREAM_CONTENT_TYPE,
    ContainerView,
    DeviceFigures,
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
    ) -> None:
        self.pods[(namespace, name)] = _Pod(namespace, name, list(gpus), uid, window)

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
