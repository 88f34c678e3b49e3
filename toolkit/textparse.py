"""Reading only the wanted families out of a Prometheus text-format (0.0.4) exposition, within bounds.

An engine's `/metrics` is hundreds to thousands of lines, of which a dozen families matter here. The parser finds the
lines of the wanted names (and the `# TYPE` lines of the wanted families) in one pass of a regular expression, so the
lines it does not want are walked in C, and parses labels and value only of the ones it wants. It keeps the declared
type of wanted families (a family of the wrong type is not read as the one we know) and stops with an
`ExpositionRefusedError` when the body breaks a bound: too many lines, or too many wanted samples (an endpoint serving
a million series of a wanted name). Text format 0.0.4 is what prometheus_client serves by default
(https://prometheus.io/docs/instrumenting/exposition_formats/); an OpenMetrics body parses the same way for the sample
lines read here.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

MAX_LINES = 200_000
MAX_WANTED_SAMPLES = 5_000
MAX_LABELS = 32

Labels = tuple[tuple[str, str], ...]


class ExpositionRefusedError(ValueError):
    """The body broke a bound or is not text format; the message says which, in one line."""


class Sample(NamedTuple):
    """One sample line read: a tuple, so that the hundred or so of each read cost a tuple each."""

    name: str
    labels: Labels
    value: float

    def label(self, key: str) -> str | None:
        for name, value in self.labels:
            if name == key:
                return value
        return None


@dataclass(slots=True)
class Exposition:
    """The wanted samples, and the types the body declared for the wanted families."""

    samples: dict[str, list[Sample]] = field(default_factory=dict)  # by sample name (`x_bucket`, `x_total`, ...)
    types: dict[str, str] = field(default_factory=dict)  # family name -> declared type
    mark: str | None = None  # the first of the marks asked for that begins some sample line's name

    def of(self, name: str) -> list[Sample]:
        return self.samples.get(name, [])


_VALUE_WORDS = {"NaN": math.nan, "+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf}


def parse_value(text: str) -> float:
    """A sample value as the text format spells it (Go's ParseFloat forms, `NaN`, `+Inf`, `-Inf`)."""
    word = _VALUE_WORDS.get(text)
    if word is not None:
        return word
    if "_" in text:  # Python's float() allows digit separators; the format does not
        raise ValueError(text)
    return float(text)


# one `name="value"` pair and what follows it (`,` or `}`); a value is any run of non-quote characters and escapes
_PAIR = re.compile(r'[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(,?)[ \t]*(\}?)')
_ESCAPE = re.compile(r"\\(.)")


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value) if "\\" in value else value


def _labels(line: str, start: int) -> tuple[Labels, int]:
    """The label pairs of `{...}` starting at `start` (the `{`), and the index after the `}`."""
    pairs: list[tuple[str, str]] = []
    i = start + 1
    n = len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == "}":
            return tuple(pairs), i + 1
        found = _PAIR.match(line, i)
        if found is None:
            raise ValueError("a malformed label")
        pairs.append((found.group(1), _unescape(found.group(2))))
        if len(pairs) > MAX_LABELS:
            raise ValueError(f"more than {MAX_LABELS} labels")
        i = found.end()
        if found.group(4):
            return tuple(pairs), i
        if not found.group(3):
            raise ValueError("labels not separated by ','")


_Trie = dict[str, "_Trie"]  # a character -> what follows it; "" -> {} where a name ends


def _alternation(names: Iterable[str]) -> str:
    """A regex alternative for exactly `names`, as a trie (`vllm:(?:num_requests_(?:running|waiting)|...)`): Python's
    regex engine tries the branches of an alternation one by one, so a line that begins with none of the names is
    turned away after the characters it shares with them, not once per name. A name that others extend is tried after
    them (its empty branch comes last)."""
    root: _Trie = {}
    for name in names:
        node = root
        for character in name:
            node = node.setdefault(character, {})
        node[""] = {}

    def branches(node: _Trie) -> str:
        out = [re.escape(character) + branches(child) for character, child in sorted(node.items()) if character]
        if "" in node:
            out.append("")
        return out[0] if len(out) == 1 else "(?:" + "|".join(out) + ")"

    return branches(root)


