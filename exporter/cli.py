"""`gpu-pulse-exporter` (also `python -m exporter`): configuration, logging, collector, poll loop, server, signals.

Exit codes: 0 after SIGTERM/SIGINT (NVML shut down: the driver is free to be unloaded); 2 for every start-up problem
a user can fix (a bad flag, variable or file, an address that cannot be bound), each one line on stderr,
`gpu-pulse-exporter: error: ...`; 1 for a failure at run time. A driver that is not usable (not loaded yet, a
driver/library version mismatch, no libnvidia-ml) is no exit: the exporter serves, not ready, says why, and tries
again. SIGHUP makes the collector enumerate the GPUs again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import ssl
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, TextIO

from exporter.access import Access, load_access, load_reviewed_access
from exporter.attribution import PodsDocumentBuilder, build_pod_side
from exporter.catalogue import ALWAYS_SERVED, FIELD_SETS
from exporter.collection import PodAttributor
from exporter.collectors_file import Selection, SelectionError, load_selection
from exporter.engines import EngineReader
from exporter.engines.schedule import PollTicks
from exporter.exposition import ExpositionRenderer
from exporter.exposition.labels import DEFAULT_LABEL_FIELDS
from exporter.fields_report import UnservedReport, log_added, requested
from exporter.loop import PollLoop
from exporter.nvml import CollectorSettings, NvmlCollector
from exporter.server import build_app
from exporter.settings import PROG, ExporterSettings, load_settings
from exporter.snapshot import Snapshot
from toolkit.connections import ConnectionGuard, ConnectionLimits, ensure_file_limit
from toolkit.logs import configure_logging
from toolkit.pods import Pod
from toolkit.process import process_reader
from toolkit.serving import ListenError, check_listen, start_server
from toolkit.settings import SettingsError, package_version
from toolkit.tls import CertificateReloader, server_context

if TYPE_CHECKING:  # the simulator is imported only with --simulate
    from simulation.node import SimulatedNode

log = logging.getLogger("exporter.cli")


class StartupError(Exception):
    """A failure before serving, with the exit code it maps to."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _selection(settings: ExporterSettings) -> Selection | None:
    """The `--collectors` file, parsed; the measurements the shipped alerts read are added to it (and named), unless
    `--collectors-exact` asks for the file alone (then the alerts left without their series are named)."""
    if settings.collectors is None:
        return None
    try:
        selection = load_selection(settings.collectors)
    except SelectionError as error:
        raise StartupError(str(error), 2) from None
    log_added(selection, settings.dialect, f"--collectors {settings.collectors}", exact=settings.collectors_exact)
    return selection


def always_served(settings: ExporterSettings) -> frozenset[str]:
    """What is served whatever `--collectors` says: what the shipped alerts read, or nothing with --collectors-exact."""
    return frozenset() if settings.collectors_exact else ALWAYS_SERVED


def label_fields(selection: Selection | None) -> tuple[tuple[str, str], ...]:
    """The dcgm label fields on every series: the driver version always, and those the counters CSV asks for."""
    fields = dict(DEFAULT_LABEL_FIELDS)
    if selection is not None:
        fields.update(selection.labels)
    return tuple(fields.items())


def _newest(poll_loop: PollLoop) -> Snapshot | None:
    published = poll_loop.published
    return published.snapshot if published is not None else None


def _security(settings: ExporterSettings) -> tuple[Access | None, ssl.SSLContext | None]:
    try:
        if settings.auth_allowed_users is not None:
            access: Access | None = load_reviewed_access(
                settings.auth_allowed_users, settings.auth_token_audience, settings.kubeconfig
            )
        else:
            access = load_access(settings.auth_bearer_token_file, settings.auth_basic_file)
        context = None
        if settings.tls_cert_file is not None and settings.tls_private_key_file is not None:
            context = server_context(settings.tls_cert_file, settings.tls_private_key_file)
    except ValueError as error:
        raise StartupError(str(error), 2) from None
    return access, context


