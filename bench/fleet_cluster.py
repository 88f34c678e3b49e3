"""A simulated GPU fleet for the fleet benchmark (bench/fleet.py), in one process the adapter cannot tell from a fleet:

    PYTHONPATH=. python bench/fleet_cluster.py --ready FILE [--nodes 2000] [--gpu-pods 20000] [--other-pods 30000]

- The Kubernetes API stand-in (simulation.kubeapi) holding the fleet's pods: `--gpu-pods` GPU pods of 500 Deployments
  over 100 namespaces (a few of 1,000 pods, many of 2 to 20; see `deployment_sizes`), spread over `--nodes` nodes of 8
  GPUs as a scheduler spreading replicas would place them; `--other-pods` pods without GPUs on CPU nodes; one exporter
  pod per GPU node (namespace gpu-pulse, label app.kubernetes.io/name=gpu-pulse-exporter) whose pod IP is that node's
  own loopback address 127.1.x.y. Pods are deleted and replaced at `--churn` pods a second (half with GPUs), so the
  adapters' watches see a steady stream of changes.
- Each GPU node's exporter: a listener on its own address, port `--port` (9400), answering `/pods` as the exporter does
  (exporter.server): a plain document, or with `watch=1` a stream of one line per snapshot (at most one per `every`
  seconds), filtered to the namespaces asked. Each node takes a snapshot every `--interval` seconds at its own phase
  (nodes are not in step), with new figures each time: documents of real size (toolkit.pods_contract's structs,
  serialized once per snapshot and shared by every reader) that change every interval.
- A control endpoint on 127.0.0.1 (`/stats`): requests and documents served per node so far and the exporters'
  restarts, for the benchmark; `POST /restart?node=I&seconds=S` restarts node I's exporter (its streams and
  connections close, connections are refused for S seconds, then it serves again).
- The ground truth, for the benchmark to check answers against: each pod's utilization is a pure function of its name
  and the sample second (`utilization_tenths`), so the benchmark recomputes what any exporter published without asking;
  the API stand-in's process keeps a journal of which pod belonged to which Deployment when (`/journal?since=N` on its
  own control endpoint, which also creates a new namespace with a new Deployment on `POST /namespaces?pods=K`).

The exporters run in a second process (changes of the pods reach it through a pipe), so that the API stand-in, which
also answers the adapters' SubjectAccessReviews, does not answer behind 2,000 exporters' work.

When everything serves, `--ready` receives {"kube": URL, "control": URL, "port": N, ...}; it runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import random
import resource
import signal
import time
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Literal

from aiohttp import web

from simulation.kubeapi import KubeApiServer
from toolkit.pods_contract import (
    STREAM_CONTENT_TYPE,
    STREAM_SECONDS,
    ContainerView,
    DeviceFigures,
    PodView,
    encode_json,
    encode_node_pods,
    parse_node_pods,
    stream_event,
)

GPUS_PER_NODE = 8
NAMESPACES = 100
DEPLOYMENTS = 500
EXPORTER_NAMESPACE = "gpu-pulse"
EXPORTER_LABELS = {"app.kubernetes.io/name": "gpu-pulse-exporter"}
OTHER_NODES = 500
OTHER_DEPLOYMENT_SIZE = 30
MODEL = "NVIDIA H100 80GB HBM3"
FRAMEBUFFER = 80 * 2**30
SAMPLE_LAG = 0.05  # a snapshot's sample time is this long before it is taken
NEW_NAMESPACE_PREFIX = "new-team-"


def utilization_tenths(namespace: str, name: str, second: int) -> int:
    """What pod `namespace/name` uses of its GPU in sample second `second` (Unix time, rounded down), in tenths of a
    percent (0-1000): a hash, so that whoever checks an answer can recompute every figure any exporter published."""
    return zlib.crc32(f"{namespace}/{name}@{second}".encode()) % 1001


def sample_second(sampled_at: float) -> int:
    """The whole second a sample time falls in, as the document writes it (to the microsecond) and reads back."""
    return math.floor(round(sampled_at, 6))


def namespace_name(index: int) -> str:
    return f"team-{index:02d}"


def node_name(index: int) -> str:
    return f"gpu-{index:04d}"


def node_address(index: int) -> str:
    """The node's own loopback address (all of 127.0.0.0/8 is loopback): 127.1.0.1, 127.1.0.2, ..."""
    host = index + 1
    return f"127.{1 + host // 65536}.{(host // 256) % 256}.{host % 256}"


