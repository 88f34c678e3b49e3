"""Settings for every test: hypothesis without clocks, and the fast and slow lanes (tests/lanes.py).

The suite runs a test file per core, beside end-to-end stacks and image builds that keep those cores busy, so how
long hypothesis takes to draw or run an example says more about the neighbours than about the code. A deadline or a
"generation is slow" health check is a timed assertion, which no unit test makes (speed lives in bench/): both are
off. Every other health check stays."""

from __future__ import annotations

from collections.abc import Generator

import pytest
from hypothesis import HealthCheck, settings

from tests.lanes import ProcessWatch, check_listed_paths, is_slow, longest_first

settings.register_profile("gpu-pulse", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.load_profile("gpu-pulse")

_WATCH = ProcessWatch()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    check_listed_paths()
    for item in items:
        if is_slow(item):
            item.add_marker(pytest.mark.slow)
    longest_first(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    if item.get_closest_marker("slow") is None:
        _WATCH.watch()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        started = _WATCH.stop()
        if started:
            pytest.fail(
                f"a fast-lane test started {len(started)} process(es), first `{started[0]}`: "
                "add its file to SLOW_PATHS in tests/lanes.py",
                pytrace=False,
            )
