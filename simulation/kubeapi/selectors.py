"""Label and field selectors, as this test server reads them (equality, set and existence forms).

The adapter has the full grammar in `adapter.selectors`; the simulator cannot import it, and needs less.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

_SET_TERM = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_TERM = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_EXISTS_TERM = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")

Predicate = Callable[[Mapping[str, str]], bool]


class SelectorError(ValueError):
    pass


def _split_terms(selector: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return [t for t in terms if t.strip()]


def _label_term(term: str) -> Predicate:
    if m := _SET_TERM.match(term):
        key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _EQ_TERM.match(term):
        key, op, value = m.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _EXISTS_TERM.match(term):
        negate, key = m.group(1) == "!", m.group(2)
        return lambda labels: (key in labels) != negate
    raise SelectorError(f"unable to parse requirement: {term!r}")


def label_predicate(selector: str | None) -> Predicate:
    """A label selector (equality, set and existence forms) as a predicate over a label map."""
    terms = [_label_term(t) for t in _split_terms(selector or "")]
    return lambda labels: all(t(labels) for t in terms)


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return "" if node is None else str(node)


def field_predicate(
    selector: str | None, supported: frozenset[str] | None = None
) -> Callable[[Mapping[str, Any]], bool]:
    """A field selector (`path=value`, `path==value`, `path!=value`, comma-joined) as a predicate over an object.

    `supported`: the field paths the resource can be selected by (None: any); another is an error, as kube-apiserver
    answers `field label not supported: <path>`.
    """
    terms: list[tuple[str, bool, str]] = []
    for term in _split_terms(selector or ""):
        m = _EQ_TERM.match(term)
        if m is None:
            raise SelectorError(f"invalid field selector: {term!r}")
        if supported is not None and m.group(1) not in supported:
            raise SelectorError(f"field label not supported: {m.group(1)}")
        terms.append((m.group(1), m.group(2) != "!=", m.group(3)))
    return lambda obj: all((_field_value(obj, p) == v) == eq for p, eq, v in terms)