def deployment_sizes(total: int) -> list[int]:
    """500 Deployment sizes adding up to `total` GPU pods (20,000: 5 of 1,000, 15 of 300, 400 of 2 to 20, each size as
    often, 10 among them, and 80 middle-sized ones taking the rest); a smaller fleet (for a quick run) scales them."""
    full = 20_000
    large = [1000] * 5 + [300] * 15
    small = [2 + k % 19 for k in range(DEPLOYMENTS - len(large) - 80)]
    rest = full - sum(large) - sum(small)
    middle = [rest // 80 + (1 if k < rest % 80 else 0) for k in range(80)]
    sizes = large + middle + small
    if total >= full:
        return sizes
    return [max(1, size * total // full) for size in sizes]


@dataclass(slots=True)
class GpuPod:
    namespace: str
    name: str
    uid: str
    deployment: str
    node: int
    gpu: int


@dataclass(eq=False)
class Stream:
    """One reader's `/pods?watch=1` on one node."""

    namespaces: frozenset[str] | None
    every: float
    response: web.StreamResponse
    transport: asyncio.Transport | None
    ends: float
    sent_at: float = -math.inf
    done: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Node:
    index: int
    name: str
    address: str
    phase: float  # seconds into each interval at which this node takes its snapshot
    pods: dict[tuple[str, str], GpuPod] = field(default_factory=dict)
    head: bytes = b""
    pieces: dict[str, list[bytes]] = field(default_factory=dict)  # namespace -> its pods, serialized
    joined: dict[frozenset[str] | None, bytes] = field(default_factory=dict)  # documents of this snapshot
    generated: float = 0.0
    streams: list[Stream] = field(default_factory=list)
    requests: int = 0
    documents: int = 0

    def document(self, namespaces: frozenset[str] | None) -> bytes:
        """The current snapshot's document for `namespaces`, joined once per snapshot for all readers alike."""
        joined = self.joined.get(namespaces)
        if joined is None:
            if namespaces is None:
                parts = [piece for pieces in self.pieces.values() for piece in pieces]
            else:
                parts = [piece for ns in sorted(namespaces) for piece in self.pieces.get(ns, ())]
            joined = self.joined[namespaces] = self.head + b",".join(parts) + b"]}"
        return joined


# ---- documents: the exporter's serialization, made once into templates ---------------------------------------------
_SENTINEL_TIME = datetime(2001, 2, 3, 4, 5, 6, 789012, tzinfo=UTC)
_SENTINEL_TEXT = b'"2001-02-03T04:05:06.789012Z"'


def _time(seconds: float) -> bytes:
    return b'"' + datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode() + b'"'


def pod_template(pod: GpuPod, node: str) -> bytes:
    """The pod's serialized PodView with `%(util)s`, `%(used)d`, `%(watts)s` and `%(at)s` in place of its figures."""
    share: Literal["process", "exclusive"] = "process" if pod.gpu < 2 else "exclusive"  # GPUs 0, 1 time-sliced
    device = DeviceFigures(
        uuid=f"GPU-{node}-{pod.gpu}",
        gpu=pod.gpu,
        gpu_uuid=f"GPU-{node}-{pod.gpu}",
        model=MODEL,
        share=share,
        sharing_pods=2 if share == "process" else 1,
        utilization_percent=12.25,
        memory_used_bytes=123456789,
        memory_total_bytes=FRAMEBUFFER,
        power_watts=234.5,
        energy_joules=None,
    )
    view = PodView(
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        containers=(ContainerView(name="main", devices=(device,)),),
        sampled_at=_SENTINEL_TIME,
        window_seconds=1.0,
    )
    text = encode_json(view).replace(b"%", b"%%")
    for sentinel, slot in (
        (b"12.25", b"%(util)s"),
        (b"123456789", b"%(used)d"),
        (b"234.5", b"%(watts)s"),
        (_SENTINEL_TEXT, b"%(at)s"),
    ):
        assert text.count(sentinel) == 1, sentinel
        text = text.replace(sentinel, slot)
    return text


class Fleet:
    """The fleet's pods as the API knows them; what changes is also queued for the exporters (`changes`)."""

    def __init__(self, nodes: int, gpu_pods: int, other_pods: int, interval: float, seed: int) -> None:
        self.rng = random.Random(seed)
        self.interval = interval
        self.nodes = [Node(i, node_name(i), node_address(i), phase=self.rng.uniform(0, interval)) for i in range(nodes)]
        self.gpu_pods = gpu_pods
        self.other_pods = other_pods
        self.deployments: list[dict[str, object]] = []
        self.others: list[tuple[str, str, str, int]] = []  # pods without GPUs: (namespace, name, deployment, node)
        self.changes: list[tuple[str, GpuPod]] = []  # ("add" | "delete", pod), for the exporters
        # the ground truth of membership: [wall time, "add" | "delete", namespace, name, deployment, node], in order
        self.journal: list[tuple[float, str, str, str, str, int]] = []
        self._serial = 0
        self._namespaces_made = 0

    def populate(self, kube: KubeApiServer) -> None:
        slots = [(n, s % GPUS_PER_NODE) for n in range(len(self.nodes)) for s in range(10)]
        self.rng.shuffle(slots)
        for k, size in enumerate(deployment_sizes(self.gpu_pods)):
            namespace, name = namespace_name(k % NAMESPACES), f"infer-{k:03d}"
            self._deployment(kube, namespace, name)
            self.deployments.append({"namespace": namespace, "name": name, "pods": size})
            for _ in range(size):
                if not slots:
                    raise SystemExit(f"--gpu-pods {self.gpu_pods} do not fit on {len(self.nodes)} nodes (10 a node)")
                node, gpu = slots.pop()
                self._add_gpu_pod(kube, namespace, name, node, gpu)
        made: set[tuple[str, str]] = set()
        for j in range(self.other_pods):
            namespace = namespace_name(j % NAMESPACES)
            deployment = f"web-{j // (NAMESPACES * OTHER_DEPLOYMENT_SIZE):03d}"
            if (namespace, deployment) not in made:
                self._deployment(kube, namespace, deployment)
                made.add((namespace, deployment))
            host = j % OTHER_NODES
            self.others.append((namespace, self._add_other_pod(kube, namespace, deployment, host), deployment, host))
        for gpu_node in self.nodes:
            kube.put_pod(
                EXPORTER_NAMESPACE,
                f"gpu-pulse-exporter-{gpu_node.index:04d}",
                node=gpu_node.name,
                labels=EXPORTER_LABELS,
                pod_ip=gpu_node.address,
                host_ip=gpu_node.address,
            )
        self.changes.clear()

    def _deployment(self, kube: KubeApiServer, namespace: str, name: str) -> None:
        kube.put_replica_set(namespace, f"{name}-7c9f8", deployment=name, labels={"app": name})

    def _pod_name(self, deployment: str) -> str:
        self._serial += 1
        return f"{deployment}-7c9f8-{self._serial:06x}"

    def _add_gpu_pod(self, kube: KubeApiServer, namespace: str, deployment: str, node: int, gpu: int) -> None:
        name = self._pod_name(deployment)
        pod = GpuPod(namespace, name, str(uuid.UUID(int=self.rng.getrandbits(128))), deployment, node, gpu)
        kube.put_pod(
            namespace,
            name,
            node=self.nodes[node].name,
            labels={"app": deployment, "pod-template-hash": "7c9f8"},
            pod_ip=f"10.{1 + node // 256}.{node % 256}.{self._serial % 250 + 2}",
            owner=("ReplicaSet", f"{deployment}-7c9f8"),
            gpus_per_container=1,
            uid=pod.uid,
        )
        self.nodes[node].pods[(namespace, name)] = pod
        self.changes.append(("add", pod))
        self.journal.append((time.time(), "add", namespace, name, deployment, node))

    def _add_other_pod(self, kube: KubeApiServer, namespace: str, deployment: str, node: int) -> str:
        name = self._pod_name(deployment)
        kube.put_pod(
            namespace,
            name,
            node=f"cpu-{node:03d}",
            labels={"app": deployment, "pod-template-hash": "7c9f8"},
            pod_ip=f"10.200.{node % 256}.{self._serial % 250 + 2}",
            owner=("ReplicaSet", f"{deployment}-7c9f8"),
        )
        return name

    def churn(self, kube: KubeApiServer, count: int) -> None:
        """Replace `count` pods: half of them GPU pods (a new pod of the same Deployment takes the GPU), half not."""
        for k in range(count):
            if k % 2 == 0:
                node = self.rng.choice(self.nodes)
                if not node.pods:
                    continue
                old = node.pods.pop(self.rng.choice(list(node.pods)))
                kube.delete_pod(old.namespace, old.name)
                self.changes.append(("delete", old))
                self.journal.append((time.time(), "delete", old.namespace, old.name, old.deployment, old.node))
                self._add_gpu_pod(kube, old.namespace, old.deployment, old.node, old.gpu)
            elif self.others:
                i = self.rng.randrange(len(self.others))
                namespace, name, deployment, node_index = self.others[i]
                kube.delete_pod(namespace, name)
                replacement = self._add_other_pod(kube, namespace, deployment, node_index)
                self.others[i] = (namespace, replacement, deployment, node_index)

    def new_namespace(self, kube: KubeApiServer, pods: int) -> dict[str, object]:
        """A namespace that did not exist, with a new Deployment of `pods` GPU pods on nodes picked at random."""
        self._namespaces_made += 1
        namespace, name = f"{NEW_NAMESPACE_PREFIX}{self._namespaces_made:02d}", f"infer-new-{self._namespaces_made:02d}"
        self._deployment(kube, namespace, name)
        for _ in range(pods):
            node = self.rng.randrange(len(self.nodes))
            self._add_gpu_pod(kube, namespace, name, node, self.rng.randrange(GPUS_PER_NODE))
        deployment: dict[str, object] = {"namespace": namespace, "name": name, "pods": pods}
        self.deployments.append(deployment)
        return deployment


class Snapshots:
    """The exporters' side: each node's pods, their serialized figures, and a new snapshot each interval."""

    def __init__(self, interval: float, nodes: list[Node], seed: int) -> None:
        self.interval = interval
        self.nodes = nodes
        self.rng = random.Random(seed)
        self.templates = {key: pod_template(pod, node.name) for node in nodes for key, pod in node.pods.items()}

    def apply(self, change: str, pod: GpuPod) -> None:
        node, key = self.nodes[pod.node], (pod.namespace, pod.name)
        if change == "add":
            node.pods[key] = pod
            self.templates[key] = pod_template(pod, node.name)
        else:
            node.pods.pop(key, None)
            self.templates.pop(key, None)

    def snapshot(self, node: Node, now: float) -> None:
        """The node's next snapshot: new figures for each of its pods, serialized once."""
        sampled = now - SAMPLE_LAG
        at, second = _time(sampled), sample_second(sampled)
        node.head = (
            b'{"api_version":"gpu-pulse.dev/v1","node":"%s","generated_at":%s,"interval_seconds":%s,'
            % (
                node.name.encode(),
                at,
                repr(self.interval).encode(),
            )
            + b'"kubelet_up":true,"pods":['
        )
        pieces: dict[str, list[bytes]] = {}
        rng = self.rng
        for key, pod in sorted(node.pods.items()):
            figures = {
                b"util": b"%d.%d" % divmod(utilization_tenths(pod.namespace, pod.name, second), 10),
                b"used": rng.randrange(2**30, 60 * 2**30),
                b"watts": b"%.1f" % rng.uniform(80, 700),
                b"at": at,
            }
            pieces.setdefault(pod.namespace, []).append(self.templates[key] % figures)
        node.pieces = pieces
        node.joined = {}
        node.generated = now


def check_documents(fleet: Snapshots) -> None:
    """The simulated documents are the exporter's: they parse with its model and serialize back to the same bytes;
    and each pod's figure in them is the ground truth (`utilization_tenths`) for the sample second they name."""
    node = next(n for n in fleet.nodes if n.pods)
    fleet.snapshot(node, time.time())
    document = node.document(None)
    if encode_node_pods(parse_node_pods(document)) != document:
        raise SystemExit("the simulated /pods documents are not what the exporter's model serializes")
    read = parse_node_pods(document)  # what the adapter reads
    if len(read.pods) != len(node.pods):
        raise SystemExit("the simulated /pods documents lose pods")
    for pod in read.pods:
        second = sample_second(pod.sampled_at.timestamp())
        published = pod.containers[0].devices[0].utilization_percent
        if published != utilization_tenths(pod.namespace, pod.name, second) / 10:
            raise SystemExit(f"pod {pod.namespace}/{pod.name}: the document says {published}, the truth differs")


# ---- the exporters' HTTP side ----------------------------------------------------------------------------------------
class Exporters:
    def __init__(self, fleet: Snapshots, port: int) -> None:
        self.fleet = fleet
        self.port = port
        self.by_address = {node.address: node for node in fleet.nodes}
        self._runner: web.AppRunner | None = None
        self._sites: dict[str, web.TCPSite] = {}
        self.restarts: list[tuple[int, float, float | None]] = []  # (node, down at, up at), wall-clock times

    def _node(self, request: web.Request) -> Node:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        node = self.by_address.get(sockname[0]) if sockname else None
        if node is None:
            raise web.HTTPNotFound(text="no node at this address\n")
        return node

    async def pods(self, request: web.Request) -> web.StreamResponse:
        node = self._node(request)
        node.requests += 1
        namespaces = frozenset(request.query.getall("namespace", [])) or None
        self.current(node)
        if request.query.get("watch") not in ("1", "true"):
            node.documents += 1
            headers = {"Cache-Control": "no-store", "Gpu-Pulse-Answered-At": f"{time.time():.3f}"}
            return web.Response(body=node.document(namespaces), content_type="application/json", headers=headers)
        every = float(request.query.get("every", "0"))
        response = web.StreamResponse(headers={"Content-Type": STREAM_CONTENT_TYPE, "Cache-Control": "no-store"})
        ends = time.monotonic() + STREAM_SECONDS * random.uniform(0.9, 1.1)
        stream = Stream(namespaces, every, response, request.transport, ends)
        node.streams.append(stream)
        try:
            await response.prepare(request)
            await self.send(node, stream, time.monotonic())
            await stream.done.wait()
            if time.monotonic() >= stream.ends:
                await response.write_eof()
        except ConnectionResetError:
            pass
        finally:
            if stream in node.streams:
                node.streams.remove(stream)
        return response

    async def send(self, node: Node, stream: Stream, now: float) -> None:
        line = stream_event(time.time(), node.document(stream.namespaces))
        stream.sent_at = now
        node.documents += 1
        await stream.response.write(line)

    async def publish(self, node: Node) -> None:
        """At the node's snapshot time: a line to each stream whose `every` has passed (the snapshot is taken only when
        some reader gets it: what nobody reads need not be made); streams past their time end."""
        now = time.monotonic()
        slack = self.fleet.interval / 2
        due = []
        for stream in list(node.streams):
            transport = stream.transport
            if now >= stream.ends or transport is None or transport.is_closing():
                stream.done.set()
            elif now - stream.sent_at >= stream.every - slack:
                if transport.get_write_buffer_size() <= 4 * 2**20:  # a reader that does not read misses snapshots
                    due.append(stream)
        if not due:
            return
        self.fleet.snapshot(node, time.time())
        for stream in due:
            try:
                await self.send(node, stream, now)
            except ConnectionResetError:
                stream.done.set()

    def current(self, node: Node) -> None:
        """Make sure the node's snapshot is at most one interval old (for an answer outside its snapshot time)."""
        if time.time() - node.generated >= self.fleet.interval:
            self.fleet.snapshot(node, time.time())

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/pods", self.pods)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        for node in self.fleet.nodes:
            await self._listen(node)

    async def _listen(self, node: Node) -> None:
        assert self._runner is not None
        site = self._sites[node.address] = web.TCPSite(self._runner, node.address, self.port, backlog=64)
        await site.start()

    async def restart(self, node: Node, seconds: float) -> None:
        """Node `node`'s exporter restarts, as when its process is replaced: every connection to it closes at once
        (streams end mid-way), connections are refused for `seconds`, then it serves again, its first snapshot new."""
        assert self._runner is not None
        entry = len(self.restarts)
        self.restarts.append((node.index, time.time(), None))
        await self._sites.pop(node.address).stop()  # refuses connections from now on
        for handler in self._runner.server.connections if self._runner.server else ():
            transport = handler.transport
            sockname = transport.get_extra_info("sockname") if transport else None
            if transport is not None and sockname and sockname[0] == node.address:
                transport.abort()
        for stream in node.streams:
            stream.done.set()
        node.generated = 0.0
        await asyncio.sleep(seconds)
        await self._listen(node)
        self.restarts[entry] = (node.index, self.restarts[entry][1], time.time())

    async def stop(self) -> None:
        for node in self.fleet.nodes:
            for stream in node.streams:
                stream.done.set()
        if self._runner is not None:
            await self._runner.cleanup()


async def snapshots(fleet: Snapshots, exporters: Exporters) -> None:
    """Each node's snapshot time comes every interval at its own phase; a tick every 10 ms handles the nodes due."""
    order = sorted(fleet.nodes, key=lambda n: n.phase)
    start = time.monotonic()
    cycle, position = 0, 0
    while True:
        await asyncio.sleep(0.01)
        now = time.monotonic()
        while True:
            if position == len(order):
                cycle, position = cycle + 1, 0
            node = order[position]
            due = start + cycle * fleet.interval + node.phase
            if due > now:
                break
            await exporters.publish(node)
            position += 1


async def churning(fleet: Fleet, kube: KubeApiServer, rate: float, exporters: Connection) -> None:
    carried = 0.0
    while True:
        await asyncio.sleep(1.0)
        carried += rate
        count, carried = int(carried), carried - int(carried)
        fleet.churn(kube, count)
        exporters.send(fleet.changes)
        fleet.changes = []


def run_exporters(interval: float, nodes: list[Node], port: int, seed: int, conn: Connection) -> None:
    """The exporters' process (its own, so that the API stand-in's answers do not wait behind their work)."""
    asyncio.run(_serve_exporters(interval, nodes, port, seed, conn))


async def _serve_exporters(interval: float, nodes: list[Node], port: int, seed: int, conn: Connection) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    fleet = Snapshots(interval, nodes, seed)
    check_documents(fleet)
    for node in fleet.nodes:
        fleet.snapshot(node, time.time())
    exporters = Exporters(fleet, port)
    await exporters.start()

    async def stats(request: web.Request) -> web.Response:
        body = {
            "requests": [n.requests for n in fleet.nodes],
            "documents": [n.documents for n in fleet.nodes],
            "streams": sum(len(n.streams) for n in fleet.nodes),
            "monotonic": time.monotonic(),
            "restarts": exporters.restarts,
        }
        return web.json_response(body)

    restarting: set[asyncio.Task[None]] = set()

    async def restart(request: web.Request) -> web.Response:
        node = fleet.nodes[int(request.query["node"])]
        task = asyncio.create_task(exporters.restart(node, float(request.query.get("seconds", "5"))))
        restarting.add(task)
        task.add_done_callback(restarting.discard)
        await asyncio.sleep(0)  # the restart has begun: its node refuses connections
        return web.json_response({"node": node.index, "address": node.address})

    control = web.Application()
    control.router.add_get("/stats", stats)
    control.router.add_post("/restart", restart)
    control_runner = web.AppRunner(control, access_log=None, handle_signals=False)
    await control_runner.setup()
    await web.TCPSite(control_runner, "127.0.0.1", 0).start()
    conn.send(f"http://127.0.0.1:{control_runner.addresses[0][1]}")
    ticking = asyncio.create_task(snapshots(fleet, exporters))
    while True:  # the API's changes, until the parent says stop
        await asyncio.sleep(0.1)
        while conn.poll():
            changes = conn.recv()
            if changes is None:
                ticking.cancel()
                await exporters.stop()
                await control_runner.cleanup()
                return
            for change, pod in changes:
                fleet.apply(change, pod)


@dataclass
class TruthEndpoint:
    runner: web.AppRunner
    url: str


async def serve_truth(fleet: Fleet, kube: KubeApiServer) -> TruthEndpoint:
    """The API stand-in's control endpoint: the membership journal (`GET /journal?since=N`: entries N.. and the time
    they are complete up to) and a new namespace with a new Deployment (`POST /namespaces?pods=K`; its pods reach the
    exporters with the next churn tick)."""

    async def journal(request: web.Request) -> web.Response:
        since = int(request.query.get("since", "0"))
        return web.json_response({"until": time.time(), "entries": fleet.journal[since:]})

    async def namespaces(request: web.Request) -> web.Response:
        return web.json_response(fleet.new_namespace(kube, int(request.query.get("pods", "4"))))

    app = web.Application()
    app.router.add_get("/journal", journal)
    app.router.add_post("/namespaces", namespaces)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return TruthEndpoint(runner, f"http://127.0.0.1:{runner.addresses[0][1]}")


async def serve(args: argparse.Namespace) -> None:
    kube = KubeApiServer(bookmark_interval=5.0)
    await kube.start()
    fleet = Fleet(args.nodes, args.gpu_pods, args.other_pods, args.interval, args.seed)
    fleet.populate(kube)
    ours, theirs = multiprocessing.get_context("spawn").Pipe()
    child = multiprocessing.get_context("spawn").Process(
        target=run_exporters, args=(args.interval, fleet.nodes, args.port, args.seed, theirs), daemon=True
    )
    child.start()
    loop = asyncio.get_running_loop()
    control = await loop.run_in_executor(None, ours.recv)
    churn = asyncio.create_task(churning(fleet, kube, args.churn, ours))
    truth = await serve_truth(fleet, kube)
    info = {
        "kube": kube.url,
        "control": control,
        "truth": truth.url,
        "port": args.port,
        "nodes": len(fleet.nodes),
        "gpu_pods": fleet.gpu_pods,
        "other_pods": len(fleet.others),
        "deployments": fleet.deployments,
    }
    tmp = args.ready.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    tmp.replace(args.ready)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    churn.cancel()
    await truth.runner.cleanup()
    ours.send(None)
    await loop.run_in_executor(None, child.join, 10)
    if child.is_alive():
        child.terminate()
    await kube.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--gpu-pods", type=int, default=20_000)
    parser.add_argument("--other-pods", type=int, default=30_000)
    parser.add_argument("--interval", type=float, default=1.0, help="the exporters' poll interval (seconds)")
    parser.add_argument("--churn", type=float, default=4.0, help="pods replaced a second")
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--seed", type=int, default=13)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
