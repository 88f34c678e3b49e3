"""The limits of toolkit.connections that need no server: flag checks and the open-file limit."""

from __future__ import annotations

import resource

import pytest

from toolkit.connections import ConnectionLimits, ensure_file_limit, files_needed


@pytest.mark.parametrize(
    ("limits", "flag"),
    [
        ({"max_connections": 0}, "--max-connections"),
        ({"header_read_timeout": 0.0}, "--header-read-timeout"),
        ({"idle_timeout": float("inf")}, "--idle-timeout"),
    ],
)
def test_bad_limits_name_their_flag(limits: dict[str, float], flag: str) -> None:
    with pytest.raises(ValueError, match=f"^{flag}: "):
        ConnectionLimits(**limits)  # type: ignore[arg-type]


def test_a_cap_the_open_file_limit_cannot_hold_names_the_flag() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit on open files here")
    with pytest.raises(ValueError, match=r"^--max-connections \d+: needs \d+ open files and the limit is \d+"):
        ensure_file_limit(ConnectionLimits(max_connections=hard))


def test_the_soft_limit_is_raised_to_fit_the_cap() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = files_needed(ConnectionLimits(max_connections=1)) - 1  # what the process holds besides its connections
    wanted = min(soft + 64, hard if hard != resource.RLIM_INFINITY else soft + 64) - room
    try:
        limits = ConnectionLimits(max_connections=max(1, wanted))
        ensure_file_limit(limits)
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= files_needed(limits) == max(1, wanted) + room
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
