"""Real tools the tests use as referees (promtool, prometheus, kubectl): where they are, or why the test stops."""

from __future__ import annotations

import os
import shutil

import pytest


def require_tool(name: str) -> str:
    """The path of `name`. Missing, it skips the test, except under CI (`CI` set), where it fails: CI installs every
    tool the suite needs (scripts/test.sh), so a missing one there is a broken install, not a reason to skip."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed (scripts/test.sh installs the tools the suite needs)")
        pytest.skip(f"{name} is not installed")
    return path
