"""GPU prices (`--prices FILE`): an hourly price per GPU model, so GPU-hours become money.

The file is YAML: `currency` (a label, default none) and `per_hour`, a mapping from the model name NVML gives (as
in the `model` label, e.g. "NVIDIA H100 80GB HBM3") to the price of one whole GPU for one hour; `default` prices every
model not listed. Without a file every price is 0 and the report shows hours only. A MIG instance or a time-sliced
share costs its share of the GPU's price (toolkit/migprofiles.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from report.yamlinput import InputError, load_mapping


@dataclass(frozen=True, slots=True)
class Prices:
    per_hour: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    default: float = 0.0
    currency: str = ""

    def of(self, model: str) -> float:
        return self.per_hour.get(model, self.default)

    @property
    def priced(self) -> bool:
        return self.default > 0 or any(v > 0 for v in self.per_hour.values())


def _price(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InputError(f"{where}: expected a price >= 0, got {value!r}")
    return float(value)


def load_prices(path: Path | None) -> Prices:
    if path is None:
        return Prices()
    flag = f"--prices {path}"
    document = load_mapping(path, "--prices")
    unknown = set(document) - {"currency", "per_hour", "default"}
    if unknown:
        raise InputError(f"{flag}: unknown keys {sorted(unknown)} (expected currency, per_hour, default)")
    currency = document.get("currency", "")
    if not isinstance(currency, str) or len(currency) > 16:
        raise InputError(f"{flag}: currency: expected a short text such as USD, got {currency!r}")
    per_hour = document.get("per_hour", {}) or {}
    if not isinstance(per_hour, dict):
        raise InputError(f"{flag}: per_hour: expected a mapping of GPU model to price per hour")
    prices = {str(model): _price(value, f"{flag}: per_hour[{model!r}]") for model, value in per_hour.items()}
    default = _price(document.get("default", 0), f"{flag}: default")
    return Prices(MappingProxyType(prices), default, currency)
