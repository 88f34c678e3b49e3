"""Label selectors: apimachinery's grammar, canonical formatting, matching, and errors that point at the problem."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.selectors import Operator, Requirement, Selector, SelectorError, parse_selector


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("app=x", "app=x"),
        ("app==x", "app==x"),
        ("app!=x", "app!=x"),
        ("app", "app"),
        ("!app", "!app"),
        ("tier in (b,a,a)", "tier in (a,b)"),
        ("tier notin (x)", "tier notin (x)"),
        (" app = x , tier in ( a , b ) ", "app=x,tier in (a,b)"),
        ("z=1,a=2", "a=2,z=1"),  # sorted by key
        ("x in ()", "x in ()"),  # the empty value
        ("x in (a,)", "x in (,a)"),
        ("x in (,,a)", "x in (,a)"),
        ("x=", "x="),
        ("x!=,y", "x!=,y"),
        ("in=notin", "in=notin"),  # keywords are plain words where a key or a value goes
        ("x in (in,notin)", "x in (in,notin)"),
        ("example.com/app=x", "example.com/app=x"),
        ("replicas>3,age<10", "age<10,replicas>3"),
        ("a\t=\nb", "a=b"),
    ],
)
def test_parse_and_format(text: str, canonical: str) -> None:
    selector = parse_selector(text)
    assert str(selector) == canonical
    assert parse_selector(canonical) == selector


@pytest.mark.parametrize(
    ("text", "position", "words"),
    [
        ("a=b c", 5, "found 'c', expected ',' or end of string"),
        ("a in b", 6, "expected '('"),
        ("a in (b", 8, "found end of string"),
        ("a in (b c)", 9, "expected ',' or ')'"),
        (",a", 1, "found ','"),
        ("a,", 3, "expected a label key after ','"),
        ("a,,b", 3, "found ','"),
        ("!", 2, "expected a label key"),
        ("!a=b", 3, "found '='"),
        ("a=(b)", 3, "found '('"),
        ("a b", 3, "found 'b'"),
        ("x/y/z=1", 1, "optional DNS subdomain prefix"),
        ("Example.com/a=1", 1, "prefix part must be a lowercase DNS subdomain"),
        ("/a=1", 1, "prefix part must be non-empty"),
        ("a/=1", 1, "name part must be non-empty"),
        ("-a=1", 1, "name part must consist of"),
        ("a" * 64 + "=1", 1, "no more than 63 characters"),
        ("a=" + "b" * 64, 3, "no more than 63 characters"),
        ("a=-b", 3, "must be empty or consist of"),
        ("a in (ok,b_)", 10, "value 'b_'"),
        ("a>b", 3, "must be an integer"),
        ("a>", 3, "must be an integer"),
        ("a=é", 3, "value 'é'"),
    ],
)
def test_errors_name_the_problem_and_where(text: str, position: int, words: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector(text)
    message = str(caught.value)
    assert f"at character {position}:" in message
    assert words in message
    assert repr(text) in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("app=x", {"app": "x"}, True),
        ("app=x", {"app": "y"}, False),
        ("app=x", {}, False),
        ("app!=x", {}, True),  # != matches objects without the key
        ("app!=x", {"app": "x"}, False),
        ("tier notin (a)", {}, True),
        ("tier in (a,b)", {"tier": "b"}, True),
        ("tier in (a,b)", {}, False),
        ("app", {"app": ""}, True),
        ("!app", {"app": ""}, False),
        ("x=", {"x": ""}, True),
        ("n>3", {"n": "4"}, True),
        ("n>3", {"n": "3"}, False),
        ("n>3", {"n": "four"}, False),
        ("n<3", {}, False),
        ("", {"anything": "at all"}, True),
    ],
)
def test_matching(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_selector(text).matches(labels) is expected


def test_label_selector_object_for_echoing() -> None:
    selector = parse_selector("app=x,tier in (a,b),!gone,n>2,v!=y")
    assert selector.as_label_selector() == {
        "matchLabels": {"app": "x"},
        "matchExpressions": [
            {"key": "gone", "operator": "DoesNotExist"},
            {"key": "n", "operator": "Gt", "values": ["2"]},
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "v", "operator": "NotIn", "values": ["y"]},
        ],
    }
    assert parse_selector("").as_label_selector() is None


# ---- generated selectors ----------------------------------------------------------------------------------------

_alnum = st.sampled_from("abcxyzABZ019")
_inner = st.sampled_from("abz09-_.")


@st.composite
def names(draw: st.DrawFn, max_len: int = 8) -> str:
    first = draw(_alnum)
    if draw(st.booleans()):
        return first
    middle = draw(st.text(_inner, max_size=max_len - 2))
    return first + middle + draw(_alnum)


@st.composite
def keys(draw: st.DrawFn) -> str:
    name = draw(names())
    if draw(st.booleans()):
        return name
    labels = draw(st.lists(st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,4}[a-z0-9])?\Z"), min_size=1, max_size=3))
    return ".".join(labels) + "/" + name


values = st.one_of(st.just(""), names())
integers = st.integers(0, 10**6).map(str)


@st.composite
def requirements(draw: st.DrawFn) -> Requirement:
    key = draw(keys())
    op = draw(st.sampled_from(list(Operator)))
    if op in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
        return Requirement(key, op)
    if op in (Operator.IN, Operator.NOT_IN):
        return Requirement(key, op, tuple(sorted(set(draw(st.lists(values, min_size=1, max_size=4))))))
    if op in (Operator.GREATER_THAN, Operator.LESS_THAN):
        return Requirement(key, op, (draw(integers),))
    return Requirement(key, op, (draw(values),))


selectors = st.lists(requirements(), max_size=5).map(lambda rs: Selector(tuple(sorted(rs, key=lambda r: r.key))))


def _spaced(data: st.DataObject, selector: Selector) -> str:
    """The selector written with arbitrary whitespace around tokens, in any order."""
    space = st.text(" \t", max_size=2)

    def s() -> str:
        return data.draw(space)

    parts = []
    for r in data.draw(st.permutations(selector.requirements)):
        if r.operator is Operator.EXISTS:
            parts.append(f"{s()}{r.key}{s()}")
        elif r.operator is Operator.DOES_NOT_EXIST:
            parts.append(f"{s()}!{s()}{r.key}{s()}")
        elif r.operator in (Operator.IN, Operator.NOT_IN):
            inner = ",".join(f"{s()}{v}{s()}" for v in r.values)
            parts.append(f"{s()}{r.key} {s()}{r.operator.value} {s()}({inner}){s()}")
        else:
            symbol = {Operator.GREATER_THAN: ">", Operator.LESS_THAN: "<"}.get(r.operator, r.operator.value)
            parts.append(f"{s()}{r.key}{s()}{symbol}{s()}{r.values[0]}{s() if r.values[0] else ''}")
    return ",".join(parts)


@given(selectors)
def test_format_then_parse_is_identity(selector: Selector) -> None:
    assert parse_selector(str(selector)) == selector


@given(st.data(), selectors)
def test_whitespace_and_order_do_not_matter(data: st.DataObject, selector: Selector) -> None:
    text = _spaced(data, selector)
    parsed = parse_selector(text)
    assert sorted(map(str, parsed.requirements)) == sorted(map(str, selector.requirements))
    assert parse_selector(str(parsed)) == parsed


def _reference_match(selector: Selector, labels: dict[str, str]) -> bool:
    """The semantics written out plainly, one operator at a time."""
    for r in selector.requirements:
        has, value = r.key in labels, labels.get(r.key)
        if r.operator in (Operator.EQUALS, Operator.DOUBLE_EQUALS) and not (has and value == r.values[0]):
            return False
        if r.operator is Operator.NOT_EQUALS and has and value == r.values[0]:
            return False
        if r.operator is Operator.IN and not (has and value in r.values):
            return False
        if r.operator is Operator.NOT_IN and has and value in r.values:
            return False
        if r.operator is Operator.EXISTS and not has:
            return False
        if r.operator is Operator.DOES_NOT_EXIST and has:
            return False
        if r.operator in (Operator.GREATER_THAN, Operator.LESS_THAN):
            if not has or value is None or not value.isdigit():
                return False
            if r.operator is Operator.GREATER_THAN and not int(value) > int(r.values[0]):
                return False
            if r.operator is Operator.LESS_THAN and not int(value) < int(r.values[0]):
                return False
    return True


@st.composite
def labels_for(draw: st.DrawFn, selector: Selector) -> dict[str, str]:
    """Label maps that hit the selector's keys and values often, so both outcomes get exercised."""
    known_keys = [r.key for r in selector.requirements] + ["other"]
    known_values = [v for r in selector.requirements for v in r.values] + ["", "zz", "5"]
    chosen = draw(st.lists(st.sampled_from(known_keys), unique=True))
    return {k: draw(st.one_of(st.sampled_from(known_values), integers)) for k in chosen}


@given(st.data(), selectors)
def test_matching_agrees_with_the_reference(data: st.DataObject, selector: Selector) -> None:
    labels = data.draw(labels_for(selector))
    assert selector.matches(labels) == _reference_match(selector, labels)
