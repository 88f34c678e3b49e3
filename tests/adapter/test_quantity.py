"""resource.Quantity: canonical strings exactly as apimachinery emits them, values preserved exactly."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.quantity import NANO, QuantityError, canonical_quantity, parse_quantity

# (value, apimachinery's canonical string): apimachinery's pkg/api/resource/quantity.go and its tests.
KNOWN = [
    ("0", "0"),
    ("0.85", "850m"),
    ("85", "85"),
    ("85.3", "85300m"),
    ("100", "100"),
    ("1500", "1500"),
    ("2000", "2k"),
    ("0.0015", "1500u"),
    ("-0.5", "-500m"),
    ("1.5", "1500m"),
    ("0.001", "1m"),
    ("0.000001", "1u"),
    ("0.000000001", "1n"),
    ("1000000", "1M"),
    ("1e9", "1G"),
    ("1e12", "1T"),
    ("1e15", "1P"),
    ("1e18", "1E"),
    ("1e21", "1e21"),  # past "E": decimal-exponent notation, as current apimachinery does
    ("12e20", "1200E"),
    ("0.1", "100m"),
    ("0.01", "10m"),
    ("10", "10"),
    ("1.234", "1234m"),
    ("1.2345", "1234500u"),
    ("123456789", "123456789"),
    ("1234567890", "1234567890"),
    ("-1000", "-1k"),
    ("19.6", "19600m"),
    ("42.000", "42"),
    ("0.9e-9", "1n"),  # below nano: rounds up, away from zero
    ("1.0000000001", "1000000001n"),
    ("-0.0000000001", "-1n"),  # away from zero for negatives too (apimachinery rounds the magnitude)
    ("18446744073709551616", "18446744073709551616"),  # no int64 cap for decimal quantities
    ("18446744073709551616.5", "18446744073709551616500m"),
]


@pytest.mark.parametrize(("value", "expected"), KNOWN)
def test_canonical_form_equals_apimachinerys(value: str, expected: str) -> None:
    assert canonical_quantity(Decimal(value)) == expected


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Ki", "1024"),
        ("1.5Gi", "1610612736"),
        ("1e3", "1000"),
        ("1E-3", "0.001"),
        (".5", "0.5"),
        ("5.", "5"),
        ("+2k", "2000"),
        ("0.9n", "0.000000001"),
        ("8Ei", str(2**63 - 1)),  # binary SI is capped at int64
    ],
)
def test_parser_reads_every_suffix_form(text: str, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", ["", ".", "abc", "1.2.3", "1Q", "1 k", "--1", "1e", "k"])
def test_parser_rejects_what_is_not_a_quantity(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_non_finite_values_are_refused() -> None:
    for value in (Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")):
        with pytest.raises(QuantityError):
            canonical_quantity(value)


decimals = st.decimals(allow_nan=False, allow_infinity=False, min_value=Decimal("-1e25"), max_value=Decimal("1e25"))
on_nano_grid = st.builds(lambda n, e: Decimal(n).scaleb(e), st.integers(-(10**20), 10**20), st.integers(-9, 12))


@given(on_nano_grid)
def test_values_on_the_nano_grid_survive_the_round_trip_exactly(value: Decimal) -> None:
    assert parse_quantity(canonical_quantity(value)) == value


@given(decimals)
def test_finer_values_round_up_by_less_than_one_nano(value: Decimal) -> None:
    back = parse_quantity(canonical_quantity(value))
    assert abs(back) >= abs(value)  # rounded away from zero, never toward it
    assert abs(back - value) < NANO
    assert (back < 0) == (value < 0 and back != 0)


@given(decimals)
def test_canonical_form_is_canonical(value: Decimal) -> None:
    text = canonical_quantity(value)
    number = text.lstrip("-").rstrip("numkMGTPE")
    assert "." not in text
    if "e" in number:
        number = number.split("e")[0]
    assert number == "0" or not number.startswith("0")
    # no larger suffix could take it: the mantissa does not end in 000 unless no larger suffix exists
    assert not number.endswith("000") or text.endswith("E") or "e" in text
    assert canonical_quantity(parse_quantity(text)) == text  # idempotent


@given(on_nano_grid, on_nano_grid)
def test_order_is_preserved(a: Decimal, b: Decimal) -> None:
    qa, qb = parse_quantity(canonical_quantity(a)), parse_quantity(canonical_quantity(b))
    assert (qa < qb) == (a < b)
