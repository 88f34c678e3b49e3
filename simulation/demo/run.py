"""`run_demo`: the whole pipeline on a laptop without a GPU, until Ctrl-C or SIGTERM.

It starts the simulated GPU nodes (exporter child processes), the Kubernetes API test server with their pods, and the
real adapter (direct source) over TLS on `options.listen`; once the adapter is ready it writes a kubeconfig for
kubectl, prints the commands to try, and refreshes a summary of the `llm-inference` Deployment and what an HPA would
make of it. Stopping undoes everything in reverse: the kubeconfig is removed, the adapter and the API server stop,
the exporters are terminated and reaped, the temporary directory goes.

Exit codes, as `gpu-pulse-adapter` has them: 0 after a clean stop; 2 for options that cannot work (a bad or taken
--listen, a kubeconfig path holding another file); 1 when something fails at run time (a node does not come up).
Either way one line on stderr, `gpu-pulse-adapter: error: ...`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Awaitable, Mapping
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO, TypeVar

import aiohttp

from adapter.settings import PROG, load_settings
from simulation import load_scenario
from simulation.demo.cluster import DEMO_GROUPS, DEMO_USER, DemoPod, demo_pods, hpa_seen, populate
from simulation.demo.commands import keda_lines, kubectl_commands
from simulation.demo.kedastate import trigger_state
from simulation.demo.nodes import NodeExporter, NodeStartError, start_node_exporter, wait_serving
from simulation.demo.options import DemoOptions
from simulation.demo.scenarios import NODES, traffic_phase, write_scenarios
from simulation.demo.summary import read_summary, render_line, render_screen
from simulation.demo.trust import (
    DemoTrust,
    KubeconfigInUseError,
    clear_kubeconfig_path,
    create_trust,
    remove_demo_kubeconfig,
    server_url,
    write_demo_kubeconfig,
)
from simulation.demo.zero import GATEWAY_TTL, MODEL, POOL, scaled_to_zero, write_demand_config, zero_lines
from simulation.gateway import SimulatedGateway
from simulation.kubeapi import AggregatedApi, KubeApiServer
from simulation.kubeconfig import write_kubeconfig
from simulation.scenario import Scenario
from toolkit.serving import ListenError, check_listen
from toolkit.settings import ListenAddress, SettingsError, parse_listen

T = TypeVar("T")
CLEAR_SCREEN = "\x1b[H\x1b[2J"
START_TIMEOUT = 90.0  # seconds for the nodes, and again for the adapter, to come up


class _InterruptedError(Exception):
    """SIGINT or SIGTERM arrived while starting."""


class _DemoError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def run_demo(options: DemoOptions, *, out: TextIO | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the demo until SIGINT or SIGTERM (blocking; call from the main thread). Returns the exit code."""
    stream = out if out is not None else sys.stdout
    terminal = options.terminal if options.terminal is not None else stream.isatty()
    demo = _Demo(options, stream, terminal, dict(os.environ if environ is None else environ))
    try:
        return asyncio.run(demo.main())
    except KeyboardInterrupt:  # before the signal handlers were in place
        return 0


