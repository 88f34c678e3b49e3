"""`gpu-pulse-report`: settings, then one report, then exit. Exit codes: 0 written, 1 Prometheus could not answer
(one line naming the query), 2 a setting or input file the user can fix (one line naming the flag), or the `report`
extra missing (numpy and matplotlib: the services' install and images do without them), 3 the window held no pod
series, so there was nothing to judge (one line naming the series, the Prometheus and the window; the page and
report.json say the same, so that a scheduled run does not pass an empty report off as a verdict)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Sequence

from report.prices import load_prices
from report.progress import TerminalProgress
from report.settings import PROG, load_settings
from report.thresholds import load_thresholds
from report.window import Window
from toolkit.logs import configure_logging
from toolkit.settings import SettingsError


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
    except (SettingsError, ValueError) as exc:  # ValueError: InputError, InputFileError
        return _fail(str(exc), 2)
    try:
        from report import run  # numpy and matplotlib: the `report` extra
    except ImportError as exc:
        return _fail(f"the report needs {exc.name or 'its extra'}: pip install 'gpu-pulse[report]'", 2)
    try:
        connection, kube = run.connect(settings)
    except ValueError as exc:  # KubeConnectionError, an unreadable token or CA file
        return _fail(str(exc), 2)
    window = Window.ending(settings.end if settings.end is not None else time.time(), settings.window_seconds)
    progress = TerminalProgress(sys.stderr, enabled=settings.progress)
    try:
        report = asyncio.run(
            run.report_from(
                connection, window, thresholds, prices, kube_owners=kube, max_points=settings.max_points,
                progress=progress,
            )
        )  # fmt: skip
    except run.PrometheusError as exc:
        return _fail(str(exc), 1)
    try:
        outputs = run.write_outputs(report, settings.output)
    except OSError as exc:
        return _fail(f"--output {settings.output}: cannot write: {exc.strerror or exc}", 2)
    if report.nothing_to_judge is not None:
        return _fail(f"{report.nothing_to_judge}; {outputs.html} says so", 3)
    print(f"wrote {outputs.html} and {outputs.json} ({len(report.workloads)} workloads)", file=sys.stderr)
    return 0
