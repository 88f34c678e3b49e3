"""`--collectors FILE`: our list format and dcgm-exporter's counters CSV, read as dcgm-exporter 4.5.3-4.8.2 reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.catalogue import BY_KEY, LABEL_FIELDS, MEASUREMENTS, NEVER_SERVED, NOT_PROVIDED, DcgmFamily, MetricType
from exporter.catalogue.dcgm_exporter_files import FILES, as_csv
from exporter.catalogue.dcgm_fields import EXPORTER_FIELDS, FIELD_IDS
from exporter.collectors_file import (
    BY_FIELD,
    NAME_INDEX,
    Selection,
    SelectionError,
    load_selection,
    parse_selection,
)

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
DCGM_EXP_GPU_HEALTH_STATUS, gauge, Health.
DCGM_FI_DRIVER_VERSION, label, Driver version
DCGM_FI_DEV_SERIAL, label, Serial
"""


def test_dcgm_exporter_counters_csv() -> None:
    selection = parse_selection(DCGM_CSV)
    assert selection.keys == {
        "sm_clock",
        "mem_clock",
        "gpu_util",
        "dec_util",
        "fb_used",
        "total_energy",
        "vgpu_license_status",
    }
    # named once, in file order, with the reason: a DCGM field gpu-pulse has no measurement for, an exporter field
    assert selection.unserved == (
        ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", NOT_PROVIDED),
        ("DCGM_EXP_GPU_HEALTH_STATUS", NEVER_SERVED["DCGM_EXP_GPU_HEALTH_STATUS"][0]),
    )
    assert selection.labels == (("driver_version", "DCGM_FI_DRIVER_VERSION"), ("serial", "DCGM_FI_DEV_SERIAL"))
    by_key = {family.key: family for family in selection.families}
    assert by_key["fb_used"] == DcgmFamily(
        "fb_used", "DCGM_FI_DEV_FB_USED", MetricType.GAUGE, "Memory used (MiB), as reported"
    )
    assert by_key["total_energy"].type is MetricType.COUNTER


