from __future__ import annotations

import pytest

from tests.support.clocks import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    """A wall clock the test steps, for the simulator and the collector."""
    return ManualClock()
