"""The hand-built snapshots of tests/support/snapshots.py cover the whole catalogue, so the exposition tests do."""

from __future__ import annotations

from exporter.catalogue import MEASUREMENTS
from tests.support.snapshots import NATIVE, VECTORS


def test_builders_cover_every_scalar_measurement() -> None:
    scalar = {m.key for m in MEASUREMENTS if not m.vector}
    assert scalar == set(NATIVE), "NATIVE must give a value for every catalogue measurement"
    assert {m.key for m in MEASUREMENTS if m.vector} == set(VECTORS)