@functools.lru_cache(maxsize=64)
def _scanner(names: frozenset[str], families: frozenset[str]) -> re.Pattern[str]:
    """Finds, at the start of a line (the text is given a leading newline), either the `# TYPE` line of one of
    `families` (groups 1, 2: family, type) or a sample line of one of `names` (groups 3-5: name, label block, value):
    the name, then its label block (up to the last `}` of the line: neither a value nor a timestamp has a brace) or a
    blank, the value, an optional timestamp, and nothing but blanks to the end of the line. A name must be followed by
    `{` or a blank, so a longer name that begins with a wanted one is not it, and a line without a value is no
    match."""
    sample = r"[ \t]*(" + _alternation(names) + r")(?:(\{[^\n]*\})[ \t]*|[ \t]+)(\S+)(?:[ \t]+\S+)?[^\S\n]*(?=\n)"
    declared = r"# TYPE[ \t]+(" + (_alternation(families) if families else "(?!)") + r")[ \t]+([^\n]*)"
    return re.compile(r"\n(?:" + declared + "|" + sample + ")")


@functools.lru_cache(maxsize=64)
def _line_beginning(prefix: str) -> re.Pattern[str]:
    """A sample line (indented or not) whose name begins with `prefix`."""
    return re.compile(r"\n[ \t]*" + re.escape(prefix))


@functools.lru_cache(maxsize=4096)
def _label_block(text: str) -> Labels:
    """The pairs of one `{...}` block. An engine repeats the same blocks read after read (a histogram's buckets):
    each distinct block is parsed once while it stays among the most recent few thousand."""
    labels, rest = _labels(text, 0)
    if rest != len(text):
        raise ValueError("text after the labels")
    return labels


def parse_wanted(body: str, wanted: Mapping[str, str], marks: tuple[str, ...] = ()) -> Exposition:
    """The samples of `body` whose name `wanted` maps to a family (`wanted["x_bucket"] == "x"`; others skipped), the
    declared types of those families, and the first of `marks` (in the order given) that begins some sample's name.

    One regex pass over the body finds the wanted lines (the regex engine walks the others in C; only a wanted line
    costs Python work: its labels and value). A malformed line of a wanted family is skipped (an engine's odd line must
    not cost the others). A mark is looked for in the body only when no earlier mark begins a wanted sample's name,
    so a body of the first engine costs no more pass. ExpositionRefusedError when the body has more than MAX_LINES
    lines or more than MAX_WANTED_SAMPLES wanted samples.
    """
    if len(body) >= MAX_LINES and body.count("\n") >= MAX_LINES:
        raise ExpositionRefusedError(f"more than {MAX_LINES} lines")
    found = Exposition()
    text = "\n" + body + "\n"
    families = frozenset(name for name, family in wanted.items() if name == family)
    samples = found.samples
    kept = 0
    for match in _scanner(frozenset(wanted), families).finditer(text) if wanted else ():
        family, declared, name, block, value = match.groups()
        if family is not None:  # a `# TYPE` line of a wanted family
            if declared.strip():
                found.types[family] = declared.strip()
            continue
        try:
            sample = Sample(name, _label_block(block) if block else (), parse_value(value))
        except ValueError:
            continue
        kept += 1
        if kept > MAX_WANTED_SAMPLES:
            raise ExpositionRefusedError(f"more than {MAX_WANTED_SAMPLES} samples of the engine families read")
        samples.setdefault(name, []).append(sample)
    for mark in marks:
        if any(name.startswith(mark) for name in samples) or _line_beginning(mark).search(text):
            found.mark = mark
            break
    return found
