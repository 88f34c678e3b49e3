"""The control plane tests' cluster (stack.py), a fresh one for each test file. Every test here is marked
`controlplane` (`pytest -m controlplane` runs them alone), and each file is in tests/lanes.py's slow lane. The
cluster's timings per file go in the test summary."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.controlplane.stack import Cluster, running_cluster

TIMINGS: dict[str, dict[str, float]] = {}


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    began = time.monotonic()
    with running_cluster(tmp_path_factory.mktemp("controlplane")) as running:
        TIMINGS[request.module.__name__.rsplit(".", 1)[-1]] = running.timings
        yield running
    running.timings["stopped"] = time.monotonic() - began


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for module, timings in TIMINGS.items():
        figures = ", ".join(f"{what} after {seconds:.1f} s" for what, seconds in timings.items())
        terminalreporter.write_line(f"controlplane timing, {module}: {figures}")
