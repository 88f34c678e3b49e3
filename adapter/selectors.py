"""Kubernetes label selectors: the full string grammar of apimachinery's `labels.Parse`, with precise errors.

    selector    ::= requirement ("," requirement)*           (all must hold; "" selects everything)
    requirement ::= ["!"] KEY [ ("in" | "notin") "(" VALUE ("," VALUE)* ")" | ("=" | "==" | "!=" | ">" | "<") VALUE ]

`k` alone means "k exists", `!k` "k does not exist"; `!=` and `notin` also match objects without the key; `>`/`<`
compare integers. Keys are `[prefix/]name` (prefix a DNS subdomain, name at most 63 characters `[A-Za-z0-9]` with
`-_.` inside); values at most 63 such characters, possibly empty. Whitespace around tokens is ignored.
`str(selector)` gives the canonical form (requirements sorted by key, set values sorted and unique), which parses back
to an equal selector.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum


class Operator(StrEnum):
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


class SelectorError(ValueError):
    """A selector that does not parse or validate; the message names the problem and where it is."""

    def __init__(self, selector: str, position: int, problem: str) -> None:
        super().__init__(f"invalid label selector {selector!r}: at character {position + 1}: {problem}")
        self.selector = selector
        self.position = position
        self.problem = problem


_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_NAME_RULE = "alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"


def key_problem(key: str) -> str | None:
    """Why `key` is not a valid label key (a qualified name), or None when it is."""
    parts = key.split("/")
    if len(parts) > 2:
        return f"key {key!r} must be a name with an optional DNS subdomain prefix and '/', e.g. 'example.com/my-name'"
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return f"key {key!r}: prefix part must be non-empty"
        if len(prefix) > 253:
            return f"key {key!r}: prefix part must be no more than 253 characters"
        if not _DNS_SUBDOMAIN.match(prefix):
            return f"key {key!r}: prefix part must be a lowercase DNS subdomain (e.g. 'example.com')"
    if not name:
        return f"key {key!r}: name part must be non-empty"
    if len(name) > 63:
        return f"key {key!r}: name part must be no more than 63 characters"
    if not _NAME.match(name):
        return f"key {key!r}: name part must consist of {_NAME_RULE}"
    return None


def value_problem(value: str) -> str | None:
    """Why `value` is not a valid label value, or None when it is."""
    if len(value) > 63:
        return f"value {value!r} must be no more than 63 characters"
    if not _VALUE.match(value):
        return f"value {value!r} must be empty or consist of {_NAME_RULE}"
    return None


def _as_int64(text: str) -> int | None:
    if not _INTEGER.match(text):
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One condition on one label key. `values` are sorted and unique (one value for =, ==, !=, >, <; none for
    exists and does-not-exist)."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op in (Operator.IN, Operator.EQUALS, Operator.DOUBLE_EQUALS):
            return self.key in labels and labels[self.key] in self.values
        if op in (Operator.NOT_IN, Operator.NOT_EQUALS):
            return self.key not in labels or labels[self.key] not in self.values
        if op is Operator.EXISTS:
            return self.key in labels
        if op is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        # GREATER_THAN / LESS_THAN: integers on both sides, else no match
        if self.key not in labels:
            return False
        have, want = _as_int64(labels[self.key]), _as_int64(self.values[0])
        if have is None or want is None:
            return False
        return have > want if op is Operator.GREATER_THAN else have < want

    def __str__(self) -> str:
        op = self.operator
        if op is Operator.EXISTS:
            return self.key
        if op is Operator.DOES_NOT_EXIST:
            return f"!{self.key}"
        if op in (Operator.IN, Operator.NOT_IN):
            return f"{self.key} {op.value} ({','.join(self.values)})"
        symbol = {Operator.GREATER_THAN: ">", Operator.LESS_THAN: "<"}.get(op, op.value)
        return f"{self.key}{symbol}{self.values[0]}"


@dataclass(frozen=True, slots=True)
class Selector:
    """All requirements must hold. The empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        requirements = self.requirements
        if len(requirements) == 1:  # the HPA's usual `app=x`
            return requirements[0].matches(labels)
        return all(r.matches(labels) for r in requirements)

    def as_label_selector(self) -> dict[str, object] | None:
        """The metav1.LabelSelector object equivalent to this selector (None when empty); `>`/`<` become the
        `Gt`/`Lt` operators of node selectors, the only spelling Kubernetes has for them."""
        if self.empty:
            return None
        match_labels: dict[str, str] = {}
        expressions: list[dict[str, object]] = []
        operators = {
            Operator.IN: "In",
            Operator.NOT_IN: "NotIn",
            Operator.NOT_EQUALS: "NotIn",
            Operator.EXISTS: "Exists",
            Operator.DOES_NOT_EXIST: "DoesNotExist",
            Operator.GREATER_THAN: "Gt",
            Operator.LESS_THAN: "Lt",
        }
        for r in self.requirements:
            if r.operator in (Operator.EQUALS, Operator.DOUBLE_EQUALS) and r.key not in match_labels:
                match_labels[r.key] = r.values[0]
                continue
            operator = operators.get(r.operator, "In")
            expression: dict[str, object] = {"key": r.key, "operator": operator}
            if r.values:
                expression["values"] = list(r.values)
            expressions.append(expression)
        body: dict[str, object] = {}
        if match_labels:
            body["matchLabels"] = match_labels
        if expressions:
            body["matchExpressions"] = expressions
        return body

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


