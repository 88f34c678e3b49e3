"""Durations as prometheus-adapter's flags take them: Go's time.ParseDuration (`1m`, `30s`, `1h30m`, `1.5m`, `500ms`).

prometheus-adapter declares `--metrics-relist-interval` and `--metrics-max-age` with pflag's DurationVar
(cmd/adapter/adapter.go), which reads them with time.ParseDuration (go/src/time/format.go): a sequence of decimal
numbers, each with a unit of ns, us (or µs), ms, s, m or h; "0" alone is zero. Plain seconds are accepted too ("60"),
as every other gpu-pulse flag takes seconds.
"""

from __future__ import annotations

import re

_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: object) -> float:
    """Seconds; ValueError naming what is accepted."""
    accepted = "a duration such as 1m, 30s or 1h30m (units ns, us, ms, s, m, h), or seconds"
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        raise ValueError(f"expected {accepted}")
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-")
    try:
        return sign * float(body)  # plain seconds
    except ValueError:
        pass
    if not body or _PART.sub("", body):
        raise ValueError(f"expected {accepted}")
    return sign * sum(float(number) * _UNIT[unit] for number, unit in _PART.findall(body))
