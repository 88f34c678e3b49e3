from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.dashboards.livestack import LiveStack, running_stack


def require_binary(name: str) -> str:
    """A binary of the Debian package `prometheus`: missing, it fails the run under CI and skips elsewhere."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is required when CI is set (Debian package `prometheus`)")
        pytest.skip(f"{name} not installed (Debian package `prometheus`)")
    return path


@pytest.fixture(scope="module")  # its processes stop once the module is done, not at the end of the session
def live_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with running_stack(require_binary("prometheus"), tmp_path_factory.mktemp("live")) as stack:
        yield stack
