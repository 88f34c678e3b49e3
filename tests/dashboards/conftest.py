from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.dashboards.livestack import LiveStack, running_stack
from tests.support.tools import require_tool


@pytest.fixture(scope="module")  # its processes stop once the module is done, not at the end of the session
def live_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with running_stack(require_tool("prometheus"), tmp_path_factory.mktemp("live")) as stack:
        yield stack
