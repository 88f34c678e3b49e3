"""`--collectors FILE`: our list format and dcgm-exporter's counters CSV, parsed into catalogue keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.catalogue import BY_KEY, MEASUREMENTS, MetricType
from exporter.collectors_file import NAME_INDEX, Selection, SelectionError, load_selection, parse_selection

# A counters file in dcgm-exporter's format (field names are dcgm-exporter's; the help texts are ours).
DCGM_CSV = """\
# Format,,
# Comment lines start with '#',,
# DCGM FIELD, Prometheus metric type, help message

# Clocks,,
DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock (MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock (MHz).

# Utilization,,
DCGM_FI_DEV_GPU_UTIL,      gauge, GPU busy (%).
DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder busy (%).
# DCGM_FI_DEV_ENC_UTIL,    gauge, commented out: not selected

DCGM_FI_DEV_FB_USED, gauge, Memory used (MiB), as reported
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Energy (mJ).
DCGM_FI_DEV_PCIE_TX_THROUGHPUT,  counter, PCIe bytes sent (KB).
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU licence.
DCGM_FI_DRIVER_VERSION, label, Driver version
DCGM_FI_DEV_SERIAL, label, Serial
"""


def test_dcgm_exporter_counters_csv() -> None:
    selection = parse_selection(DCGM_CSV)
    assert selection.keys == {"sm_clock", "mem_clock", "gpu_util", "dec_util", "fb_used", "total_energy"}
    # named once, in file order: fields we cannot provide (the driver version label we always provide)
    assert selection.unsupported == (
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "DCGM_FI_DEV_SERIAL",
    )


def test_our_format_with_keys_names_of_both_dialects_and_comments() -> None:
    text = """
    # what we chart
    gpu_util
    nvidia_gpu_memory_used_bytes   # prometheus dialect name
    DCGM_FI_DEV_POWER_USAGE
    nvidia_gpu_ecc_errors_total    # one family, two measurements
    nvidia_gpu_energy_joules       # a counter by its family name
    DCGM_FI_DEV_NO_SUCH_FIELD
    """
    selection = parse_selection(text)
    assert selection.keys == {
        "gpu_util",
        "fb_used",
        "power_usage",
        "ecc_sbe_volatile",
        "ecc_dbe_volatile",
        "total_energy",
    }
    assert selection.unsupported == ("DCGM_FI_DEV_NO_SUCH_FIELD",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu_utill\n", "--collectors line 1: unknown measurement 'gpu_utill'"),
        ("gpu_util\nDCGM_FI_DEV_GPU_UTIL, histogram, x\n", "--collectors line 2: 'histogram' is not a dcgm-exporter"),
        ("DCGM_FI_DEV_GPU_UTIL,\n", "--collectors line 1: '' is not a dcgm-exporter metric type"),
        ("gpu util\n", "--collectors line 1: 'gpu util' is not a measurement name"),
        ("# nothing\n\n", "--collectors: selects no measurement we can export"),
        (
            "DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, x\n",
            "--collectors: selects no measurement we can export (cannot provide: DCGM",
        ),
    ],
)
def test_malformed_is_one_clear_line(text: str, message: str) -> None:
    with pytest.raises(SelectionError) as error:
        parse_selection(text)
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)


def test_files(tmp_path: Path) -> None:
    path = tmp_path / "counters.csv"
    path.write_bytes(b"\xef\xbb\xbf" + DCGM_CSV.encode())  # with a UTF-8 byte order mark
    assert load_selection(path).keys >= {"gpu_util"}
    with pytest.raises(SelectionError, match=r"--collectors .*missing.csv: cannot read: "):
        load_selection(tmp_path / "missing.csv")
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00gpu")
    with pytest.raises(SelectionError, match="not a UTF-8 text file"):
        load_selection(binary)


# ---- the parser against a model: any mix of entries, spacing, comments ------------------------------------------
known_names = sorted(NAME_INDEX)
unknown_dcgm = st.from_regex(r"DCGM_FI_[A-Z]{1,8}(_[A-Z0-9]{1,6}){0,3}", fullmatch=True).filter(
    lambda n: n not in NAME_INDEX
)
blank = st.sampled_from(["", " ", "\t", "  "])
comment_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
    max_size=20,
)


@st.composite
def entries(draw: st.DrawFn) -> tuple[str, set[str], list[str], dict[str, MetricType]]:
    """(a line, the keys it selects, the unsupported names it adds, the types its CSV column gives)"""
    kind = draw(st.sampled_from(["ours", "csv", "unknown", "unknown_csv", "label", "comment", "blank"]))
    pad1, pad2 = draw(blank), draw(blank)
    if kind == "ours":
        name = draw(st.sampled_from(known_names))
        trailing = f" # {draw(comment_text)}" if draw(st.booleans()) else ""
        return f"{pad1}{name}{pad2}{trailing}", set(NAME_INDEX[name]), [], {}
    if kind == "csv":
        name = draw(st.sampled_from(known_names))
        help_ = draw(comment_text)
        type_ = draw(st.sampled_from(["gauge", "counter", "GAUGE"]))
        return (
            f"{pad1}{name}{pad2},{pad1}{type_}, {help_}",
            set(NAME_INDEX[name]),
            [],
            dict.fromkeys(NAME_INDEX[name], MetricType(type_.lower())),
        )
    if kind == "unknown":
        name = draw(unknown_dcgm)
        return f"{pad1}{name}{pad2}", set(), [name], {}
    if kind == "unknown_csv":
        name = draw(unknown_dcgm)
        return f"{name}, counter, {draw(comment_text)}", set(), [name], {}
    if kind == "label":
        name = draw(unknown_dcgm)
        return f"{name}, label, {draw(comment_text)}", set(), [name], {}
    if kind == "comment":
        return f"{pad1}#{draw(comment_text)}", set(), [], {}
    return pad1, set(), [], {}


@given(st.lists(entries(), max_size=25), st.sampled_from(["\n", "\r\n"]))
def test_parser_matches_the_model(
    lines: list[tuple[str, set[str], list[str], dict[str, MetricType]]], newline: str
) -> None:
    text = newline.join(line for line, _, _, _ in lines)
    keys = set().union(*(k for _, k, _, _ in lines)) if lines else set()
    unsupported = list(dict.fromkeys(n for _, _, names, _ in lines for n in names))
    types: dict[str, MetricType] = {}
    for _, _, _, given_types in lines:
        types.update(given_types)  # the last line naming a field wins
    if not keys:
        with pytest.raises(SelectionError):
            parse_selection(text)
        return
    assert parse_selection(text) == Selection(frozenset(keys), tuple(unsupported), types)


def test_current_dcgm_field_names_and_the_type_column() -> None:
    """dcgm-exporter 4.x spells the clock events field DCGM_FI_DEV_CLOCKS_EVENT_REASONS; its CSV's type column
    counts."""
    current = parse_selection("DCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, Current clock event reasons\n")
    former = parse_selection("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, Current clock throttle reasons\n")
    assert current.keys == former.keys == {"clock_event_reasons"}
    counted = parse_selection("DCGM_FI_DEV_XID_ERRORS, counter, Value of the last XID error encountered.\n")
    assert dict(counted.types) == {"last_xid": MetricType.COUNTER}
    assert dict(parse_selection("DCGM_FI_DEV_XID_ERRORS\n").types) == {}, "our own format has no type column"


@given(st.text(max_size=200))
def test_garbage_is_a_selection_error_or_a_selection(text: str) -> None:
    try:
        selection = parse_selection(text)
    except SelectionError as error:
        assert "\n" not in str(error)
    else:
        assert selection.keys <= BY_KEY.keys()


def test_every_catalogue_name_is_accepted() -> None:
    for measurement in MEASUREMENTS:
        for rendering in (measurement.dcgm, measurement.prometheus):
            if rendering is not None:
                assert measurement.key in parse_selection(rendering.name).keys
        assert parse_selection(measurement.key).keys == {measurement.key}
