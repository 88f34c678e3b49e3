from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from exporter.catalogue import Dialect
from report.cli import main
from tests.report.known_history import WINDOW_HOURS, backfill
from tests.support.processes import ChildProcesses
from tests.support.prometheus import PrometheusServer, start_prometheus, wait_ready
from tests.support.tools import require_tool


@dataclass(frozen=True)
class KnownPrometheus:
    server: PrometheusServer
    end: int  # the window's end, on the hour

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def window(self) -> str:
        return f"{WINDOW_HOURS}h"


@pytest.fixture(scope="package")
def known(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnownPrometheus]:
    """A real Prometheus holding tests/report/known_history.py's history (backfilled with promtool): the window
    ends on the hour before the last one, so the blocks lie within Prometheus' retention and before its head."""
    promtool, prometheus = require_tool("promtool"), require_tool("prometheus")
    workdir = tmp_path_factory.mktemp("known")
    end = int(time.time()) // 3600 * 3600 - 3600
    backfill(promtool, workdir, workdir / "tsdb-known", end)
    processes = ChildProcesses(workdir)
    try:
        server = start_prometheus(
            prometheus, {"global": {"scrape_interval": "1m"}}, workdir, processes, "known", Dialect.PROMETHEUS
        )
        wait_ready(server, 60)
        yield KnownPrometheus(server, end)
    finally:
        processes.stop_all()


@pytest.fixture
def output(tmp_path: Path) -> Path:
    return tmp_path / "report"


def run_report(known: KnownPrometheus, output: Path, *extra: str) -> dict[str, Any]:
    code = main(
        [
            *("--prometheus-url", known.url, "--window", known.window),
            *("--end", str(known.end), "--output", str(output)),
            *extra,
        ]
    )
    assert code == 0
    document: dict[str, Any] = json.loads((output / "report.json").read_text(encoding="utf-8"))
    return document


def by_workload(document: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(w["namespace"], w["kind"], w["name"]): w for w in document["workloads"]}


@pytest.fixture(scope="package")
def document(known: KnownPrometheus, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """report.json of the report over the known history, workloads from kube-state-metrics' history."""
    return run_report(known, tmp_path_factory.mktemp("report"))
