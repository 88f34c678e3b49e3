"""resource.Quantity on the wire: the canonical decimal-SI string apimachinery emits, built from exact decimals.

`canonical_quantity` is what the API serves (`value` of every metric item). `parse_quantity` reads any Quantity string
(decimal SI, binary SI, decimal exponent) back to an exact `Decimal`; the tests use it as the round-trip referee.
Floats never enter: a float figure becomes a Decimal through its shortest repr before it reaches this module.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, ROUND_UP, Context, Decimal, InvalidOperation, localcontext

# The finest step a Quantity keeps; finer non-zero values round away from zero onto it (as ParseQuantity does).
NANO = Decimal("1e-9")

_DECIMAL_SUFFIX_BY_EXPONENT: dict[int, str] = {
    -9: "n",
    -6: "u",
    -3: "m",
    0: "",
    3: "k",
    6: "M",
    9: "G",
    12: "T",
    15: "P",
    18: "E",
}
_EXPONENT_BY_DECIMAL_SUFFIX: dict[str, int] = {v: k for k, v in _DECIMAL_SUFFIX_BY_EXPONENT.items()}
_BINARY_SUFFIXES: dict[str, int] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_QUANTITY = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)$")
_EXPONENT_SUFFIX = re.compile(r"^[eE]([-+]?[0-9]+)$")
# Largest magnitude a binary-SI Quantity may hold: parsing caps it at 2^63-1.
_MAX_INT64 = Decimal(2**63 - 1)


# Decimal digits a float64 holds faithfully (C's DBL_DIG): any decimal of this many significant digits survives a trip
# through a double, so rounding a double to them recovers the decimal it stands for.
FLOAT_DIGITS = 15
# An explicit context (not the thread's, entered per call): a figure is converted per pod and device of every answer.
_FLOAT_DIGITS_CONTEXT = Context(prec=FLOAT_DIGITS, rounding=ROUND_HALF_EVEN)


class QuantityError(ValueError):
    """A string that is not a Kubernetes Quantity, or a value that cannot become one."""


def decimal_from_float(number: float | int) -> Decimal:
    """The decimal a float64 figure stands for: its 15 significant digits, without binary noise.

    80.00000000000001 (0.8 * 100 in doubles) is 80, 60.49999999999999 is 60.5, 1/3 is 0.333333333333333; integers
    stay exact. Serving the noise would turn 80 into "80000000001n", which the HPA reads as 80001m.
    """
    if isinstance(number, int):
        return Decimal(number)
    value = Decimal(repr(number))
    if not value.is_finite():
        raise QuantityError(f"a figure must be finite, got {number!r}")
    return value.normalize(_FLOAT_DIGITS_CONTEXT)  # rounds to the context's digits, then drops trailing zeros


def _round_to_nano(value: Decimal) -> Decimal:
    """Round a non-zero value below nano precision away from zero onto the nano grid; leave others untouched."""
    if value == 0 or value.as_tuple().exponent >= -9:  # type: ignore[operator]
        return value
    with localcontext() as ctx:
        ctx.prec = max(28, len(value.as_tuple().digits) + 12)
        return value.quantize(NANO, rounding=ROUND_UP)


def canonical_quantity(value: Decimal | int) -> str:
    """The canonical string of a decimal-SI Quantity holding `value`, exactly as apimachinery serializes it.

    0 -> "0", 0.85 -> "850m", 85.3 -> "85300m", 2000 -> "2k", 1500 -> "1500", 0.0015 -> "1500u", -0.5 -> "-500m".
    Mantissa without fractional digits and without trailing zeros that a larger suffix could absorb; exponent lowered
    to a multiple of 3; values finer than 1n round away from zero to the next nano step; exponents past 18 ("E") fall
    back to decimal-exponent notation ("1e21"), as current apimachinery does.
    """
    if isinstance(value, int):
        value = Decimal(value)
    if not value.is_finite():
        raise QuantityError(f"a Quantity must be finite, got {value}")
    value = _round_to_nano(value)
    if value == 0:
        return "0"
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite, checked above
    mantissa = int("".join(map(str, digits)))
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3  # Python's modulo is non-negative: lower the exponent to the multiple of 3 below
    mantissa *= 10**shift
    exponent -= shift
    suffix = _DECIMAL_SUFFIX_BY_EXPONENT.get(exponent)
    if suffix is None:
        suffix = f"e{exponent}"
    return f"{'-' if sign else ''}{mantissa}{suffix}"


def parse_quantity(text: str) -> Decimal:
    """The exact value of a Quantity string, as apimachinery's ParseQuantity reads it.

    Accepts `<sign><number><suffix>` with decimal SI (n u m "" k M G T P E), binary SI (Ki .. Ei) or an exponent
    (e3, E-6). Non-zero values finer than 1n round away from zero; binary SI is capped at 2^63-1.
    """
    match = _QUANTITY.match(text)
    if not text or match is None:
        raise QuantityError(f"quantity {text!r} must match '<sign><digits>[.<digits>]<suffix>'")
    sign, whole, fraction, suffix = match.groups()
    if not whole and not fraction:
        raise QuantityError(f"quantity {text!r} has no digits")
    number_text = f"{whole or '0'}.{fraction or '0'}"
    try:
        number = Decimal(number_text)
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only digits
        raise QuantityError(f"quantity {text!r}: unable to parse numeric part") from exc
    binary = False
    with localcontext() as ctx:
        ctx.prec = len(whole) + len(fraction or "") + 40
        if suffix in _EXPONENT_BY_DECIMAL_SUFFIX:
            amount = number.scaleb(_EXPONENT_BY_DECIMAL_SUFFIX[suffix])
        elif suffix in _BINARY_SUFFIXES:
            binary = True
            amount = number * (Decimal(2) ** _BINARY_SUFFIXES[suffix])
        elif (exp_match := _EXPONENT_SUFFIX.match(suffix)) is not None:
            amount = number.scaleb(int(exp_match.group(1)))
        else:
            raise QuantityError(f"quantity {text!r}: unable to parse suffix {suffix!r}")
        if binary and amount > _MAX_INT64:
            amount = _MAX_INT64
        amount = _round_to_nano(amount)
    return amount.copy_negate() if sign == "-" else amount  # exact: unary minus would round to 28 digits
