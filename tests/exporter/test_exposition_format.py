"""The text-format tokens: values, label values and HELP, read back by the real parsers of both formats."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.catalogue import MetricType
from exporter.exposition.families import FamilyHeader, plan_families
from exporter.exposition.textformat import escape_label_value, format_value, openmetrics_family

any_text = st.text(st.characters(blacklist_categories=("Cs",)))
any_number = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**70), 2**70) | st.booleans()


@given(any_number)
def test_values_read_back(value: float) -> None:
    text = format_value(value)
    (family,) = parse_text(f"# TYPE x gauge\nx {text}\n")
    parsed = family.samples[0].value
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(parsed)
    elif isinstance(value, float) and not value.is_integer() and math.isfinite(value):
        assert parsed == float(f"{value:.15g}")  # 15 significant digits: all a double holds for certain
        assert math.isclose(parsed, value, rel_tol=5e-15)
    else:
        assert parsed == value  # exactly: integers are written in full
    (om,) = parse_openmetrics(f"# TYPE x gauge\nx {text}\n# EOF\n")
    assert om.samples[0].value == parsed or math.isnan(parsed)


def test_value_spelling() -> None:
    assert format_value(42.0) == "42"
    assert format_value(-0.0) == "0"
    assert format_value(0.1) == "0.1"
    assert format_value(1e300) == "1e+300"
    assert format_value(math.inf) == "+Inf"
    assert format_value(-math.inf) == "-Inf"
    assert format_value(math.nan) == "NaN"
    assert format_value(True) == "1"
    assert format_value(12345678901234567890) == "12345678901234567890"


def test_no_binary_noise() -> None:
    """Arithmetic on sampled figures leaves binary noise that must not reach a scrape."""
    assert format_value(0.7 * 0.3) == "0.21"  # 0.21 in decimal, 0.20999999999999996 as a double
    assert format_value(0.1 + 0.2) == "0.3"
    assert format_value(149.55694936708858) == "149.556949367089"


@given(st.floats(min_value=0, max_value=1e18), st.floats(min_value=0, max_value=1e18))
def test_rounding_keeps_counters_monotone(a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert float(format_value(low)) <= float(format_value(high))


@given(any_text)
def test_label_values_read_back(value: str) -> None:
    line = f'x{{a="{escape_label_value(value)}",b="z"}} 1\n'
    assert "\n" not in line[:-1]
    (family,) = parse_text(f"# TYPE x gauge\n{line}")
    assert family.samples[0].labels == {"a": value, "b": "z"}
    (om,) = parse_openmetrics(f"# TYPE x gauge\n{line}# EOF\n")
    assert om.samples[0].labels == {"a": value, "b": "z"}


# a HELP text starts and ends with a non-blank (parsers of the text format skip blanks around it)
help_texts = any_text.map(str.strip)


@given(help_texts, st.sampled_from([MetricType.GAUGE, MetricType.COUNTER]), st.booleans())
def test_help_reads_back_in_both_formats(help_: str, type_: MetricType, total: bool) -> None:
    name = "x_total" if total else "x"
    header = FamilyHeader.of(name, type_, help_)
    assert header.text.count("\n") == 2 and header.openmetrics.count("\n") == 2
    (family,) = parse_text(header.text + f"{name} 1\n")
    assert family.documentation == help_
    (om,) = parse_openmetrics(header.openmetrics + f"{name} 1\n# EOF\n")
    assert om.documentation == help_


def test_openmetrics_family_names() -> None:
    assert openmetrics_family("nvidia_gpu_energy_joules_total", MetricType.COUNTER) == (
        "nvidia_gpu_energy_joules",
        "counter",
    )
    assert openmetrics_family("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", MetricType.COUNTER) == (
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "unknown",
    )
    assert openmetrics_family("nvidia_gpu_up", MetricType.GAUGE) == ("nvidia_gpu_up", "gauge")


def test_families_sharing_a_name_render_as_one() -> None:
    from exporter.catalogue import Dialect

    plan = {f.header.name: f for f in plan_families(Dialect.PROMETHEUS)}
    ecc = plan["nvidia_gpu_ecc_errors_total"]
    assert [m.key for m in ecc.members] == ["ecc_sbe_volatile", "ecc_dbe_volatile"]
    assert [m.const for m in ecc.members] == [',type="correctable"', ',type="uncorrectable"']
    names = [f.header.name for f in plan_families(Dialect.PROMETHEUS)]
    assert len(names) == len(set(names))


def test_selection_restricts_the_plan() -> None:
    from exporter.catalogue import Dialect

    plan = plan_families(Dialect.DCGM, {"gpu_util", "fb_used"})
    assert [f.header.name for f in plan] == ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"]