def _simulate(settings: ExporterSettings, stack: ExitStack) -> SimulatedNode | None:
    """For `--simulate`: install the simulated libnvidia-ml (before the collector initializes NVML) and, when the
    scenario has pods, start its kubelet and proc tree in this process. An explicit `--kubelet-socket` (flag or
    variable) means a real kubelet: the simulated one is not started."""
    if settings.simulate is None:
        return None
    from simulation import ScenarioError, load_scenario
    from simulation.node import start_simulated_node

    try:
        scenario = load_scenario(settings.simulate, seed=settings.seed)
    except ScenarioError as error:
        raise StartupError(f"--simulate: {error}", 2) from None
    real_kubelet = "kubelet_socket" in settings.model_fields_set
    node = start_simulated_node(scenario, serve_kubelet=not real_kubelet, kernel_log_path=settings.kernel_log)
    stack.callback(node.stop)
    where = settings.kubelet_socket if real_kubelet else node.pod_side.socket_path if node.pod_side else None
    pods = f"{len(scenario.pods)} pods, kubelet at {where}" if node.pod_side else "no pods"
    log.info("simulating GPUs: scenario %s (seed %s; %s)", settings.simulate, scenario.seed, pods)
    return node


def _pod_side(settings: ExporterSettings, node: SimulatedNode | None, stack: ExitStack) -> PodAttributor | None:
    """The pod attributor: against the simulated node's kubelet and proc tree with --simulate, else the real ones.

    An explicit `--kubelet-socket` or `--proc-root` (flag or variable) wins over the simulated node's, and with one
    of them (or `--kubernetes`) the scenario's pods and ResourceSlices are not handed in: they come from the real
    cluster, or are not known.
    """
    if not settings.pod_attribution:
        return None
    given = settings.model_fields_set
    real_kubelet = "kubelet_socket" in given
    if node is not None and node.pod_side is None and not real_kubelet:
        return None  # a simulated node without pods has no kubelet
    simulated = node.pod_side if node is not None else None
    scenario_pods = node is not None and not (settings.kubernetes or real_kubelet)
    try:
        attributor = build_pod_side(
            node_name=settings.node_name or "",
            kubelet_socket=simulated.socket_path if simulated and not real_kubelet else settings.kubelet_socket,
            kubelet_interval=settings.kubelet_interval,
            resource_names=settings.resource_names,
            proc_root=simulated.proc_root if simulated and "proc_root" not in given else settings.proc_root,
            kubernetes=settings.kubernetes,
            kubeconfig=settings.kubeconfig,
            pod_labels=settings.pod_labels,
            directory=node.directory if node is not None and scenario_pods else None,
            slices=node.slices if node is not None and scenario_pods else None,
        )
    except ValueError as error:  # one line naming the flag (KubeConnectionError is one)
        raise StartupError(str(error), 2) from None
    attributor.start()
    stack.callback(attributor.close)
    return attributor


def _engine_reader(
    settings: ExporterSettings,
    attributor: PodAttributor | None,
    newest: Callable[[], Snapshot | None],
    ticks: Callable[[], PollTicks | None],
) -> EngineReader | None:
    """With --engines: the reader of the GPU pods' serving engines, over the pod objects the attributor holds (the pod
    watch, or the simulated node's pods); None without --engines."""
    if not settings.engines:
        return None
    directory = getattr(attributor, "pods", None)
    if directory is None:
        raise StartupError(
            "--engines needs each GPU pod's object (its IP and annotations): give --kubernetes (or --simulate with a "
            "scenario that has pods)",
            2,
        )

    def gpu_pods() -> list[Pod]:
        snapshot = newest()
        if snapshot is None:
            return []
        keys = {(use.pod.namespace, use.pod.name) for use in snapshot.pods}
        return [pod for key in sorted(keys) if (pod := directory.by_name(*key)) is not None]

    return EngineReader(gpu_pods, interval=settings.engine_interval, ticks=ticks)


