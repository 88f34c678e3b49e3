"""The parts of Go's `regexp` that prometheus-adapter's rules use: compiling a `seriesFilters`/`name.matches` pattern,
and `Regexp.ExpandString`, which fills `name.as` with the capture groups of `name.matches`.

Go's regexp is RE2: it refuses look-around and back-references, which Python's `re` accepts; such a pattern is refused
here as prometheus-adapter refuses it at start ("invalid or unsupported Perl syntax", go/src/regexp/syntax/parse.go).
`expand` follows go/src/regexp/regexp.go (`expand` and `extract`): `$name` or `${name}` (letters, digits, `_`), a number
names a group by index (no leading zeros), `$$` is a `$`, an unknown or unmatched group is empty, and a `$` that starts
no name stays a `$`.
"""

from __future__ import annotations

import re

_MAX_GROUP_NUMBER = 100_000_000  # regexp.go extract: "num >= 1e8" makes the name not a number


class GoRegexpError(ValueError):
    """A pattern Go's regexp refuses; the message says why, as Go's error would."""


def _perl_only(pattern: str) -> str | None:
    """The first construct RE2 refuses that Python's `re` accepts, or None."""
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            if pattern[index + 1] in "123456789":
                return pattern[index : index + 2]  # a back-reference
            index += 2
            continue
        if pattern.startswith(("(?=", "(?!", "(?<=", "(?<!", "(?P="), index):
            return pattern[index : index + 4].rstrip()
        index += 1
    return None


def compile_go(pattern: str) -> re.Pattern[str]:
    """Compile `pattern` as Go's regexp.Compile would accept it (GoRegexpError otherwise)."""
    construct = _perl_only(pattern)
    if construct is not None:
        raise GoRegexpError(f"error parsing regexp: invalid or unsupported Perl syntax: `{construct}`")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise GoRegexpError(f"error parsing regexp: {exc}") from None


def capture_groups(pattern: re.Pattern[str]) -> int:
    """How many capture groups `pattern` has (Go: len(SubexpNames()) - 1)."""
    return pattern.groups


def _extract(text: str) -> tuple[str, int, str] | None:
    """A group name at the start of `text` (after a `$`): (name, number or -1, the rest); None when malformed."""
    brace = text.startswith("{")
    if brace:
        text = text[1:]
    end = 0
    while end < len(text) and (text[end].isalpha() or text[end].isdigit() or text[end] == "_"):
        end += 1
    if end == 0:
        return None
    name = text[:end]
    if brace:
        if end >= len(text) or text[end] != "}":
            return None
        end += 1
    number = 0
    for char in name:
        if not "0" <= char <= "9" or number >= _MAX_GROUP_NUMBER:
            number = -1
            break
        number = number * 10 + ord(char) - ord("0")
    if name[0] == "0" and len(name) > 1:
        number = -1
    return name, number, text[end:]


def expand(template: str, match: re.Match[str]) -> str:
    """Go's `Regexp.ExpandString(nil, template, src, match)` for the match of a compiled pattern."""
    out: list[str] = []
    pattern = match.re
    while template:
        before, dollar, after = template.partition("$")
        if not dollar:
            break
        out.append(before)
        template = after
        if template.startswith("$"):
            out.append("$")
            template = template[1:]
            continue
        extracted = _extract(template)
        if extracted is None:
            out.append("$")  # malformed: the `$` is plain text
            continue
        name, number, template = extracted
        if number >= 0:
            if number <= pattern.groups:
                out.append(match.group(number) or "")
        elif name in pattern.groupindex:
            out.append(match.group(name) or "")
    out.append(template)
    return "".join(out)
