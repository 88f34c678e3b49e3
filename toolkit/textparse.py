"""Reading only the wanted families out of a Prometheus text-format (0.0.4) exposition, within bounds.

An engine's `/metrics` is hundreds to thousands of lines, of which a dozen families matter here. The parser splits the
body into lines, skips every line whose metric name is not wanted before looking at its labels, and parses labels and
the value only of the wanted ones. It keeps the `# TYPE` of wanted families (a family of the wrong type is not read as
the one we know) and stops with an `ExpositionRefusedError` when the body breaks a bound: too many lines, or too many
wanted samples (an endpoint serving a million series of a wanted name). Text format 0.0.4 is what prometheus_client
serves by default (https://prometheus.io/docs/instrumenting/exposition_formats/); an OpenMetrics body parses the same
way for the sample lines read here.
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
    marks: set[str] = field(default_factory=set)  # the engine marks (name prefixes) seen on any sample line
    lines: int = 0

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


# a sample line: its name (up to `{`, a space or a tab), its label block (up to the last `}`: neither a value nor a
# timestamp has a brace), its value, and an optional timestamp. The name cannot give characters back to what follows
# (a `{` or a blank must come next), so a line without a value does not match.
_SAMPLE_LINE = re.compile(r"([^{ \t]+)(?:(\{.*\})[ \t]*|[ \t]+)(\S+)(?:[ \t]+\S+)?\s*\Z")


@functools.lru_cache(maxsize=4096)
def _label_block(text: str) -> Labels:
    """The pairs of one `{...}` block. An engine repeats the same blocks read after read (a histogram's buckets):
    each distinct block is parsed once while it stays among the most recent few thousand."""
    labels, rest = _labels(text, 0)
    if rest != len(text):
        raise ValueError("text after the labels")
    return labels


def _by_first_character(prefixes: Iterable[str]) -> dict[str, tuple[str, ...]]:
    grouped: dict[str, list[str]] = {}
    for prefix in prefixes:
        if prefix:
            grouped.setdefault(prefix[0], []).append(prefix)
    return {first: tuple(group) for first, group in grouped.items()}


@functools.lru_cache(maxsize=64)
def _name_prefixes(names: frozenset[str]) -> dict[str, tuple[str, ...]]:
    """The names none of the others begins, by first character: a line whose name is one of `names` begins with one
    of those filed under its first character."""
    roots: list[str] = []
    for name in sorted(names):  # sorted: a name comes right after the names that begin it
        if not roots or not name.startswith(roots[-1]):
            roots.append(name)
    return _by_first_character(roots)


def parse_wanted(body: str, wanted: Mapping[str, str], marks: tuple[str, ...] = ()) -> Exposition:
    """The samples of `body` whose name `wanted` maps to a family (`wanted["x_bucket"] == "x"`; others skipped), and
    which of the prefixes `marks` begin some sample's name.

    Most lines are neither wanted nor a mark: each costs a look-up of its first character and, when some wanted name
    or mark begins with it, one `startswith` over those (in C); only a line that begins with a wanted name is split
    into name, labels and value. Malformed lines of wanted families are skipped too (an engine's odd line must not
    cost the others). ExpositionRefusedError when the body has more than MAX_LINES lines or more than
    MAX_WANTED_SAMPLES wanted samples.
    """
    lines = body.split("\n")
    if len(lines) > MAX_LINES:
        raise ExpositionRefusedError(f"more than {MAX_LINES} lines")
    found = Exposition(lines=len(lines))
    prefixes = _name_prefixes(frozenset(wanted)).get
    pending = _by_first_character(marks)  # the marks not seen yet, by first character
    kept = 0
    for line in lines:
        first = line[:1]
        if first == "#":
            if line.startswith("# TYPE"):
                parts = line.split(None, 3)
                if len(parts) >= 4 and wanted.get(parts[2]) == parts[2]:
                    found.types[parts[2]] = parts[3].strip()
            continue
        if first in (" ", "\t"):  # an indented line: rare, and read the same
            line = line.lstrip(" \t")
            first = line[:1]
            if first == "#":
                continue
        unseen = pending.get(first)
        if unseen is not None and line.startswith(unseen):  # the first line of an engine's names: noted once
            seen = {mark for mark in unseen if line.startswith(mark)}
            found.marks |= seen
            rest = tuple(mark for mark in unseen if mark not in seen)
            if rest:
                pending[first] = rest
            else:
                del pending[first]
        names = prefixes(first)
        if names is None or not line.startswith(names):  # most lines
            continue
        matched = _SAMPLE_LINE.match(line)
        if matched is None:  # malformed: skipped
            continue
        name, block, value = matched.groups()
        if name not in wanted:  # a longer name that begins with a wanted one
            continue
        try:
            sample = Sample(name, _label_block(block) if block else (), parse_value(value))
        except ValueError:
            continue
        kept += 1
        if kept > MAX_WANTED_SAMPLES:
            raise ExpositionRefusedError(f"more than {MAX_WANTED_SAMPLES} samples of the engine families read")
        found.samples.setdefault(name, []).append(sample)
    return found