class _Demo:
    def __init__(self, options: DemoOptions, out: TextIO, terminal: bool, environ: dict[str, str]) -> None:
        self.options = options
        self.out = out
        self.terminal = terminal
        self.environ = environ
        self.stop = asyncio.Event()
        self.keda: tuple[str, bool] | None = None  # the scaler's address and whether it serves TLS
        self.scenarios: dict[str, Scenario] = {}
        self.gateway: SimulatedGateway | None = None  # with scale_to_zero: the gateway holding llm-inference's requests
        # when the nodes were started: their scenario time, which the traffic phases follow, counts from a moment or
        # two later (each exporter's simulator starts its clock once its process is up)
        self.nodes_started = time.time()

    # -- output --

    def verbatim(self, block: str) -> None:
        """Lines a user copies (YAML, a command), printed as they are, without the time stamps of log lines."""
        print(block, file=self.out, flush=True)

    def say(self, message: str) -> None:
        if self.terminal:
            print(message, file=self.out, flush=True)
        else:
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            for line in message.splitlines() or [""]:
                print(f"{stamp} {line}" if line else "", file=self.out, flush=True)

    # -- lifecycle --

    async def main(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.stop.set)
        try:
            return await self._run()
        except _InterruptedError:
            return 0
        except _DemoError as failure:
            print(f"{PROG}: error: {failure}", file=sys.stderr, flush=True)
            return failure.code
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)

    async def _run(self) -> int:
        listen = _checked_listen(self.options.listen)
        try:
            clear_kubeconfig_path(self.options.kubeconfig)
        except KubeconfigInUseError as error:
            raise _DemoError(f"--demo-kubeconfig: {error}", 2) from None
        with tempfile.TemporaryDirectory(prefix="gpu-pulse-demo-") as directory:
            workdir = Path(directory)
            async with AsyncExitStack() as cleanup:
                cleanup.callback(self.say, "stopped: the adapter, the Kubernetes API and the simulated nodes are gone")
                pods, endpoints = await self._start_nodes(workdir, cleanup)
                extra = await self._start_gateway(workdir, cleanup) if self.options.scale_to_zero else ()
                trust = create_trust(workdir / "trust", listen, DEMO_USER, DEMO_GROUPS)
                kube = KubeApiServer(bookmark_interval=1.0)
                await kube.start(ssl_context=_kube_serving(trust))
                cleanup.push_async_callback(kube.stop)
                populate(kube, self.scenarios)
                url = await self._start_adapter(workdir, listen, kube.url, endpoints, trust, cleanup, extra)
                _aggregate(kube, url, trust)  # kubectl reaches pods, Deployments and the metrics APIs at one address
                write_demo_kubeconfig(self.options.kubeconfig, kube.url, trust)
                cleanup.callback(remove_demo_kubeconfig, self.options.kubeconfig)
                await self._show(url, trust, pods, kube)
                self.say("stopping")
        return 0

    async def _unless_stopped(self, awaitable: Awaitable[T]) -> T:
        task = asyncio.ensure_future(awaitable)
        stopping = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise _InterruptedError
        return task.result()

    async def _start_nodes(self, workdir: Path, cleanup: AsyncExitStack) -> tuple[tuple[DemoPod, ...], str]:
        layout = scaled_to_zero() if self.options.scale_to_zero else NODES
        paths = write_scenarios(workdir, self.options.seed, nodes=layout)
        self.nodes_started = time.time()
        self.scenarios = {node: load_scenario(str(path)) for node, path in paths.items()}
        self.say(f"starting {len(paths)} simulated GPU nodes (one exporter process each) ...")
        nodes: dict[str, NodeExporter] = {}
        for node, path in paths.items():
            engines = bool(self.scenarios[node].pods)
            nodes[node] = await start_node_exporter(node, path, workdir, self.environ, engines=engines)
            cleanup.push_async_callback(nodes[node].stop)
        counts = {node: len(scenario.pods) for node, scenario in self.scenarios.items()}
        try:
            await self._unless_stopped(wait_serving(nodes, counts, START_TIMEOUT))
        except NodeStartError as error:
            raise _DemoError(str(error), 1) from None
        for node, exporter in nodes.items():
            self.say(f"  node {node}: exporter {exporter.url} (pid {exporter.pid}), {counts[node]} pods")
        endpoints = ",".join(f"{node}={exporter.url}" for node, exporter in nodes.items())
        return demo_pods(self.scenarios), endpoints

    async def _start_gateway(self, workdir: Path, cleanup: AsyncExitStack) -> tuple[str, ...]:
        """The simulated gateway in front of llm-inference's pool (no endpoint ready: it holds every request), and
        the adapter's flag that makes it read the gateway's queue."""
        if any(arg.startswith("--config=") for arg in self.options.source_args):
            raise _DemoError("--demo-scale-to-zero gives the demo's adapter its own --config: leave out --config", 2)
        self.gateway = SimulatedGateway({POOL: MODEL}, ttl=GATEWAY_TTL)
        url = await self.gateway.start()
        cleanup.push_async_callback(self.gateway.stop)
        self.say(f"simulated inference gateway on {url}: pool {POOL} has no ready endpoint, its requests wait")
        return (f"--config={write_demand_config(workdir, url)}",)

    async def _start_adapter(
        self,
        workdir: Path,
        listen: ListenAddress,
        kube_url: str,
        endpoints: str,
        trust: DemoTrust,
        cleanup: AsyncExitStack,
        extra: tuple[str, ...] = (),
    ) -> str:
        from adapter.server import Adapter  # the kubernetes client's import, only once the nodes run

        kube_config = write_kubeconfig(workdir / "kube-api.kubeconfig", server=kube_url, ca_pem=trust.ca.cert_pem)
        argv = [
            f"--listen={listen}", f"--kubeconfig={kube_config}", "--source=direct",
            f"--exporter-endpoints={endpoints}", f"--tls-cert-file={trust.serving_cert}",
            f"--tls-private-key-file={trust.serving_key}", f"--client-ca-file={trust.ca_file}",
            f"--requestheader-client-ca-file={trust.ca_file}", "--requestheader-allowed-names=front-proxy-client",
            f"--cert-dir={workdir / 'certs'}", *self.options.keda_args, *self.options.source_args, *extra,
        ]  # fmt: skip
        try:
            adapter = await Adapter.from_settings(load_settings(argv, {}))
        except (SettingsError, ValueError) as error:
            raise _DemoError(f"the adapter cannot start: {error}", 2) from None
        served: list[str] = []
        stop_adapter = asyncio.Event()
        serving = asyncio.create_task(adapter.serve(stop_adapter, on_serving=[served.append]))

        async def stop() -> None:
            stop_adapter.set()
            with contextlib.suppress(Exception):
                await serving

        cleanup.push_async_callback(stop)
        await self._unless_stopped(self._adapter_ready(serving, served, listen, trust))
        port = urllib.parse.urlsplit(served[0]).port or listen.port
        url = server_url(listen, port)
        self.say(f"adapter serving custom.metrics.k8s.io and external.metrics.k8s.io on {url} (direct source)")
        if adapter.rules is not None:
            flags = " ".join(self.options.source_args)
            self.say(f"  and the metrics prometheus-adapter's rules give, from Prometheus ({flags})")
        if adapter.keda is not None:
            self.keda = (adapter.keda.address, adapter.keda.tls)
            header, trigger, call = keda_lines(adapter.keda.address, adapter.keda.tls, trust.ca_file)
            self.say(header)
            self.verbatim(trigger)  # paste-able YAML: no time stamps
            self.say(call)
        return url

    async def _adapter_ready(
        self, serving: asyncio.Task[None], served: list[str], listen: ListenAddress, trust: DemoTrust
    ) -> None:
        context = ssl.create_default_context(cafile=str(trust.ca_file))
        deadline = time.monotonic() + START_TIMEOUT
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while True:
                if serving.done():
                    error = serving.exception()
                    raise _DemoError(str(error) if error else "the adapter stopped", 1)
                if served:
                    url = server_url(listen, urllib.parse.urlsplit(served[0]).port or listen.port)
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                        async with session.get(f"{url}/readyz", ssl=context) as response:
                            if response.status == 200:
                                return
                if time.monotonic() > deadline:
                    raise _DemoError("the adapter did not become ready", 1)
                await asyncio.sleep(0.2)

    async def _show(self, url: str, trust: DemoTrust, pods: tuple[DemoPod, ...], kube: KubeApiServer) -> None:
        commands = kubectl_commands(self.options.kubeconfig)
        footer = [f"kubeconfig {self.options.kubeconfig}; try:"]
        for what, command in commands:
            footer += [f"  # {what}", f"  {command}"]
        zero = []
        if self.gateway is not None:
            zero = zero_lines(self.gateway.url, self.options.kubeconfig, self.keda[0] if self.keda else None)
            footer += ["", *zero]
        footer += ["", "Ctrl-C stops the demo."]
        if not self.terminal:
            self.say(f"kubeconfig written to {self.options.kubeconfig}; try:")
            for what, command in commands:
                print(f"  # {what}\n  {command}", file=self.out, flush=True)
            for line in zero:
                print(line, file=self.out, flush=True)
        context = ssl.create_default_context(cafile=str(trust.ca_file))
        context.load_cert_chain(trust.client_cert, trust.client_key)
        connector = aiohttp.TCPConnector(ssl=context)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=5)) as session:
            while not self.stop.is_set():
                # with scale_to_zero llm-inference has no pod: no traffic phase to show
                phase = None if self.options.scale_to_zero else traffic_phase(time.time() - self.nodes_started).name
                summary = await read_summary(session, url, pods, phase=phase)
                keda = await trigger_state(*self.keda, trust.ca_file) if self.keda is not None else None
                # `kubectl get hpa` shows what an HPA controller would write from the same figures
                kube.put_object("horizontalpodautoscalers", hpa_seen(summary.suggestion, summary.average))
                if self.terminal:
                    now = datetime.now(UTC).strftime("%H:%M:%S")
                    header = [f"gpu-pulse demo: adapter {url} (direct source), {len(self.scenarios)} simulated "
                              f"GPU nodes, {now} UTC"]  # fmt: skip
                    print(CLEAR_SCREEN + render_screen(summary, header, footer, keda), file=self.out, flush=True)
                else:
                    print(render_line(summary, keda), file=self.out, flush=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), self.options.interval)


