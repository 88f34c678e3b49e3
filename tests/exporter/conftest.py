from __future__ import annotations

import pytest

from tests.exporter.collecting import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    """A wall clock the test steps, for the simulator and the collector."""
    return FakeClock()
