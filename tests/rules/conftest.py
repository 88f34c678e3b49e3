from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(scope="session")
def promtool() -> str:
    """The promtool binary; a missing one fails the run under CI and skips the test elsewhere."""
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is required when CI is set (Debian package `prometheus`)")
        pytest.skip("promtool not installed (Debian package `prometheus`)")
    return path