EVERYTHING = Selector()


# ---- lexer ---------------------------------------------------------------------------------------------------------


class _Tok(Enum):
    END = "end of string"
    IDENT = "identifier"
    IN = "in"
    NOT_IN = "notin"
    OPEN = "("
    CLOSE = ")"
    COMMA = ","
    BANG = "!"
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    GREATER = ">"
    LESS = "<"


_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
_SYMBOLS = {"==": _Tok.DOUBLE_EQUALS, "!=": _Tok.NOT_EQUALS, "=": _Tok.EQUALS, "!": _Tok.BANG}
_SYMBOLS.update({"(": _Tok.OPEN, ")": _Tok.CLOSE, ",": _Tok.COMMA, ">": _Tok.GREATER, "<": _Tok.LESS})
_KEYWORDS = {"in": _Tok.IN, "notin": _Tok.NOT_IN}


@dataclass(frozen=True, slots=True)
class _Item:
    tok: _Tok
    text: str
    at: int  # index of the token's first character in the selector string


def _lex(text: str) -> list[_Item]:
    items: list[_Item] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            items.append(_Item(_Tok.END, "", n))
            return items
        if text[i] in _SPECIAL:
            two = text[i : i + 2]
            symbol = two if two in _SYMBOLS else text[i]
            items.append(_Item(_SYMBOLS[symbol], symbol, i))
            i += len(symbol)
            continue
        start = i
        while i < n and text[i] not in _SPECIAL and text[i] not in _WHITESPACE:
            i += 1
        word = text[start:i]
        items.append(_Item(_KEYWORDS.get(word, _Tok.IDENT), word, start))


# ---- parser --------------------------------------------------------------------------------------------------------

