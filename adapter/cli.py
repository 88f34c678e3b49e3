"""`gpu-pulse-adapter`: serve custom.metrics.k8s.io and external.metrics.k8s.io until SIGTERM or Ctrl-C.

Exit codes: 0 after a clean stop; 2 for configuration that cannot work (one line on stderr naming the flag or file);
1 when serving fails at run time (e.g. the address is taken).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from adapter.settings import PROG, AdapterSettings, SettingsError, load_settings

log = logging.getLogger("adapter")


class _JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, log_format: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    formatter = (
        _JsonLines() if log_format == "json" else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)


async def run(settings: AdapterSettings) -> int:
    """Build and serve the adapter until SIGTERM/SIGINT. Returns the exit code."""
    from adapter.server import Adapter  # the heavy imports (kubernetes client) only once the flags are good

    try:
        adapter = await Adapter.from_settings(settings)
    except ValueError as exc:  # MetricsConfigError, AuthConfigError, TLSConfigError, KubeConnectionError, ...
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await adapter.serve(stop)
    except OSError as exc:
        print(f"{PROG}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = load_settings(sys.argv[1:] if argv is None else argv, os.environ)
    except SettingsError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    if settings.demo:
        return _run_demo(settings)
    return asyncio.run(run(settings))


def _run_demo(settings: AdapterSettings) -> int:
    from simulation.demo import DEFAULT_LISTEN, DemoOptions, run_demo

    if "log_level" not in settings.model_fields_set:  # the demo's own screen says what happens; logs would tear it
        logging.getLogger().setLevel(logging.WARNING)
    listen = str(settings.listen) if "listen" in settings.model_fields_set else DEFAULT_LISTEN
    try:
        options = DemoOptions(listen=listen, kubeconfig=settings.demo_kubeconfig)
    except ValueError as exc:
        print(f"{PROG}: --demo: {exc}", file=sys.stderr)
        return 2
    return run_demo(options)


if __name__ == "__main__":
    sys.exit(main())
