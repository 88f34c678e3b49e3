"""The metric names a PromQL expression reads, so the generators can refuse rules and panels over unknown series.

Not a PromQL parser: it removes what cannot hold a metric name (strings, label matchers, durations, label lists of
`by`/`without`/`on`/`ignoring`/`group_left`/`group_right`) and keeps identifiers that are not functions, aggregations,
keywords or numbers. That is exact for the expressions gpu-pulse writes (selectors by name, never `{__name__=...}`).
"""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "offset",
        "bool",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "inf",
        "nan",
        "atan2",
    }
)


class PromQLError(ValueError):
    """An expression this module cannot read (unbalanced brackets or quotes)."""


def metric_names(expr: str) -> frozenset[str]:
    """Names of the series `expr` selects, e.g. `rate(a_total[5m]) / on (x) b` -> {a_total, b}."""
    text = _STRING.sub('""', expr)
    if text.count('"') % 2 or "'" in text or "`" in text:
        raise PromQLError(f"unbalanced quotes in {expr!r}")
    previous = None
    while previous != text:
        previous = text
        text = _MATCHERS.sub(" ", text)
        text = _RANGE.sub(" ", text)
        text = _LABEL_LIST.sub(" ", text)
    if any(c in text for c in "{}[]"):
        raise PromQLError(f"unbalanced brackets in {expr!r}")
    names: set[str] = set()
    for match in _IDENTIFIER.finditer(text):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return frozenset(names)
