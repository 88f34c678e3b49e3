"""The end-to-end stack (see stack.py), a fresh one for each test file: test_pipeline.py's timeline (a load change
and a lost GPU at fixed seconds after the exporters start) needs a young cluster, and its last test kills an
exporter, so no file may inherit another's cluster, whatever order and worker pytest-xdist gives the files. The
run's timing per file goes in the test summary."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.e2e.stack import E2EStack, running_e2e_stack
from tests.support.tools import require_tool

TIMINGS: dict[str, dict[str, float]] = {}


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2EStack]:
    prometheus = require_tool("prometheus")
    require_tool("kubectl")
    began = time.monotonic()
    timings = TIMINGS.setdefault(request.module.__name__.rsplit(".", 1)[-1], {})
    with running_e2e_stack(prometheus, tmp_path_factory.mktemp("e2e")) as running:
        timings["stack ready"] = running.timings["stack ready"]
        yield running
        timings["tests done"] = time.monotonic() - began
    timings["stopped"] = time.monotonic() - began


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for module, timings in TIMINGS.items():
        figures = ", ".join(f"{what} after {seconds:.1f} s" for what, seconds in timings.items())
        terminalreporter.write_line(f"e2e timing, {module}: {figures}")