async def _serve(
    settings: ExporterSettings, poll_loop: PollLoop, collector: NvmlCollector, connections: ConnectionGuard
) -> None:
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

    # SIGHUPs merge: one enumeration at a time, and at most one more after it for the signals that came meanwhile
    # (200 signals queued 200 enumerations, which SIGTERM then waited 26 s for)
    running: asyncio.Future[None] | None = None
    again = False

    def rediscover() -> None:
        nonlocal running, again
        if running is not None and not running.done():
            again = True
            return
        log.info("SIGHUP: enumerating the GPUs again")
        running = loop.run_in_executor(None, rediscover_now)
        running.add_done_callback(rediscover_again)

    def rediscover_again(_: asyncio.Future[None]) -> None:
        nonlocal again
        if again and not stop.is_set():
            again = False
            rediscover()

    loop.add_signal_handler(signal.SIGHUP, rediscover)
    try:
        server = await start_server(app, settings.listen, ssl_context=context, connections=connections)
    except ListenError as error:
        raise StartupError(str(error), 2) from None
    certificate = None
    if context is not None and settings.tls_cert_file is not None and settings.tls_private_key_file is not None:
        # a renewed certificate (cert-manager, a rotated Secret) serves without a restart
        certificate = CertificateReloader(context, settings.tls_cert_file, settings.tls_private_key_file)
        await certificate.start()
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
        if certificate is not None:
            await certificate.stop()
        await server.stop()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)


def _connection_limits(settings: ExporterSettings) -> ConnectionLimits:
    limits = ConnectionLimits.of(settings)
    try:
        ensure_file_limit(limits)
    except ValueError as error:
        raise StartupError(str(error), 2) from None
    return limits


def run(settings: ExporterSettings) -> None:
    """Run the exporter until SIGTERM/SIGINT. Raises StartupError for failures before serving."""
    selection = _selection(settings)
    keys = selection.keys | always_served(settings) if selection is not None else FIELD_SETS[settings.field_set]
    _security(settings)  # fail on bad TLS/auth files before touching NVML
    connections = ConnectionGuard(_connection_limits(settings))  # and on a cap the open-file limit cannot hold
    try:
        check_listen(settings.listen)  # and on a taken port, before the simulator, NVML and the kubelet log a word
    except ListenError as error:
        raise StartupError(str(error), 2) from None
    with ExitStack() as stack:
        node = _simulate(settings, stack)
        if not settings.node_name:  # --simulate without --node-name or NODE_NAME: the scenario's node
            settings = settings.model_copy(
                update={"node_name": node.simulator.scenario.node if node else socket.gethostname()}
            )
        collector = NvmlCollector(
            settings=CollectorSettings(
                enabled=keys,
                labels=tuple(key for key, _ in selection.labels) if selection is not None else (),
                unserved=dict(selection.unserved) if selection is not None else {},
                interval_seconds=settings.interval,
                kernel_log=str(settings.kernel_log) if settings.kernel_log is not None else None,
            ),
            pid_namespace=node.pid_namespace if node is not None else None,  # the scenario's, when simulating
        )
        collector.start()  # without a usable NVML it serves, not ready, and tries again (docs/install.md)
        stack.callback(collector.close)
        attributor = _pod_side(settings, node, stack)
        renderer = ExpositionRenderer(
            settings.dialect,
            selection=keys,
            interval_seconds=settings.interval,
            version=package_version(),
            families=selection.families if selection is not None else (),
            canonical_too=always_served(settings),
            label_fields=label_fields(selection),
            hostname_label=settings.dcgm_hostname_label,
        )
        published: list[PollLoop] = []  # the loop, once built: the engine reader follows its GPU pods
        engines = _engine_reader(
            settings,
            attributor,
            lambda: _newest(published[0]) if published else None,
            lambda: published[0].ticks() if published else None,  # each read ends just before a cycle takes it
        )
        poll_loop = PollLoop(
            collector,
            renderer,
            interval=settings.interval,
            node=settings.node_name or "",
            attributor=attributor,
            pods_view=PodsDocumentBuilder(interval_seconds=settings.interval),
            connection_stats=connections.stats,  # the self-metrics of the server's guard and of the process
            process_figures=process_reader(),
            inference=engines.view if engines is not None else None,
        )
        published.append(poll_loop)
        if engines is not None:
            engines.start()
            stack.callback(engines.close)
        asked = requested(selection, settings.dialect, collector.enabled)
        poll_loop.on_publish(UnservedReport(asked, lambda: _newest(poll_loop)))
        asyncio.run(_serve(settings, poll_loop, collector, connections))
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
        settings = load_settings(sys.argv[1:] if argv is None else argv, os.environ if environ is None else environ)
    except SettingsError as error:
        print(f"{PROG}: error: {error}", file=err)
        return 2
    configure_logging(settings.log_level, settings.log_format, err)
    try:
        runner(settings)
    except StartupError as error:
        print(f"{PROG}: error: {error}", file=err)
        return error.code
    return 0
