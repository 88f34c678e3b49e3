"""Base units: what one native NVML unit (the catalogue's `Measurement.unit`) is worth in the unit gpu-pulse records.

Recorded series and dashboards use base units (ratios 0-1, bytes, watts, joules, hertz); each dialect publishes the
catalogue's native value times its rendering's `scale`, so `base = published * BASE[unit].factor / scale`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class BaseUnit:
    factor: Decimal  # base value of one native unit
    grafana: str  # Grafana unit id of the base unit
    grafana_rate: str  # Grafana unit id of its per-second rate (counters)


BASE: Mapping[str, BaseUnit] = MappingProxyType(
    {
        "%": BaseUnit(Decimal("0.01"), "percentunit", "percentunit"),
        "B": BaseUnit(Decimal(1), "bytes", "Bps"),
        "KiB": BaseUnit(Decimal(1024), "bytes", "Bps"),
        "KB/s": BaseUnit(Decimal(1024), "Bps", "Bps"),
        "C": BaseUnit(Decimal(1), "celsius", "celsius"),
        "mW": BaseUnit(Decimal("0.001"), "watt", "watt"),
        "mJ": BaseUnit(Decimal("0.001"), "joule", "watt"),
        "ns": BaseUnit(Decimal("0.000000001"), "s", "percentunit"),  # a time counter's rate: the fraction of time
        "MHz": BaseUnit(Decimal(1_000_000), "hertz", "hertz"),
        "count": BaseUnit(Decimal(1), "short", "cps"),
        "rows": BaseUnit(Decimal(1), "short", "cps"),
        "bool": BaseUnit(Decimal(1), "bool", "bool"),
        "xid": BaseUnit(Decimal(1), "none", "none"),
        "bitmask": BaseUnit(Decimal(1), "none", "none"),
        "": BaseUnit(Decimal(1), "none", "none"),
    }
)


def number(value: Decimal) -> str:
    """A decimal in plain notation without trailing zeros (PromQL and promtool read it exactly as written)."""
    text = format(value, "f")  # never rounds (normalize() would, past 28 digits)
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("0", "-0") else text
