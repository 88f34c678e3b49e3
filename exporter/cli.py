"""`gpu-pulse-exporter` (also `python -m exporter`): configuration, logging, collector, poll loop, server, signals.

Exit codes: 0 after SIGTERM/SIGINT, 2 for bad configuration (one line on stderr naming the flag or variable),
1 when NVML is missing (one line saying how to run on simulated GPUs) or the address cannot be bound.
SIGHUP makes the collector enumerate the GPUs again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, TextIO

from exporter.attribution import PodsDocumentBuilder, build_pod_side
from exporter.attribution.podwatch import PodWatchConfigError
from exporter.collection import PodAttributor
from exporter.collectors_file import Selection, SelectionError, load_selection
from exporter.config import PROG, ConfigError, ExporterSettings, load_config, package_version
from exporter.exposition import ExpositionRenderer
from exporter.logs import configure_logging
from exporter.loop import PollLoop
from exporter.nvml import NVML_MEASUREMENTS, NvmlCollector, NvmlUnavailable
from exporter.server import Access, build_app, load_access, start_server, tls_context

if TYPE_CHECKING:  # the simulator is imported only with --simulate
    from simulation.node import SimulatedNode

log = logging.getLogger("exporter.cli")


class StartupError(Exception):
    """A failure before serving, with the exit code it maps to."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _selection(settings: ExporterSettings) -> Selection | None:
    if settings.collectors is None:
        return None
    try:
        selection = load_selection(settings.collectors)
    except SelectionError as error:
        raise StartupError(str(error), 2) from None
    missing = list(selection.unsupported) + sorted(selection.keys - NVML_MEASUREMENTS)
    if missing:
        log.warning("--collectors %s: cannot provide, left out: %s", settings.collectors, ", ".join(missing))
    return selection


def _security(settings: ExporterSettings) -> tuple[Access | None, ssl.SSLContext | None]:
    try:
        access = load_access(settings.auth_bearer_token_file, settings.auth_basic_file)
        context = None
        if settings.tls_cert_file is not None and settings.tls_key_file is not None:
            context = tls_context(settings.tls_cert_file, settings.tls_key_file)
    except ValueError as error:
        raise StartupError(str(error), 2) from None
    return access, context


def _simulate(settings: ExporterSettings, stack: ExitStack) -> SimulatedNode | None:
    """For `--simulate`: install the simulated libnvidia-ml (before the collector initializes NVML) and, when the
    scenario has pods, start its kubelet and proc tree in this process."""
    if settings.simulate is None:
        return None
    from simulation import ScenarioError, load_scenario
    from simulation.node import start_simulated_node

    try:
        scenario = load_scenario(settings.simulate, seed=settings.seed)
    except ScenarioError as error:
        raise StartupError(f"--simulate: {error}", 2) from None
    node = start_simulated_node(scenario)
    stack.callback(node.stop)
    pods = f"{len(scenario.pods)} pods, kubelet at {node.pod_side.socket_path}" if node.pod_side else "no pods"
    log.info("simulating GPUs: scenario %s (seed %s; %s)", settings.simulate, scenario.seed, pods)
    return node


def _pod_side(settings: ExporterSettings, node: SimulatedNode | None, stack: ExitStack) -> PodAttributor | None:
    """The pod attributor: against the simulated node's kubelet and proc tree with --simulate, else the real ones."""
    if not settings.pod_attribution:
        return None
    if node is not None and node.pod_side is None:
        return None  # a simulated node without pods has no kubelet
    simulated = node.pod_side if node is not None else None
    try:
        attributor = build_pod_side(
            node_name=settings.node_name or "",
            kubelet_socket=simulated.socket_path if simulated else settings.kubelet_socket,
            kubelet_interval=settings.kubelet_interval,
            resource_names=settings.resource_names,
            proc_root=simulated.proc_root if simulated else settings.proc_root,
            kubernetes=settings.kubernetes,
            kubeconfig=settings.kubeconfig,
            pod_labels=settings.pod_labels,
            directory=node.directory if node is not None and not settings.kubernetes else None,
        )
    except (ValueError, PodWatchConfigError) as error:
        raise StartupError(str(error), 2) from None
    attributor.start()
    stack.callback(attributor.close)
    return attributor


async def _serve(settings: ExporterSettings, poll_loop: PollLoop, collector: NvmlCollector) -> None:
    access, context = _security(settings)
    app = build_app(poll_loop, access=access)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    def rediscover_now() -> None:
        try:
            collector.rediscover()
        except Exception:  # the collector keeps its devices; the exporter keeps serving
            log.exception("SIGHUP: enumerating the GPUs again failed")

    def rediscover() -> None:
        log.info("SIGHUP: enumerating the GPUs again")
        loop.run_in_executor(None, rediscover_now)

    loop.add_signal_handler(signal.SIGHUP, rediscover)
    try:
        server = await start_server(app, settings.listen, ssl_context=context)
    except OSError as error:
        raise StartupError(f"--listen {settings.listen}: cannot listen: {error.strerror or error}", 1) from None
    log.info(
        "serving %s on %s (dialect %s, interval %g s, node %s)",
        "/metrics /pods /healthz /readyz /",
        server.url,
        settings.dialect,
        settings.interval,
        settings.node_name,
    )
    try:
        await stop.wait()
        log.info("stopping: finishing requests in flight, stopping the poll loop")
    finally:
        await server.stop()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)


def run(settings: ExporterSettings) -> None:
    """Run the exporter until SIGTERM/SIGINT. Raises StartupError for failures before serving."""
    selection = _selection(settings)
    keys = selection.keys if selection is not None else None
    _security(settings)  # fail on bad TLS/auth files before touching NVML
    with ExitStack() as stack:
        node = _simulate(settings, stack)
        collector = NvmlCollector(enabled=keys, interval_seconds=settings.interval)
        try:
            collector.start()
        except NvmlUnavailable as error:
            raise StartupError(str(error), 1) from None
        stack.callback(collector.close)
        attributor = _pod_side(settings, node, stack)
        renderer = ExpositionRenderer(
            settings.dialect,
            selection=keys,
            interval_seconds=settings.interval,
            version=package_version(),
            types=selection.types if selection is not None else None,
            hostname_label=settings.dcgm_hostname_label,
        )
        poll_loop = PollLoop(
            collector,
            renderer,
            interval=settings.interval,
            node=settings.node_name or "",
            attributor=attributor,
            pods_view=PodsDocumentBuilder(interval_seconds=settings.interval),
        )
        asyncio.run(_serve(settings, poll_loop, collector))
        log.info("stopped")


def main(
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    stderr: TextIO | None = None,
    runner: Callable[[ExporterSettings], None] = run,
) -> int:
    """The console script. Returns the exit code."""
    err = stderr if stderr is not None else sys.stderr
    try:
        settings = load_config(sys.argv[1:] if argv is None else argv, os.environ if environ is None else environ)
    except ConfigError as error:
        print(f"{PROG}: error: {error}", file=err)
        return 2
    configure_logging(settings.log_level, settings.log_format, err)
    try:
        runner(settings)
    except StartupError as error:
        print(f"{PROG}: error: {error}", file=err)
        return error.code
    return 0
