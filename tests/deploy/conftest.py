from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.rendering import DEPLOY, OVERLAYS, kustomize
from tests.support.tools import require_tool


@pytest.fixture(scope="session")
def kubectl() -> str:
    return require_tool("kubectl")


@pytest.fixture(scope="session")
def rendered(kubectl: str) -> dict[str, list[dict[str, Any]]]:
    """Every overlay rendered by `kubectl kustomize`, once per session."""
    return {name: kustomize(kubectl, DEPLOY / "overlays" / name) for name in OVERLAYS}
