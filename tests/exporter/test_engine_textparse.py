"""The engine exposition parser reads the wanted samples exactly as prometheus_client's parser (the referee) does, skips
the others, and stops at its bounds."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter.engines.mappings import MARK_PREFIXES, WANTED
from exporter.exposition.textformat import escape_label_value, format_value
from toolkit.textparse import MAX_LINES, MAX_WANTED_SAMPLES, ExpositionRefusedError, _alternation, parse_wanted

NAMES = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "other_family")
label_names = st.sampled_from(("model_name", "engine", "tp_rank", "a_b"))
label_values = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
values = st.one_of(st.floats(allow_nan=False, width=64), st.just(math.nan), st.integers(-(10**12), 10**12).map(float))
samples = st.tuples(st.sampled_from(NAMES), st.dictionaries(label_names, label_values, max_size=3), values)


def render(lines: list[tuple[str, dict[str, str], float]]) -> str:
    out = []
    for name, labels, value in lines:
        inner = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels.items())
        out.append(f"{name}{{{inner}}} {format_value(value)}\n" if inner else f"{name} {format_value(value)}\n")
    return "".join(out)


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@settings(max_examples=200, deadline=None)
@given(st.lists(samples, max_size=30))
def test_reads_what_the_reference_parser_reads(lines: list[tuple[str, dict[str, str], float]]) -> None:
    body = render(lines)
    ours = parse_wanted(body, WANTED, MARK_PREFIXES)
    reference = [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name in WANTED
    ]
    got = [(s.name, dict(s.labels), s.value) for name in ours.samples for s in ours.samples[name]]
    key = lambda t: (t[0], sorted(t[1].items()))  # noqa: E731
    assert len(got) == len(reference)
    for (n1, l1, v1), (n2, l2, v2) in zip(sorted(got, key=key), sorted(reference, key=key), strict=True):
        assert (n1, l1) == (n2, l2)
        assert same(v1, v2)
    assert (ours.mark == "vllm:") == any(n.startswith("vllm:") for n, _, _ in lines)


def test_keeps_the_declared_type_of_wanted_families_only() -> None:
    body = (
        "# HELP vllm:num_requests_waiting Number of requests waiting.\n"
        "# TYPE vllm:num_requests_waiting histogram\n"
        "# TYPE other gauge\n"
        'vllm:num_requests_waiting{model_name="m"} 3.0\n'
    )
    parsed = parse_wanted(body, WANTED, MARK_PREFIXES)
    assert parsed.types == {"vllm:num_requests_waiting": "histogram"}
    assert parsed.of("vllm:num_requests_waiting")[0].value == 3.0


def test_skips_a_malformed_line_and_reads_the_rest() -> None:
    body = 'vllm:num_requests_waiting{model_name="m} 3\nvllm:num_requests_running 2 1700000000000\n'
    parsed = parse_wanted(body, WANTED, MARK_PREFIXES)
    assert parsed.of("vllm:num_requests_waiting") == []
    assert parsed.of("vllm:num_requests_running")[0].value == 2.0


@pytest.mark.parametrize(
    ("line", "value"),
    [
        ("vllm:num_requests_running 2", 2.0),
        ("vllm:num_requests_running 2 1700000000000", 2.0),  # a timestamp
        ("vllm:num_requests_running\t2\t1700000000000  ", 2.0),  # tabs, trailing blanks
        ("vllm:num_requests_running 2\r", 2.0),  # CRLF line ends
        ('vllm:num_requests_running{a="}"} 2', 2.0),  # a brace inside a label value
        ('vllm:num_requests_running{a="x"}2', 2.0),  # no blank after the labels
        ("  vllm:num_requests_running 2", 2.0),  # indented
        ("vllm:num_requests_running", None),  # no value: not a shorter name with a one-character value
        ("vllm:num_requests_running 2 3 4", None),  # more fields than a value and a timestamp
        ('vllm:num_requests_running{a="x" 2', None),  # unterminated labels
        ('vllm:num_requests_running{a="x"}} 2', None),  # text after the labels
        ("vllm:num_requests_running 1_000", None),  # Python's digit separators are not the format's
        ("vllm:num_requests_running2 2", None),  # another name
    ],
)
def test_each_sample_line_shape_is_read_or_skipped_as_the_format_says(line: str, value: float | None) -> None:
    found = parse_wanted(line + "\n", WANTED, MARK_PREFIXES).of("vllm:num_requests_running")
    assert [s.value for s in found] == ([] if value is None else [value])


def test_refuses_more_wanted_samples_than_its_bound() -> None:
    body = "".join(f'vllm:num_requests_waiting{{engine="{i}"}} 1\n' for i in range(MAX_WANTED_SAMPLES + 1))
    with pytest.raises(ExpositionRefusedError, match="samples"):
        parse_wanted(body, WANTED, MARK_PREFIXES)


def test_a_name_that_only_begins_with_a_wanted_one_is_another_name() -> None:
    body = (
        "vllm:num_requests_waiting_total 9\n"
        'vllm:num_requests_waiting{model_name="m"} 3\n'
        "  vllm:num_requests_waiting 4\n"
    )
    found = parse_wanted(body, {"vllm:num_requests_waiting": "vllm:num_requests_waiting"}, ("vllm:", "sglang:"))
    assert [s.value for s in found.of("vllm:num_requests_waiting")] == [3.0, 4.0]
    assert found.mark == "vllm:"


short_names = st.text(alphabet="ab:_", min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(st.sets(short_names, min_size=1, max_size=8), st.lists(short_names, max_size=20))
def test_the_names_alternation_matches_exactly_the_names(names: set[str], others: list[str]) -> None:
    """The trie the scanner is built from: each name, and no other string (a prefix of a name, a name extended)."""
    pattern = re.compile(_alternation(names))
    for text in [*names, *others]:
        assert bool(pattern.fullmatch(text)) == (text in names), text


def test_the_mark_is_the_first_asked_for_that_a_sample_line_shows() -> None:
    marks = ("vllm:", "sglang:", "tgi_")
    sglang_then_vllm = "sglang:num_queue_reqs 1\nvllm:num_requests_waiting 2\n"
    assert parse_wanted(sglang_then_vllm, WANTED, marks).mark == "vllm:"  # the order asked for, not the body's
    renamed = "# TYPE vllm:queue_depth gauge\n  vllm:queue_depth 3\n"  # no wanted name, an indented sample line
    assert parse_wanted(renamed, WANTED, marks).mark == "vllm:"
    comments_only = "# HELP vllm:num_requests_waiting waiting\n# TYPE tgi_queue_size gauge\nother 1\n"
    assert parse_wanted(comments_only, WANTED, marks).mark is None
    assert parse_wanted("tgi_queue_size 4", WANTED, marks).mark == "tgi_"  # the first line, without a newline
    assert parse_wanted("tgi_queue_size 4", {}, marks).mark == "tgi_"  # marks asked for without any wanted name


def test_reads_a_declared_type_spelled_with_tabs_and_crlf_and_not_an_indented_comment() -> None:
    body = "# TYPE\tvllm:num_requests_waiting\tgauge \r\n  # TYPE vllm:num_requests_running counter\n"
    assert parse_wanted(body, WANTED, MARK_PREFIXES).types == {"vllm:num_requests_waiting": "gauge"}


def test_refuses_more_lines_than_its_bound() -> None:
    with pytest.raises(ExpositionRefusedError, match="lines"):
        parse_wanted("\n" * MAX_LINES, WANTED, MARK_PREFIXES)
    assert parse_wanted("\n" * (MAX_LINES - 1) + "vllm:num_requests_waiting 1", WANTED).of("vllm:num_requests_waiting")
