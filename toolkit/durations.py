"""Durations written as Prometheus writes them (`7d`, `36h`, `1h30m`, `5m`): the report's `--window`, and the recording
groups' intervals that the dashboards step their panels at."""

from __future__ import annotations

import re

_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> int:
    """`7d`, `36h`, `1h30m`, `90m`, `2w`: seconds. ValueError naming what is accepted."""
    accepted = "a duration such as 7d, 36h or 1h30m (units s, m, h, d, w)"
    if not isinstance(text, str) or not text or _DURATION.sub("", text.strip()):
        raise ValueError(f"expected {accepted}")
    seconds = sum(int(n) * _UNIT[u] for n, u in _DURATION.findall(text.strip()))
    if seconds <= 0:
        raise ValueError(f"expected {accepted}, longer than 0")
    return seconds


def format_duration(seconds: int) -> str:
    """`1h30m` for 5400: the shortest form parse_duration reads back to `seconds`."""
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or "0s"
