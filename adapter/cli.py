"""`gpu-pulse-adapter` (also `python -m adapter`): serve custom.metrics.k8s.io and external.metrics.k8s.io until
SIGTERM or Ctrl-C.

Exit codes: 0 after a clean stop; 2 for every start-up problem a user can fix (a bad flag, variable or file, an
address that cannot be bound), each one line on stderr, `gpu-pulse-adapter: error: ...`; 1 for a failure at run time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from adapter.settings import PROG, AdapterSettings, load_settings
from toolkit.logs import configure_logging
from toolkit.serving import ListenError, check_listen
from toolkit.settings import SettingsError

log = logging.getLogger("adapter")


async def run(settings: AdapterSettings) -> int:
    """Build and serve the adapter until SIGTERM/SIGINT. Returns the exit code."""
    from adapter.server import Adapter  # the heavy imports (kubernetes client) only once the flags are good

    try:
        check_listen(settings.listen)  # a taken port fails before the API server is asked anything
        adapter = await Adapter.from_settings(settings)
    except (ValueError, ListenError) as exc:  # MetricsConfigError, AuthConfigError, KubeConnectionError, ...
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await adapter.serve(stop)
    except ListenError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = load_settings(sys.argv[1:] if argv is None else argv, os.environ)
    except SettingsError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
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
        options = DemoOptions(
            listen=listen,
            kubeconfig=settings.demo_kubeconfig,
            scale_to_zero=settings.demo_scale_to_zero,
            keda_args=_keda_flags(settings),
            source_args=_given_flags(settings, ("config", "prometheus_", "metrics_")),
        )
    except ValueError as exc:
        print(f"{PROG}: error: --demo: {exc}", file=sys.stderr)
        return 2
    if settings.keda_listen is not None:
        # the demo's adapter binds it in a child process, whose gRPC server would report a taken port in its own
        # words once everything else has started: say it here, in one line, before anything starts
        try:
            check_listen(settings.keda_listen)
        except ListenError as exc:
            reason = str(exc).removeprefix(f"--listen {settings.keda_listen}: ")
            print(f"{PROG}: error: --keda-listen {settings.keda_listen}: {reason}", file=sys.stderr)
            return 2
    return run_demo(options)


def _keda_flags(settings: AdapterSettings) -> tuple[str, ...]:
    """The --keda-* flags the user set, for the demo's adapter (adapter/keda)."""
    return _given_flags(settings, ("keda_",))


def _given_flags(settings: AdapterSettings, prefixes: tuple[str, ...]) -> tuple[str, ...]:
    """The flags the user set whose names start with one of `prefixes`, for the demo's adapter: --keda-* (adapter/keda),
    and --config, --prometheus-*, --metrics-* (a prometheus-adapter configuration served beside the GPU metrics)."""
    flags = []
    for name in sorted(settings.model_fields_set):
        value = getattr(settings, name)
        if not name.startswith(prefixes) or value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + flag[2:])
        else:
            flags.append(f"{flag}={value}")
    return tuple(flags)


if __name__ == "__main__":
    sys.exit(main())