def _kube_serving(trust: DemoTrust) -> ssl.SSLContext:
    """The stand-in's TLS: its own certificate, and the demo user's client certificate asked for (as kube-apiserver
    asks with --client-ca-file)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(trust.kube_serving_cert, trust.kube_serving_key)
    context.load_verify_locations(cafile=str(trust.ca_file))
    context.verify_mode = ssl.CERT_OPTIONAL
    return context


def _aggregate(kube: KubeApiServer, adapter_url: str, trust: DemoTrust) -> None:
    """Register the adapter's groups with the stand-in, as the APIService objects do with kube-aggregator."""
    client = ssl.create_default_context(cafile=str(trust.ca_file))
    client.load_cert_chain(trust.proxy_cert, trust.proxy_key)
    groups = (("custom.metrics.k8s.io", ("v1beta2", "v1beta1")), ("external.metrics.k8s.io", ("v1beta1",)))
    for group, versions in groups:
        kube.aggregate(AggregatedApi(group, versions, adapter_url, client))


def _checked_listen(text: str) -> ListenAddress:
    """The listen address, checked before anything starts: well-formed, and free to bind."""
    try:
        listen = parse_listen(text)
    except ValueError as error:
        raise _DemoError(f"--listen {text}: {error}", 2) from None
    try:
        check_listen(listen, hint="is another demo or adapter running? choose another --listen")
    except ListenError as error:
        raise _DemoError(str(error), 2) from None
    return listen