_OPERATOR_TOKENS = {
    _Tok.IN: Operator.IN,
    _Tok.NOT_IN: Operator.NOT_IN,
    _Tok.EQUALS: Operator.EQUALS,
    _Tok.DOUBLE_EQUALS: Operator.DOUBLE_EQUALS,
    _Tok.NOT_EQUALS: Operator.NOT_EQUALS,
    _Tok.GREATER: Operator.GREATER_THAN,
    _Tok.LESS: Operator.LESS_THAN,
}
_EXPECTED_OPERATORS = "'in', 'notin', '=', '==', '!=', '>', '<', ',' or end of string"


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.items = _lex(text)
        self.pos = 0

    def _peek(self, as_value: bool = True) -> _Item:
        item = self.items[self.pos]
        if as_value and item.tok in (_Tok.IN, _Tok.NOT_IN):  # keywords are plain words where a key or value goes
            return _Item(_Tok.IDENT, item.text, item.at)
        return item

    def _next(self, as_value: bool = True) -> _Item:
        item = self._peek(as_value)
        self.pos += 1
        return item

    def _fail(self, item: _Item, expected: str) -> SelectorError:
        found = "end of string" if item.tok is _Tok.END else repr(item.text)
        return SelectorError(self.text, item.at, f"found {found}, expected {expected}")

    def parse(self) -> Selector:
        requirements: list[Requirement] = []
        while True:
            item = self._peek()
            if item.tok is _Tok.END:
                break
            if item.tok not in (_Tok.IDENT, _Tok.BANG):
                raise self._fail(item, "'!' or a label key")
            requirements.append(self._requirement())
            after = self._next()
            if after.tok is _Tok.END:
                break
            if after.tok is not _Tok.COMMA:
                raise self._fail(after, "',' or end of string")
            following = self._peek()
            if following.tok not in (_Tok.IDENT, _Tok.BANG):
                raise self._fail(following, "a label key after ','")
        requirements.sort(key=lambda r: r.key)  # stable: equal keys keep their order
        return Selector(tuple(requirements))

    def _requirement(self) -> Requirement:
        first = self._next()
        negated = first.tok is _Tok.BANG
        key_item = self._next() if negated else first
        if key_item.tok is not _Tok.IDENT:
            raise self._fail(key_item, "a label key")
        key = key_item.text
        if (problem := key_problem(key)) is not None:
            raise SelectorError(self.text, key_item.at, problem)
        following = self._peek()
        if negated:
            return Requirement(key, Operator.DOES_NOT_EXIST)
        if following.tok in (_Tok.END, _Tok.COMMA):
            return Requirement(key, Operator.EXISTS)
        op_item = self._next(as_value=False)
        operator = _OPERATOR_TOKENS.get(op_item.tok)
        if operator is None:
            raise self._fail(op_item, _EXPECTED_OPERATORS)
        if operator in (Operator.IN, Operator.NOT_IN):
            values = self._value_set()
        else:
            values = [self._exact_value()]
        for value, at in values:
            if (problem := value_problem(value)) is not None:
                raise SelectorError(self.text, at, f"{problem} (key {key!r})")
            if operator in (Operator.GREATER_THAN, Operator.LESS_THAN) and _as_int64(value) is None:
                raise SelectorError(self.text, at, f"value {value!r} of '{op_item.text}' must be an integer")
        return Requirement(key, operator, tuple(sorted({v for v, _ in values})))

    def _exact_value(self) -> tuple[str, int]:
        item = self._peek()
        if item.tok in (_Tok.END, _Tok.COMMA):
            return "", item.at
        item = self._next()
        if item.tok is not _Tok.IDENT:
            raise self._fail(item, "a label value")
        return item.text, item.at

    def _value_set(self) -> list[tuple[str, int]]:
        opening = self._next()
        if opening.tok is not _Tok.OPEN:
            raise self._fail(opening, "'('")
        values: list[tuple[str, int]] = []
        expect_value = True  # at the start, and after each comma
        while True:
            item = self._next()
            if item.tok is _Tok.CLOSE:
                if expect_value:  # "()", "(a,)": an empty value
                    values.append(("", item.at))
                return values
            if item.tok is _Tok.COMMA:
                if expect_value:  # "(,a)", "(a,,b)": an empty value
                    values.append(("", item.at))
                expect_value = True
                continue
            if item.tok is _Tok.IDENT and expect_value:
                values.append((item.text, item.at))
                expect_value = False
                continue
            raise self._fail(item, "a label value, ',' or ')'" if expect_value else "',' or ')'")


def parse_selector(text: str) -> Selector:
    """Parse a label selector string; raise SelectorError naming the offending token and its position."""
    return _Parser(text).parse()
