"""The part of Go's text/template that prometheus-adapter's templates use, with its `<<` `>>` delimiters.

prometheus-adapter parses `metricsQuery` and `resources.template` with `template.New(...).Delims("<<", ">>")`
(pkg/naming/metrics_query.go, pkg/naming/resource_converter.go). Its docs (docs/config.md) and default rules (the
chart's configmap.yaml, cmd/config-gen/utils/default.go) use plain field actions: `<<.Series>>`, `<<.LabelMatchers>>`,
`<<.GroupBy>>` in queries, `<<.Resource>>` and `<<.Group>>` in resource templates; its tests also use
`<<.GroupBySlice>>`, `<<.LabelValuesByName>>` and `<<index .LabelValuesByName "label">>`
(pkg/naming/metrics_query_test.go). This reads exactly those, with Go's trim markers (`<<-`, `->>`) and comments
(`<</* ... */>>`); any other action (`if`, `range`, pipelines, functions) is refused when the file is read, in one
line naming it, where prometheus-adapter would run it. Values print as Go's fmt prints them: a string as is, a slice
as `[a b]`, a map as `map[k:v]` with its keys sorted.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

LEFT, RIGHT = "<<", ">>"
_SPACE = " \t\r\n"


class TemplateError(ValueError):
    """A template that cannot be read; the message is one line."""


@dataclass(frozen=True, slots=True)
class _Field:
    name: str


@dataclass(frozen=True, slots=True)
class _Index:
    name: str
    key: str


_Part = str | _Field | _Index
Value = str | Sequence[str] | Mapping[str, str]


def _go_text(value: Value) -> str:
    """How Go's fmt prints the value of a template field (text/template prints with fmt.Fprint)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{key}:{value[key]}" for key in sorted(value)) + "]"
    return "[" + " ".join(value) + "]"


@dataclass(frozen=True)
class Template:
    """A parsed template: literal text and the field actions between."""

    source: str
    parts: tuple[_Part, ...]

    @property
    def fields(self) -> frozenset[str]:
        """The fields the template reads."""
        return frozenset(p.name for p in self.parts if not isinstance(p, str))

    def execute(self, values: Mapping[str, Value]) -> str:
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, _Field):
                out.append(_go_text(values[part.name]))
            else:
                table = values[part.name]
                assert isinstance(table, Mapping)
                out.append(table.get(part.key, ""))  # a missing key of a map[string]string is ""
        return "".join(out)


def _action_end(text: str, start: int) -> int:
    """The index of the `>>` closing the action whose body starts at `start` (quoted strings skipped); -1 if none."""
    index = start
    while index < len(text):
        if text.startswith(RIGHT, index):
            return index
        char = text[index]
        if char == '"':
            index += 1
            while index < len(text) and text[index] != '"':
                index += 2 if text[index] == "\\" else 1
        elif char == "`":
            closing = text.find("`", index + 1)
            index = len(text) if closing < 0 else closing
        index += 1
    return -1


def _unquote(token: str) -> str | None:
    """A Go string literal's value ("..." or `...`); None when `token` is not one."""
    if len(token) >= 2 and token[0] == token[-1] == "`":
        return token[1:-1]
    if len(token) >= 2 and token[0] == token[-1] == '"':
        body = token[1:-1]
        if "\\" not in body:
            return body
        try:
            return body.encode("latin-1", "backslashreplace").decode("unicode_escape")
        except UnicodeDecodeError:
            return None
    return None


def _tokens(body: str) -> list[str]:
    tokens: list[str] = []
    index = 0
    while index < len(body):
        if body[index] in _SPACE:
            index += 1
            continue
        start = index
        if body[index] in '"`':
            quote = body[index]
            index += 1
            while index < len(body) and body[index] != quote:
                index += 2 if quote == '"' and body[index] == "\\" else 1
            index += 1
        else:
            while index < len(body) and body[index] not in _SPACE:
                index += 1
        tokens.append(body[start:index])
    return tokens


def parse_template(text: str, fields: Collection[str], maps: Collection[str] = ()) -> Template:
    """Read `text`: literal text and `<<.Field>>` actions for `fields`, `<<.Map>>` and `<<index .Map "key">>` for
    `maps`. TemplateError names the first action it cannot read."""
    parts: list[_Part] = []
    literal: list[str] = []
    index = 0
    trim_next = False
    while True:
        opening = text.find(LEFT, index)
        chunk = text[index:] if opening < 0 else text[index:opening]
        if trim_next:
            chunk = chunk.lstrip(_SPACE)
        if opening < 0:
            literal.append(chunk)
            break
        body_start = opening + len(LEFT)
        if text.startswith("-", body_start) and body_start + 1 < len(text) and text[body_start + 1] in _SPACE:
            chunk = chunk.rstrip(_SPACE)
            body_start += 1
        literal.append(chunk)
        end = _action_end(text, body_start)
        if end < 0:
            raise TemplateError(f"unclosed action at {text[opening : opening + 20]!r}")
        body = text[body_start:end]
        trim_next = len(body) >= 2 and body[-1] == "-" and body[-2] in _SPACE
        if trim_next:
            body = body[:-1]
        index = end + len(RIGHT)
        stripped = body.strip(_SPACE)
        if stripped.startswith("/*") and stripped.endswith("*/"):
            continue  # a comment
        action = _action(stripped, fields, maps)
        if literal:
            parts.append("".join(literal))
            literal = []
        parts.append(action)
    if literal and "".join(literal):
        parts.append("".join(literal))
    return Template(text, tuple(p for p in parts if p != ""))


def _action(body: str, fields: Collection[str], maps: Collection[str]) -> _Field | _Index:
    tokens = _tokens(body)
    readable = ", ".join(f".{name}" for name in sorted({*fields, *maps}))
    if len(tokens) == 1 and tokens[0].startswith(".") and tokens[0][1:] in {*fields, *maps}:
        return _Field(tokens[0][1:])
    if len(tokens) == 3 and tokens[0] == "index" and tokens[1].startswith(".") and tokens[1][1:] in maps:
        key = _unquote(tokens[2])
        if key is not None:
            return _Index(tokens[1][1:], key)
    if len(tokens) == 1 and tokens[0].startswith(".") and tokens[0][1:].isidentifier():
        raise TemplateError(f"<<{body}>> reads no field there is: the fields are {readable}")
    indexed = " or ".join(f'index .{name} "label"' for name in sorted(maps))
    also = f" and {indexed}" if maps else ""
    raise TemplateError(f"<<{body}>> is not an action gpu-pulse reads: it reads {readable}{also}")
