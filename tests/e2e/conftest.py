"""The end-to-end stack, started once for the run (see stack.py): test_pipeline.py, then test_upgrades.py, on the
same cluster; and the run's timing in the test summary."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.e2e.stack import E2EStack, running_e2e_stack
from tests.support.tools import require_tool

TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2EStack]:
    prometheus = require_tool("prometheus")
    require_tool("kubectl")
    began = time.monotonic()
    with running_e2e_stack(prometheus, tmp_path_factory.mktemp("e2e")) as running:
        TIMINGS.update({"stack ready": running.timings["stack ready"]})
        yield running
        TIMINGS["tests done"] = time.monotonic() - began
    TIMINGS["stopped"] = time.monotonic() - began


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS:
        figures = ", ".join(f"{what} after {seconds:.1f} s" for what, seconds in TIMINGS.items())
        terminalreporter.write_line(f"e2e timing: {figures}")
