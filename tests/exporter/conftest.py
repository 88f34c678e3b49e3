from __future__ import annotations

from collections.abc import Iterator

import pytest

from exporter.attribution.pods_builder import PodsDocumentBuilder
from tests.support.clocks import ManualClock
from tests.support.snapshots import SimulatedNode, simulated_node


@pytest.fixture
def clock() -> ManualClock:
    """A wall clock the test steps, for the simulator and the collector."""
    return ManualClock()


@pytest.fixture
def node() -> Iterator[SimulatedNode]:
    """A simulated H100x8 node with the exporter's `/pods` builder, on a clock the test steps; nothing polled yet."""
    with simulated_node("h100x8", pods_view=PodsDocumentBuilder(interval_seconds=1.0), clock=ManualClock()) as node:
        yield node
