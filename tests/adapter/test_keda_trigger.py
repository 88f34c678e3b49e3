"""A gpu-pulse trigger's scalerMetadata: what parses, exactly, and what is refused with the key named."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.keda.trigger import KEDAS, Trigger, TriggerError, parse_trigger
from adapter.selectors import Selector, parse_selector
from tests.adapter.test_selectors import requirements

BASE = {"metric": "gpu_utilization", "podSelector": "app=llm", "target": "60"}


def test_the_four_keys() -> None:
    trigger = parse_trigger(BASE | {"activationTarget": "5.5"})
    assert trigger == Trigger("gpu_utilization", parse_selector("app=llm"), Decimal(60), Decimal("5.5"))
    assert parse_trigger(BASE).activation_target == 0


@pytest.mark.parametrize(
    ("text", "value"),
    [("60", Decimal(60)), ("0.5", Decimal("0.5")), ("1e3", Decimal(1000)), ("40Gi", Decimal(40 * 2**30)),
     ("500m", Decimal("0.5")), (" 75 ", Decimal(75))],
)  # fmt: skip
def test_numbers_are_quantities_read_exactly(text: str, value: Decimal) -> None:
    assert parse_trigger(BASE | {"target": text}).target == value


@pytest.mark.parametrize(
    ("metadata", "key", "words"),
    [
        ({}, "metric", "required"),
        (BASE | {"metric": " "}, "metric", "required"),
        ({k: v for k, v in BASE.items() if k != "podSelector"}, "podSelector", "required"),
        (BASE | {"podSelector": "app in (a"}, "podSelector", "invalid label selector"),
        (BASE | {"podSelector": "!"}, "podSelector", "invalid label selector"),
        (BASE | {"target": "-1"}, "target", "more than 0"),
        (BASE | {"target": "0"}, "target", "more than 0"),
        (BASE | {"target": "NaN"}, "target", "a number such as"),
        (BASE | {"target": "0x10"}, "target", "a number such as"),
        (BASE | {"target": "1e400"}, "target", "at most 1.8e+308"),  # KEDA's double: it was served as inf
        (BASE | {"activationTarget": "2E308"}, "activationTarget", "at most"),
        (BASE | {"activationTarget": "-0.1"}, "activationTarget", "0 or more"),
        (BASE | {"activationTarget": "lots"}, "activationTarget", "a number such as"),
        (BASE | {"activationThreshold": "5"}, "activationThreshold", "unknown key"),
        (BASE | {"targetFromEnv": "60"}, "targetFromEnv", "given twice"),
        (BASE | {"podSelector": "a" * 2000}, "podSelector", "longer than 1024"),
    ],
)
def test_refusals_name_the_key(metadata: dict[str, str], key: str, words: str) -> None:
    with pytest.raises(TriggerError) as refused:
        parse_trigger(metadata)
    assert refused.value.key == key
    assert str(refused.value).startswith(f"scalerMetadata.{key}: ") and words in str(refused.value)


def test_kedas_own_keys_pass_and_from_env_keys_count_as_ours() -> None:
    metadata = dict.fromkeys(KEDAS, "x") | {
        "metricFromEnv": "gpu_power_watts",
        "podSelector": "app=llm",
        "targetFromEnv": "300",
        "enableTLSFromEnv": "true",
    }
    trigger = parse_trigger(metadata)
    assert (trigger.metric, trigger.target) == ("gpu_power_watts", Decimal(300))


def test_an_unknown_key_is_shown_shortened() -> None:
    with pytest.raises(TriggerError) as refused:
        parse_trigger(BASE | {"k" * 5000: "v"})
    assert len(str(refused.value)) < 300


_numbers = st.decimals(min_value=Decimal("0.001"), max_value=Decimal(10**12), places=3, allow_nan=False)


_selectors = st.lists(requirements(), min_size=1, max_size=3).map(
    lambda rs: Selector(tuple(sorted(rs, key=lambda r: r.key)))
)


@given(_selectors, _numbers, _numbers)
def test_what_a_trigger_holds_reads_back_exactly(selector: Selector, target: Decimal, activation: Decimal) -> None:
    metadata = {"metric": "m", "podSelector": str(selector), "target": str(target), "activationTarget": str(activation)}
    trigger = parse_trigger(metadata)
    assert trigger == Trigger("m", selector, target, activation)
    assert trigger.key("ns") == parse_trigger(dict(reversed(metadata.items()))).key("ns")


@given(st.dictionaries(st.sampled_from(["metric", "podSelector", "target", "activationTarget", "x", "targetFromEnv"]),
                       st.text(max_size=30), max_size=6))  # fmt: skip
def test_any_metadata_parses_or_is_refused_with_a_key(metadata: dict[str, str]) -> None:
    try:
        trigger = parse_trigger(metadata)
    except TriggerError as refused:
        assert refused.key in metadata or refused.key in ("metric", "podSelector", "target")
        return
    assert trigger.target > 0 and trigger.activation_target >= 0 and not trigger.selector.empty
    assert math.isfinite(float(trigger.target)) and math.isfinite(float(trigger.activation_target))
