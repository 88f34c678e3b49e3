"""The Prometheus text format 0.0.4 and OpenMetrics 1.0 at the level of single tokens: values, label values, HELP.

Both formats share sample lines (`name{labels} value`); they differ in HELP escaping, in how a counter family is named
on its `# TYPE` line, and in the closing `# EOF` of OpenMetrics.
"""

from __future__ import annotations

import math

from exporter.catalogue import MetricType
from toolkit.negotiation import CONTENT_TYPE_OPENMETRICS as CONTENT_TYPE_OPENMETRICS  # written once, for both services
from toolkit.negotiation import CONTENT_TYPE_TEXT as CONTENT_TYPE_TEXT

OPENMETRICS_EOF = "# EOF\n"

_INF = math.inf
# Integral floats below this magnitude print as integers ("42", not "42.0"); beyond it repr's exponent form is shorter
# and exact.
_INT_LIMIT = 1e15
# Other floats are written with 15 significant digits, all a double holds for certain: 0.21, not the 0.20999999999999996
# that arithmetic on sampled figures leaves behind. Rounding is monotone, so counters stay monotone.
_DIGITS = "{:.15g}"


def format_value(value: float) -> str:
    """A sample value as Prometheus reads it: integers without ".0", other floats to 15 significant digits (no binary
    noise), +Inf/-Inf/NaN spelled out."""
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is float:
        if value.is_integer():
            if -_INT_LIMIT < value < _INT_LIMIT:
                return str(int(value))
            return repr(value)
        if value != value:
            return "NaN"
        if value == _INF:
            return "+Inf"
        if value == -_INF:
            return "-Inf"
        return _DIGITS.format(value)
    # bool, numpy scalars, Decimal ...: normalise through float (bool -> 0/1)
    return format_value(float(value))


def escape_label_value(value: str) -> str:
    """Escape a label value for both formats: backslash, double quote and line feed."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def escape_help_text(text: str) -> str:
    """HELP in text format 0.0.4 escapes only backslash and line feed."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def escape_help_openmetrics(text: str) -> str:
    """HELP in OpenMetrics escapes backslash, line feed and double quote."""
    return escape_label_value(text)


def label_pairs(pairs: tuple[tuple[str, str], ...]) -> str:
    """`a="x",b="y"` (no braces) from ordered (name, value) pairs; values escaped."""
    return ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs)


def openmetrics_family(name: str, type_: MetricType) -> tuple[str, str]:
    """The (family name, type) an OpenMetrics `# TYPE` line uses for a family whose samples are called `name`.

    OpenMetrics names a counter family without `_total` and requires its samples to end in `_total`. A counter whose
    sample name does not end in `_total` (dcgm-exporter's names) cannot be an OpenMetrics counter: it is `unknown`.
    """
    if type_ is MetricType.COUNTER:
        if name.endswith("_total"):
            return name[: -len("_total")], "counter"
        return name, "unknown"
    return name, str(type_)


def family_headers(name: str, type_: MetricType, help_: str) -> tuple[str, str]:
    """The `# HELP` and `# TYPE` lines of one family, in text format 0.0.4 and in OpenMetrics."""
    text = f"# HELP {name} {escape_help_text(help_)}\n# TYPE {name} {type_}\n"
    om_name, om_type = openmetrics_family(name, type_)
    om = f"# HELP {om_name} {escape_help_openmetrics(help_)}\n# TYPE {om_name} {om_type}\n"
    return text, om


def counter_value_is_valid(value: float) -> bool:
    """A counter must be a number >= 0: OpenMetrics rejects NaN and negative counters."""
    return value >= 0  # False for NaN as well
