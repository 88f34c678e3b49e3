"""metric_names: the names a PromQL expression reads, against expressions built from known parts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rules.promql import PromQLError, metric_names

NAME = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,12}(:[a-z_]{1,8}){0,2}", fullmatch=True).filter(
    lambda n: (
        n.lower() not in {"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring", "inf", "nan"}
        and n.lower() not in {"group_left", "group_right", "atan2"}
    )
)
LABEL = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True)
# label values may hold anything, including brackets, quotes (escaped) and words that look like metric names
VALUE = st.text(alphabet=st.characters(codec="utf-8"), max_size=12).map(
    lambda s: s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
)
DURATION = st.sampled_from(["5m", "1h", "30s", "$__rate_interval", "1h:5m"])


@st.composite
def selector(draw: st.DrawFn) -> tuple[str, set[str]]:
    name = draw(NAME)
    matchers = draw(st.lists(st.tuples(LABEL, st.sampled_from(["=", "!=", "=~", "!~"]), VALUE), max_size=3))
    inner = ", ".join(f'{k}{op}"{v}"' for k, op, v in matchers)
    braces: bool = draw(st.booleans())
    text = f"{name}{{{inner}}}" if matchers or braces else name
    return text, {name}


@st.composite
def expression(draw: st.DrawFn, depth: int = 0) -> tuple[str, set[str]]:
    if depth >= 3:
        return draw(selector())
    kind = draw(st.sampled_from(["selector", "range", "aggregate", "binary", "label_replace", "number_op", "offset"]))
    if kind == "selector":
        return draw(selector())
    if kind == "range":
        text, names = draw(selector())
        func = draw(st.sampled_from(["rate", "increase", "max_over_time", "deriv", "changes"]))
        return f"{func}({text}[{draw(DURATION)}])", names
    if kind == "offset":
        text, names = draw(selector())
        return f"{text} offset {draw(st.sampled_from(['10m', '1h']))}", names
    if kind == "aggregate":
        inner, names = draw(expression(depth + 1))
        op = draw(st.sampled_from(["sum", "max", "avg", "count", "min"]))
        labels = ", ".join(draw(st.lists(LABEL, max_size=4)))
        clause = draw(st.sampled_from(["by", "without"]))
        if draw(st.booleans()):
            return f"{op} {clause} ({labels}) ({inner})", names
        return f"{op}({inner}) {clause} ({labels})", names
    if kind == "label_replace":
        inner, names = draw(expression(depth + 1))
        dst, src = draw(LABEL), draw(LABEL)
        return f'label_replace({inner}, "{dst}", "$1", "{src}", "(.*)")', names
    if kind == "number_op":
        inner, names = draw(expression(depth + 1))
        return (
            f"{inner} {draw(st.sampled_from(['/', '*', '>', '%']))} {draw(st.sampled_from(['100', '1e6', '0.95']))}",
            names,
        )
    left, left_names = draw(expression(depth + 1))
    right, right_names = draw(expression(depth + 1))
    op = draw(st.sampled_from(["+", "-", "/", "*", "and", "or", "unless", "> bool"]))
    matching = ""
    if draw(st.booleans()):
        keys = ", ".join(draw(st.lists(LABEL, min_size=1, max_size=3)))
        matching = f" on ({keys})"
        if op in {"+", "-", "/", "*"} and draw(st.booleans()):
            matching += f" group_left ({draw(LABEL)})"
    return f"({left}) {op}{matching} ({right})", left_names | right_names


@given(expression())
def test_names_of_generated_expressions(case: tuple[str, set[str]]) -> None:
    text, names = case
    assert metric_names(text) == names


def test_known_expressions() -> None:
    assert metric_names('rate(a_total[5m]) / on (x) group_left (y) b{c="d{e}"}') == {"a_total", "b"}
    assert metric_names("timestamp(g) - g > clamp_min(3 * p, 30)") == {"g", "p"}
    assert metric_names("sum(rate(h_bucket[$__rate_interval])) by (le)") == {"h_bucket"}
    assert metric_names("x{name=~`v1beta[12]\\.(custom)`} == 1") == {"x"}
    assert metric_names("node:nvidia_gpu_up:sum / 1e6") == {"node:nvidia_gpu_up:sum"}


@pytest.mark.parametrize("text", ['x{a="b"', "rate(x[5m)", 'x{a="b}'])
def test_unbalanced_expressions_are_refused(text: str) -> None:
    with pytest.raises(PromQLError):
        metric_names(text)
