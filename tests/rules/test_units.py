"""Units the rules rely on: the prometheus dialect publishes base units; the rules convert the dcgm dialect exactly."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.catalogue import MEASUREMENTS, Dialect, Measurement
from rules.dialect import Vocabulary
from rules.series import gap, ramp
from rules.units import BASE, number

SUFFIX_UNIT = {
    "_ratio": "percentunit",
    "_bytes": "bytes",
    "_bytes_total": "bytes",
    "_bytes_per_second": "Bps",
    "_celsius": "celsius",
    "_watts": "watt",
    "_joules_total": "joule",
    "_hertz": "hertz",
}


@pytest.mark.parametrize("measurement", [m for m in MEASUREMENTS if m.prometheus is not None], ids=lambda m: m.key)
def test_prometheus_dialect_publishes_base_units(measurement: Measurement) -> None:
    """A `_watts` series holds watts: the published value is the native value times the base factor."""
    rendering = measurement.prometheus
    assert rendering is not None
    base = BASE[measurement.unit]
    assert Decimal(repr(rendering.scale)) == base.factor, (
        f"{rendering.name} publishes {measurement.unit} x {rendering.scale}, but its base unit needs x {base.factor}"
    )
    for suffix, unit in SUFFIX_UNIT.items():
        if rendering.name.endswith(suffix) and not any(
            rendering.name.endswith(longer) for longer in SUFFIX_UNIT if len(longer) > len(suffix)
        ):
            assert base.grafana == unit, f"{rendering.name}: native unit {measurement.unit!r} is not {unit}"


def test_every_native_unit_has_a_base_unit() -> None:
    assert {m.unit for m in MEASUREMENTS} <= set(BASE)


@pytest.mark.parametrize(
    ("key", "expr"),
    [
        ("gpu_util", "DCGM_FI_DEV_GPU_UTIL / 100"),
        ("fb_used", "DCGM_FI_DEV_FB_USED * 1048576"),
        ("power_usage", "DCGM_FI_DEV_POWER_USAGE"),
        ("total_energy", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION / 1000"),
        ("sm_clock", "DCGM_FI_DEV_SM_CLOCK * 1000000"),
    ],
)
def test_dcgm_values_are_converted_exactly(key: str, expr: str) -> None:
    vocab = Vocabulary.of(Dialect.DCGM)
    assert vocab.to_base_unit(key, vocab.name(key)) == expr


@given(st.decimals(allow_nan=False, allow_infinity=False, places=None))
def test_numbers_are_written_exactly_and_plainly(value: Decimal) -> None:
    text = number(value)
    assert Decimal(text) == value
    assert "E" not in text.upper() and not text.startswith("+")


SERIES = re.compile(r"^(-?[0-9.]+)([+-][0-9.]+)x([0-9]+)$")


@given(
    st.decimals(min_value=-(10**12), max_value=10**12, places=3),
    st.decimals(min_value=-(10**6), max_value=10**6, places=3),
    st.integers(min_value=1, max_value=500),
    st.sampled_from([Decimal(1), Decimal("0.001"), Decimal(1024), Decimal("0.01")]),
)
def test_promtool_series_notation(start: Decimal, step: Decimal, samples: int, scale: Decimal) -> None:
    """`a+bxn` expands to n+1 values a, a+b, ... (promtool's notation), scaled exactly; `_` is a missing sample."""
    text = ramp(str(start), str(step), samples).then(gap()).render(scale)
    series, missing = text.split(" ")
    match = SERIES.match(series)
    assert match, text
    assert Decimal(match.group(1)) == start * scale
    assert Decimal(match.group(2)) == step * scale
    assert int(match.group(3)) == samples - 1
    assert missing == "_"
