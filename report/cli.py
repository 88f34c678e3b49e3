"""`gpu-pulse-report`: settings, then one report, then exit. Exit codes: 0 written, 1 Prometheus could not answer
(one line naming the query), 2 a setting or input file the user can fix (one line naming the flag)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence

from report.model import Report
from report.owners import KubernetesOwners, OwnerSource
from report.prices import Prices, load_prices
from report.progress import TerminalProgress
from report.prometheus import Connection, PrometheusClient, PrometheusError
from report.settings import PROG, ReportSettings, load_settings
from report.thresholds import Thresholds, load_thresholds
from report.window import Window
from toolkit.credentials import BearerToken, client_ssl_context
from toolkit.logs import configure_logging
from toolkit.settings import SettingsError

log = logging.getLogger("gpu_pulse.report")


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = load_settings(args, os.environ)
        configure_logging(settings.log_level, settings.log_format)
        thresholds = load_thresholds(
            settings.thresholds,
            {
                "idle_utilization": settings.idle_utilization,
                "reclaim_idle_share": settings.reclaim_idle_share,
                "headroom": settings.headroom,
                "share_utilization": settings.share_utilization,
            },
        )
        prices = load_prices(settings.prices)
        connection = Connection(
            url=settings.url,
            token=BearerToken(settings.prometheus_token_file) if settings.prometheus_token_file else None,
            ssl_context=client_ssl_context(settings.prometheus_ca_file),
            timeout=settings.prometheus_timeout,
            max_response_bytes=settings.prometheus_max_response_bytes,
            parallel=settings.prometheus_parallel,
        )
        kube = _kube_owners(settings)
    except SettingsError as exc:
        return _fail(str(exc), 2)
    except ValueError as exc:  # InputError, InputFileError, KubeConnectionError, unreadable token or CA file
        return _fail(str(exc), 2)
    try:
        from report.run import build_report, write_outputs  # the plots need matplotlib: the `report` extra
    except ImportError as exc:
        return _fail(f"the report needs {exc.name or 'its plotting library'}: pip install 'gpu-pulse[report]'", 2)
    window = Window.ending(settings.end if settings.end is not None else time.time(), settings.window_seconds)
    progress = TerminalProgress(sys.stderr, enabled=settings.progress)
    try:
        report = asyncio.run(_report(build_report, settings, connection, window, thresholds, prices, kube, progress))
    except PrometheusError as exc:
        return _fail(str(exc), 1)
    try:
        outputs = write_outputs(report, settings.output)
    except OSError as exc:
        return _fail(f"--output {settings.output}: cannot write: {exc.strerror or exc}", 2)
    print(f"wrote {outputs.html} and {outputs.json} ({len(report.workloads)} workloads)", file=sys.stderr)
    return 0


def _kube_owners(settings: ReportSettings) -> OwnerSource | None:
    if settings.kubeconfig is None:
        return None
    from toolkit.kubeclient import api_client  # the kubernetes client is large: only with --kubeconfig

    return KubernetesOwners(api_client(kubeconfig=settings.kubeconfig))


async def _report(
    build_report: Callable[..., Awaitable[Report]],
    settings: ReportSettings,
    connection: Connection,
    window: Window,
    thresholds: Thresholds,
    prices: Prices,
    kube: OwnerSource | None,
    progress: TerminalProgress,
) -> Report:
    async with PrometheusClient(connection) as client:
        return await build_report(
            client,
            settings.url,
            window,
            thresholds,
            prices,
            kube_owners=kube,
            max_points=settings.max_points,
            progress=progress,
        )
