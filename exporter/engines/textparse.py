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

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

MAX_LINES = 200_000
MAX_WANTED_SAMPLES = 5_000
MAX_LABELS = 32

Labels = tuple[tuple[str, str], ...]


class ExpositionRefusedError(ValueError):
    """The body broke a bound or is not text format; the message says which, in one line."""


@dataclass(frozen=True, slots=True)
class Sample:
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


def _name_end(line: str) -> int:
    """Where the metric name of a sample line ends: at `{`, a space or a tab."""
    end = len(line)
    for stop in ("{", " ", "\t"):
        at = line.find(stop, 0, end)
        if at != -1:
            end = at
    return end


_VALUE_WORDS = {"NaN": math.nan, "+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf}


def parse_value(text: str) -> float:
    """A sample value as the text format spells it (Go's ParseFloat forms, `NaN`, `+Inf`, `-Inf`)."""
    word = _VALUE_WORDS.get(text)
    if word is not None:
        return word
    if "_" in text:  # Python's float() allows digit separators; the format does not
        raise ValueError(text)
    return float(text)


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
        eq = line.find("=", i)
        if eq == -1:
            raise ValueError("a label without '='")
        key = line[i:eq].strip()
        if not key:
            raise ValueError("an empty label name")
        i = eq + 1
        if i >= n or line[i] != '"':
            raise ValueError("a label value without quotes")
        i += 1
        chars: list[str] = []
        while True:
            if i >= n:
                raise ValueError("an unterminated label value")
            c = line[i]
            if c == "\\":
                if i + 1 >= n:
                    raise ValueError("an unterminated escape")
                nxt = line[i + 1]
                chars.append("\n" if nxt == "n" else nxt)
                i += 2
                continue
            if c == '"':
                i += 1
                break
            chars.append(c)
            i += 1
        pairs.append((key, "".join(chars)))
        if len(pairs) > MAX_LABELS:
            raise ValueError(f"more than {MAX_LABELS} labels")
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == ",":
            i += 1
        elif i < n and line[i] == "}":
            return tuple(pairs), i + 1
        else:
            raise ValueError("labels not separated by ','")


def _sample(line: str, name_end: int, name: str) -> Sample:
    labels: Labels = ()
    rest = name_end
    if rest < len(line) and line[rest] == "{":
        labels, rest = _labels(line, rest)
    fields = line[rest:].split()
    if not fields or len(fields) > 2:  # value, and an optional timestamp
        raise ValueError("no value")
    return Sample(name, labels, parse_value(fields[0]))


def _lines(body: str) -> Iterator[str]:
    start = 0
    while True:
        end = body.find("\n", start)
        if end == -1:
            if start < len(body):
                yield body[start:]
            return
        yield body[start:end]
        start = end + 1


def parse_wanted(body: str, wanted: Mapping[str, str], marks: tuple[str, ...] = ()) -> Exposition:
    """The samples of `body` whose name `wanted` maps to a family (`wanted["x_bucket"] == "x"`; others skipped), and
    which of the prefixes `marks` begin some sample's name.

    Malformed lines of wanted families are skipped and counted in nothing (an engine's odd line must not cost the
    others); ExpositionRefusedError when the body has more than MAX_LINES lines or more than MAX_WANTED_SAMPLES wanted
    samples.
    """
    found = Exposition()
    kept = count = 0
    pending = marks
    for count, raw in enumerate(_lines(body), 1):
        if count > MAX_LINES:
            raise ExpositionRefusedError(f"more than {MAX_LINES} lines")
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE" and wanted.get(parts[2]) == parts[2]:
                found.types[parts[2]] = parts[3].strip()
            continue
        end = _name_end(line)
        name = line[:end]
        if pending and name.startswith(pending):  # the first line of an engine's names: noted once
            seen = {m for m in pending if name.startswith(m)}
            found.marks |= seen
            pending = tuple(m for m in pending if m not in seen)
        if name not in wanted:
            continue
        try:
            sample = _sample(line, end, name)
        except ValueError:
            continue
        kept += 1
        if kept > MAX_WANTED_SAMPLES:
            raise ExpositionRefusedError(f"more than {MAX_WANTED_SAMPLES} samples of the engine families read")
        found.samples.setdefault(name, []).append(sample)
    found.lines = count
    return found