def test_our_format_with_keys_names_of_both_dialects_and_comments() -> None:
    text = """
    # what we chart
    gpu_util
    nvidia_gpu_memory_used_bytes   # prometheus dialect name
    DCGM_FI_DEV_POWER_USAGE
    nvidia_gpu_ecc_errors_total    # one family, two measurements
    nvidia_gpu_energy_joules       # a counter by its family name
    DCGM_FI_DEV_PCIE_TX_THROUGHPUT
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
    assert selection.unsupported == ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT",)
    (family,) = selection.families  # a DCGM name in our format: the catalogue's type and help
    assert family == DcgmFamily("power_usage", "DCGM_FI_DEV_POWER_USAGE", MetricType.GAUGE, "Power draw (in W).")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "gpu_utill\n",
            "--collectors line 1: 'gpu_utill' is no dcgm field and no gpu-pulse measurement (did you mean gpu_util?)",
        ),
        (
            "DCGM_FI_DEV_GPU_TEMP, gauge, x\nDCGM_FI_DEV_GPU_UTILL, gauge, x\n",
            "--collectors line 2: 'DCGM_FI_DEV_GPU_UTILL' is no dcgm field and no gpu-pulse measurement (did you "
            "mean DCGM_FI_DEV_GPU_UTIL?)",
        ),
        ("DCGM_FI_DEV_NO_SUCH_FIELD\n", "--collectors line 1: 'DCGM_FI_DEV_NO_SUCH_FIELD' is no dcgm field"),
        ("gpu_util\nDCGM_FI_DEV_GPU_UTIL, histogram, x\n", "--collectors line 2: 'histogram' is not a dcgm-exporter"),
        ("DCGM_FI_DEV_GPU_UTIL,\n", "--collectors line 1: '' is not a dcgm-exporter metric type"),
        ("DCGM_FI_DEV_GPU_TEMP, label, x\n", "--collectors line 1: DCGM_FI_DEV_GPU_TEMP is a measurement, not a label"),
        ("gpu util\n", "--collectors line 1: 'gpu util' is not a measurement name"),
        ("# nothing\n\n", "--collectors: selects no measurement we can export"),
        (
            "DCGM_FI_DEV_PCIE_TX_THROUGHPUT, gauge, x\n",
            "--collectors: selects no measurement we can export (cannot provide: DCGM_FI_DEV_PCIE_TX_THROUGHPUT)",
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


def test_a_field_is_named_as_listed_first_and_once() -> None:
    """dcgm-exporter finds a value's counter by field id, first match (collector/gpu_collector.go findCounterField): a
    field listed twice, or under its current and former name, is published once, as its first line says."""
    selection = parse_selection(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, Throttle reasons\n"
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS, counter, Clock events\n"
        "dcgm_sm_clock, gauge, SM clock frequency (in MHz).\n"
        "DCGM_FI_DEV_SM_CLOCK, counter, again\n"
    )
    assert selection.families == (
        DcgmFamily("clock_event_reasons", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", MetricType.GAUGE, "Throttle reasons"),
        DcgmFamily("sm_clock", "dcgm_sm_clock", MetricType.GAUGE, "SM clock frequency (in MHz)."),
    )


def test_one_dcgm_field_selects_what_both_dialects_publish_of_it() -> None:
    """DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL is DCGM's rate in the dcgm dialect, the two counters it comes from in the
    prometheus dialect; DCGM_FI_DEV_NVLINK_BANDWIDTH_L0 is link 0's rate, and every link's counters."""
    total = parse_selection("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, x\n")
    assert total.keys == {"nvlink_total", "nvlink_tx", "nvlink_rx"}
    assert [family.key for family in total.families] == ["nvlink_total"]
    link = parse_selection("DCGM_FI_DEV_NVLINK_BANDWIDTH_L0, counter, x\n")
    assert link.keys == {"nvlink_bandwidth_l0", "nvlink_link_tx", "nvlink_link_rx"}


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_line_of_dcgm_exporters_files_is_read(name: str) -> None:
    """Each file of the release, every line enabled: every field resolves to a measurement, a label field or a
    reason it is never served; none is an error."""
    selection = parse_selection(as_csv(FILES[name], all_enabled=True))
    for line in FILES[name]:
        fid = FIELD_IDS.get(line.name)
        if line.name in EXPORTER_FIELDS:
            assert dict(selection.unserved)[line.name] == NEVER_SERVED[line.name][0]
        elif line.type == "label":
            assert line.name in dict(selection.labels).values()
        else:
            assert fid is not None and BY_FIELD[fid] <= selection.keys, line.name


# ---- the parser against a model: any mix of entries, spacing, comments ------------------------------------------
OURS = sorted(name for name in NAME_INDEX if name not in FIELD_IDS)  # catalogue keys and prometheus names
LABELS = {f.dcgm_field: f.key for f in LABEL_FIELDS}
DCGM_SERVED = sorted(n for n, fid in FIELD_IDS.items() if fid in BY_FIELD)
DCGM_LABELS = sorted(n for n, fid in FIELD_IDS.items() if fid in LABELS)
DCGM_UNSERVED = sorted(n for n, fid in FIELD_IDS.items() if fid not in BY_FIELD and fid not in LABELS)
blank = st.sampled_from(["", " ", "\t", "  "])
comment_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
    max_size=20,
)
Entry = tuple[str, str, str, str]  # (line, name, type given ("" for our format), help given)


@st.composite
def entries(draw: st.DrawFn) -> Entry:
    kind = draw(st.sampled_from(["ours", "served", "label", "unserved", "exporter", "comment", "blank"]))
    pad1, pad2 = draw(blank), draw(blank)
    pool = {"ours": OURS, "served": DCGM_SERVED, "label": DCGM_LABELS, "unserved": DCGM_UNSERVED}
    pool["exporter"] = list(EXPORTER_FIELDS)
    if kind == "comment":
        return f"{pad1}#{draw(comment_text)}", "", "", ""
    if kind == "blank":
        return pad1, "", "", ""
    name = draw(st.sampled_from(pool[kind]))
    if kind == "ours" or draw(st.booleans()):  # our format: the name alone, maybe with a comment
        trailing = f" # {draw(comment_text)}" if draw(st.booleans()) else ""
        return f"{pad1}{name}{pad2}{trailing}", name, "", ""
    type_ = "label" if kind == "label" else draw(st.sampled_from(["gauge", "counter", "GAUGE"]))
    help_ = draw(comment_text).strip()
    return f"{pad1}{name}{pad2},{pad1}{type_}, {help_}", name, type_.lower(), help_


def model(lines: list[Entry]) -> Selection | None:
    """What the file selects, by dcgm-exporter's rules; None when it selects nothing."""
    keys: set[str] = set()
    families: dict[int, DcgmFamily] = {}
    labels: dict[str, str] = {}
    unserved: dict[str, str] = {}
    for _, name, type_, help_ in lines:
        if not name:
            continue
        fid = FIELD_IDS.get(name)
        if name in EXPORTER_FIELDS:
            unserved.setdefault(name, NEVER_SERVED[name][0])
        elif fid is None:
            keys.update(NAME_INDEX[name])
        elif fid in LABELS:
            labels.setdefault(LABELS[fid], name)
        elif fid not in BY_FIELD:
            unserved.setdefault(name, NOT_PROVIDED)
        else:
            keys.update(BY_FIELD[fid])
            family = next(m for m in MEASUREMENTS if m.dcgm is not None and m.dcgm_fields[:1] == (fid,))
            assert family.dcgm is not None
            kind = MetricType(type_) if type_ else family.dcgm.type
            families.setdefault(fid, DcgmFamily(family.key, name, kind, help_ or family.dcgm.help))
    if not keys and not labels:
        return None
    return Selection(frozenset(keys), tuple(families.values()), tuple(labels.items()), tuple(unserved.items()))


@given(st.lists(entries(), max_size=25), st.sampled_from(["\n", "\r\n"]))
def test_parser_matches_the_model(lines: list[Entry], newline: str) -> None:
    text = newline.join(line for line, _, _, _ in lines)
    expected = model(lines)
    if expected is None:
        with pytest.raises(SelectionError):
            parse_selection(text)
        return
    assert parse_selection(text) == expected


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
        assert measurement.key in parse_selection(measurement.key).keys
