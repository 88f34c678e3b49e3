"""A simulated cluster for the adapter benchmarks, in its own process: the Kubernetes API test server with N pods and
simulated exporter `/pods` endpoints for the GPU nodes of the benchmarked namespace; and the real adapter (the
`gpu-pulse-adapter` CLI, TLS and client-certificate auth) in another process, pointed at it.

    python bench/adapter_cluster.py --pods 10000 --namespace-pods 1000 --ready FILE

Namespace `bench` holds `--namespace-pods` pods of Deployment `infer` (label app=infer), 8 per node on nodes
gpu-0000..; the other pods fill 100-pod namespaces team-00.. on further nodes. Every node of `bench` gets an exporter
endpoint on loopback that answers `/pods` (the exporter's NodePods document) with fresh figures at every request. When
everything serves, `--ready` receives {"kube": URL, "exporters": {node: URL}}; the process runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from simulation.kubeapi import KubeApiServer
from simulation.kubeconfig import write_kubeconfig
from tests.support.exporters import SERVING_LINE
from tests.support.loopback import listening_socket, port_of
from toolkit.certs import CertificateAuthority
from toolkit.pods_contract import ContainerView, DeviceFigures, NodePods, PodView, encode_node_pods

GPUS_PER_NODE = 8
PODS_PER_TEAM = 100
NAMESPACE = "bench"
SELECTOR = "app=infer"


def node_name(index: int) -> str:
    return f"gpu-{index:04d}"


def bench_pod_name(index: int) -> str:
    """The name of pod `index` of Deployment `infer` in namespace `bench`."""
    return f"infer-6b7f9-{index:05d}"


def populate(kube: KubeApiServer, pods: int, namespace_pods: int) -> dict[str, list[str]]:
    """Create the pods; return the bench namespace's pods by node."""
    kube.put_replica_set(NAMESPACE, "infer-6b7f9", deployment="infer", labels={"app": "infer"})
    owner = ("ReplicaSet", "infer-6b7f9")
    labels = {"app": "infer", "pod-template-hash": "6b7f9"}
    by_node: dict[str, list[str]] = {}
    for i in range(namespace_pods):
        node = node_name(i // GPUS_PER_NODE)
        name = bench_pod_name(i)
        ip = f"10.{i // 65536}.{(i // 256) % 256}.{i % 256}"
        kube.put_pod(NAMESPACE, name, node=node, labels=labels, pod_ip=ip, owner=owner, gpus_per_container=1)
        by_node.setdefault(node, []).append(name)
    first_other_node = (namespace_pods + GPUS_PER_NODE - 1) // GPUS_PER_NODE
    for j in range(pods - namespace_pods):
        team = j // PODS_PER_TEAM
        node = node_name(first_other_node + j // GPUS_PER_NODE)
        kube.put_pod(
            f"team-{team:02d}",
            f"svc-{team:02d}-{j % PODS_PER_TEAM:03d}",
            node=node,
            labels={"app": f"svc-{team:02d}", "team": f"t{team:02d}"},
            pod_ip=f"10.200.{(j // 256) % 256}.{j % 256}",
            gpus_per_container=1,
        )
    return by_node


class ExporterEndpoints:
    """One loopback HTTP server per node, answering `/pods` with fresh figures for that node's bench pods."""

    def __init__(self, by_node: dict[str, list[str]]) -> None:
        self._by_node = by_node
        self._runners: list[web.AppRunner] = []
        self.urls: dict[str, str] = {}

    def _document(self, node: str) -> bytes:
        now = time.time()
        sampled = datetime.fromtimestamp(now - 0.3, UTC)
        pods = []
        for gpu, name in enumerate(self._by_node[node]):
            figures = DeviceFigures(
                uuid=f"GPU-{node}-{gpu}",
                gpu=gpu,
                gpu_uuid=f"GPU-{node}-{gpu}",
                model="NVIDIA H100 80GB HBM3",
                share="exclusive",
                utilization_percent=round(50 + 40 * ((hash(name) + int(now)) % 100) / 100, 1),
                memory_used_bytes=20 * 2**30,
                memory_total_bytes=80 * 2**30,
                power_watts=350.0,
                energy_joules=1000.0,
                sharing_pods=1,
                gpu_instance=None,
                mig_profile=None,
            )
            pods.append(
                PodView(
                    namespace=NAMESPACE,
                    name=name,
                    uid=None,
                    containers=(ContainerView(name="main", devices=(figures,)),),
                    sampled_at=sampled,
                    window_seconds=30.0,
                )
            )
        document = NodePods(node=node, generated_at=sampled, interval_seconds=1.0, kubelet_up=True, pods=tuple(pods))
        return encode_node_pods(document)

    async def start(self) -> None:
        for node in self._by_node:

            async def handler(request: web.Request, node: str = node) -> web.Response:
                return web.Response(body=self._document(node), content_type="application/json")

            app = web.Application()
            app.router.add_get("/pods", handler)
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            server = site._server
            assert isinstance(server, asyncio.Server)
            self.urls[node] = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            self._runners.append(runner)

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()


async def serve_until_terminated(ready: Path, info: dict[str, object]) -> None:
    """Write `info` to `ready` (atomically: a reader never sees half of it), then wait for SIGTERM or SIGINT."""
    tmp = ready.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    tmp.replace(ready)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()


async def serve(pods: int, namespace_pods: int, ready: Path) -> None:
    kube = KubeApiServer()
    await kube.start()
    by_node = populate(kube, pods, namespace_pods)
    exporters = ExporterEndpoints(by_node)
    await exporters.start()
    await serve_until_terminated(ready, {"kube": kube.url, "exporters": exporters.urls})
    await exporters.stop()
    await kube.stop()


REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class AdapterCredentials:
    """What a benchmark's adapter runs with, as in a cluster: a CA, the adapter's serving pair, the HPA controller's
    client certificate and a kubeconfig for the API stand-in, written to `workdir`."""

    workdir: Path
    ca_pem: bytes

    @classmethod
    def write(cls, workdir: Path, kube_url: str) -> AdapterCredentials:
        ca = CertificateAuthority.create("bench-ca")
        ca.issue_server(["127.0.0.1"]).write(workdir / "serving.crt", workdir / "serving.key")
        (workdir / "client-ca.crt").write_bytes(ca.cert_pem)
        client = ca.issue_client("system:serviceaccount:kube-system:horizontal-pod-autoscaler")
        (workdir / "client.crt").write_bytes(client.cert_pem)
        (workdir / "client.key").write_bytes(client.key_pem)
        write_kubeconfig(workdir / "adapter.kubeconfig", server=kube_url)
        return cls(workdir, ca.cert_pem)

    def flags(self, port: int = 0) -> list[str]:
        """The adapter CLI's flags for listening on `port` (0: one it picks, read back with `served_url`) with these
        credentials (TLS, client certificates), logging at level info (its "serving" line says where it listens)."""
        work = self.workdir
        return [
            f"--listen=127.0.0.1:{port}",
            f"--kubeconfig={work / 'adapter.kubeconfig'}",
            f"--tls-cert-file={work / 'serving.crt'}",
            f"--tls-private-key-file={work / 'serving.key'}",
            f"--client-ca-file={work / 'client-ca.crt'}",
            f"--requestheader-client-ca-file={work / 'client-ca.crt'}",
            "--log-level=info",
        ]

    def client_ssl(self) -> ssl.SSLContext:
        """The HPA controller's side: trusts the adapter's certificate and presents the client certificate."""
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        context.load_cert_chain(self.workdir / "client.crt", self.workdir / "client.key")
        return context


BASELINE_SERVER = """
import socket, ssl, sys
from aiohttp import web
body = sys.stdin.buffer.read()
async def handler(request):
    return web.Response(body=body, content_type="application/json")
app = web.Application()
app.router.add_get("/{tail:.*}", handler)
context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
context.load_cert_chain(sys.argv[2], sys.argv[3])
listening = socket.socket(fileno=int(sys.argv[1]))  # bound and listening already, inherited from the benchmark
web.run_app(app, sock=listening, ssl_context=context, print=None, access_log=None)
"""


def start_baseline_server(body: bytes, cert: Path, key: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A bare aiohttp TLS server in its own process answering `body` to every GET: the floor an adapter's answer
    times are compared with in the same run. Returns the process and its base URL once it accepts connections.
    It serves on a socket this process bound and hands down (no port is picked before it is bound)."""
    with listening_socket() as listening:
        port = port_of(listening)
        process = subprocess.Popen(
            [sys.executable, "-c", BASELINE_SERVER, str(listening.fileno()), str(cert), str(key)],
            stdin=subprocess.PIPE,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            pass_fds=[listening.fileno()],
        )
    assert process.stdin is not None
    process.stdin.write(body)
    process.stdin.close()
    deadline = time.monotonic() + 30
    handshake = ssl.create_default_context()  # a connection is accepted by the kernel already: wait for TLS
    handshake.check_hostname = False
    handshake.verify_mode = ssl.CERT_NONE
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as raw, handshake.wrap_socket(raw):
                return process, f"https://127.0.0.1:{port}"
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise SystemExit("the baseline server did not start") from None
            time.sleep(0.05)


def wait_for_ready_file(process: subprocess.Popen[bytes], ready: Path, what: str) -> dict[str, Any]:
    """The JSON a started simulation writes to `ready` once it serves; SystemExit when it exits or takes too long."""
    deadline = time.monotonic() + 600
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start")
        time.sleep(0.2)
    info: dict[str, Any] = json.loads(ready.read_text())
    return info


def served_url(process: subprocess.Popen[bytes], log: Path, after: int = 0, timeout: float = 600) -> str:
    """The address a service started on port 0 (an adapter with `AdapterCredentials.flags()`, an exporter) serves
    on, from the "serving" line it writes to `log` past byte `after` (what the log held before it started);
    SystemExit when it exits or takes too long."""
    deadline = time.monotonic() + timeout
    while (found := re.search(SERVING_LINE, log.read_bytes()[after:].decode(errors="replace"))) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"no serving line from the process logging to {log}")
        time.sleep(0.05)
    return found.group(1)


async def wait_adapter_ready(process: subprocess.Popen[bytes], url: str, context: ssl.SSLContext) -> None:
    """Until the adapter at `url` answers /readyz (its pod cache synced); SystemExit when it exits or never does."""
    deadline = time.monotonic() + 600
    async with aiohttp.ClientSession() as session:
        while True:
            if process.poll() is not None:
                raise SystemExit("the adapter exited")
            try:
                async with session.get(f"{url}/readyz", ssl=context) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the adapter never became ready")
            await asyncio.sleep(0.2)


@dataclass
class Launched:
    """The cluster and adapter processes of one benchmark run, and how to talk to the adapter."""

    cluster: subprocess.Popen[bytes]
    adapter: subprocess.Popen[bytes] | None
    url: str
    client_ssl: ssl.SSLContext
    serving_cert: Path
    serving_key: Path
    kube_url: str

    def stop(self) -> None:
        for process in (self.adapter, self.cluster):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def start_cluster(pods: int, namespace_pods: int, workdir: Path) -> tuple[subprocess.Popen[bytes], dict[str, object]]:
    ready = workdir / "cluster.json"
    process = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__)),
            f"--pods={pods}",
            f"--namespace-pods={namespace_pods}",
            f"--ready={ready}",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return process, wait_for_ready_file(process, ready, "the simulated cluster")


def launch(
    pods: int,
    namespace_pods: int,
    workdir: Path,
    *extra_flags: str,
    exporter_map: Callable[[dict[str, str]], dict[str, str]] | None = None,
    log: Path | None = None,
) -> Launched:
    """Start the simulated cluster, then the adapter CLI on it (direct source, a static exporter map, changed by
    `exporter_map` when given), and wait until the adapter is ready (its pod cache synced). `log`: where the adapter's
    stderr goes (default: adapter.log in `workdir`), where its "serving" line says which port it bound."""
    cluster, info = start_cluster(pods, namespace_pods, workdir)
    credentials = AdapterCredentials.write(workdir, str(info["kube"]))
    exporters = info["exporters"]
    assert isinstance(exporters, dict)
    if exporter_map is not None:
        exporters = exporter_map(exporters)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_PULSE_")}
    env["GPU_PULSE_ADAPTER_EXPORTER_ENDPOINTS"] = ",".join(f"{node}={url}" for node, url in exporters.items())
    log = log or workdir / "adapter.log"
    before = log.stat().st_size if log.exists() else 0
    adapter = subprocess.Popen(
        [sys.executable, "-m", "adapter.cli", *credentials.flags(), *extra_flags],
        cwd=REPO,
        env=env,
        stderr=log.open("ab"),
    )
    client_ssl = credentials.client_ssl()
    try:
        url = served_url(adapter, log, before)
    except SystemExit:
        Launched(cluster, adapter, "", client_ssl, workdir / "serving.crt", workdir / "serving.key", "").stop()
        raise
    launched = Launched(
        cluster,
        adapter,
        url,
        client_ssl,
        workdir / "serving.crt",
        workdir / "serving.key",
        str(info["kube"]),
    )
    asyncio.run(_wait_ready(launched))
    return launched


async def _wait_ready(launched: Launched) -> None:
    assert launched.adapter is not None
    try:
        await wait_adapter_ready(launched.adapter, launched.url, launched.client_ssl)
    except SystemExit:
        launched.stop()
        raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--namespace-pods", type=int, default=1_000)
    parser.add_argument("--ready", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.pods, min(args.namespace_pods, args.pods), args.ready))


if __name__ == "__main__":
    main()
