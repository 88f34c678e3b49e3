"""The two lanes of the suite: the fast lane (`-m "not slow"`: unit and in-process tests) and the slow one.

A test is slow when it starts a child process: a service (exporter, adapter, report CLI, the demo), prometheus,
promtool, kubectl, buildah, chromium, faketime. The files below hold such tests, so each of their tests is marked
`slow` at collection (as are those marked `e2e` or `image`); scripts/test.sh runs the fast lane first, so a unit
failure shows in minutes. A test outside them that starts a process fails, naming this list: the fast lane stays
fast without anyone timing it.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent

# paths relative to tests/: a folder (ending in /) or a file
SLOW_PATHS = (
    "e2e/",
    "adapter/test_demo_inference.py",
    "adapter/test_demo_saturation.py",
    "adapter/test_demo_phases.py",
    "adapter/test_saturation_promql.py",
    "adapter/test_demo_rules.py",
    "controlplane/",
    "adapter/test_demo_run.py",
    "adapter/test_demand.py",
    "adapter/test_demo_zero.py",
    "adapter/test_keda_demo.py",
    "adapter/test_keda_hostile.py",
    "adapter/test_keda_serving.py",
    "adapter/test_kube_auth.py",
    "adapter/test_kube_tables.py",
    "adapter/test_kube_tls.py",
    "adapter/test_kubectl.py",
    "adapter/test_prometheus_source.py",
    "adapter/test_promadapter_prometheus.py",
    "adapter/test_real_exporters.py",
    "adapter/test_settings_cli.py",
    "bench/test_fleet_exposition_capture.py",
    "dashboards/test_hpa_join_order.py",
    "dashboards/test_live_prometheus.py",
    "dashboards/test_namespace_top.py",
    "deploy/test_chart.py",
    "deploy/test_chart_names.py",
    "deploy/test_chart_scheduling.py",
    "deploy/test_chart_values.py",
    "deploy/test_docs_install.py",
    "deploy/test_docs_manifests.py",
    "deploy/test_examples_scale_from_zero.py",
    "deploy/test_images.py",
    "deploy/test_keda_deploy.py",
    "deploy/test_manifests.py",
    "deploy/test_scrape_labels.py",
    "exporter/test_cli.py",
    "exporter/test_cli_logs.py",
    "exporter/test_dcgm_exporter_files.py",
    "exporter/test_engine_reader.py",
    "exporter/test_engines_simulated.py",
    "exporter/test_exposition_prometheus.py",
    "exporter/test_exposition_scenarios.py",
    "exporter/test_simulator_fields.py",
    "report/test_cli.py",
    "report/test_known_history.py",
    "report/test_matches_rules.py",
    "report/test_page.py",
    "rules/test_alerts_can_fire.py",
    "rules/test_rule_files.py",
    "test_cli_parity.py",
    "test_release_workflow.py",
    "toolkit/test_settings.py",
)
SLOW_MARKERS = ("e2e", "image")

# The slow lane's longest files (`pytest -m slow --durations=60`: the image build, the end-to-end stack, the chart's
# and manifests' validation, promtool), handed out first: xdist gives each worker whole files in collection order, so
# a long file started last would keep one core busy after the other is done.
LONGEST_FIRST = (
    "deploy/test_images.py",
    "adapter/test_demo_phases.py",  # three minutes of the demo's traffic phases
    "e2e/test_pipeline.py",
    "deploy/test_docs_install.py",
    "deploy/test_manifests.py",
    "deploy/test_chart.py",
    "deploy/test_chart_names.py",
    "rules/test_rule_files.py",
    "adapter/test_demand.py",
    "adapter/test_demo_zero.py",
    "adapter/test_keda_demo.py",
    "e2e/test_upgrades.py",
    "rules/test_alerts_can_fire.py",
    "exporter/test_cli.py",
)


def is_slow(item: pytest.Item) -> bool:
    path = item.path.resolve().relative_to(TESTS).as_posix()
    listed = any(path == p or (p.endswith("/") and path.startswith(p)) for p in SLOW_PATHS)
    return listed or any(item.get_closest_marker(name) for name in SLOW_MARKERS)


def longest_first(items: list[pytest.Item]) -> None:
    """Reorder `items` in place: the files of LONGEST_FIRST first, in its order; the rest as collected."""
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}

    def key(item: pytest.Item) -> int:
        return rank.get(item.path.resolve().relative_to(TESTS).as_posix(), len(rank))

    items.sort(key=key)  # stable: a file's tests stay together and in their order


def check_listed_paths() -> None:
    """A path that no longer exists (a file moved or renamed) would put its tests in the fast lane unnoticed, or
    one of the longest files at the back of the queue."""
    missing = [p for p in (*SLOW_PATHS, *LONGEST_FIRST) if not (TESTS / p).exists()]
    if missing:
        raise pytest.UsageError(f"tests/lanes.py names what does not exist: {', '.join(missing)}")


class ProcessWatch:
    """Which programs the current fast-lane test started: `subprocess.Popen` records its command line while a test
    is watched (asyncio's child processes are Popen objects too). An audit hook would see the same, but runs on
    every audit event of the interpreter (each open, import, frame lookup) and slowed the whole lane."""

    def __init__(self) -> None:
        self.started: list[str] | None = None  # None: not watching (a slow test, or between tests)
        original = subprocess.Popen.__init__
        watch = self

        @functools.wraps(original)
        def recording(popen: subprocess.Popen[Any], args: Any, *more: Any, **options: Any) -> None:
            if watch.started is not None:
                argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
                watch.started.append(" ".join(os.fsdecode(a) for a in argv)[:200])
            original(popen, args, *more, **options)

        subprocess.Popen.__init__ = recording  # type: ignore[method-assign]

    def watch(self) -> None:
        self.started = []

    def stop(self) -> list[str]:
        started, self.started = self.started or [], None
        return started
