"""The NVML collector's pure parts: MIG profiles, CUDA versions, sample buffers, selection, field values."""

from __future__ import annotations

import threading

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.catalogue import BY_KEY, DEFAULT_MEASUREMENTS, FIELD_SETS
from exporter.collection import HistoryPoint
from exporter.nvml import NVML_MEASUREMENTS, CollectorSettings, enabled_measurements
from exporter.nvml.discovery import as_flag, cuda_version_string
from exporter.nvml.errors import Disposition, ErrorNames, disposition
from exporter.nvml.fields import FIELDS, MAX_LINKS, READ_AS, decoded_entries, field_entries, field_value
from exporter.nvml.history import SampleHistory
from exporter.nvml.probes import probes_for
from exporter.nvml.profiles import profile_from_attributes, profile_from_name

# ---- MIG profiles -------------------------------------------------------------------------------------------------

profiles = st.builds(
    lambda c, g, gb, suffix: f"{f'{c}c.' if c else ''}{g}g.{gb}gb{suffix}",
    st.integers(0, 7),
    st.integers(1, 8),
    st.integers(1, 999),
    st.sampled_from(["", "+me", "+gfx", "+me+gfx"]),
)
models = st.sampled_from(["NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A30"])


@given(models, profiles)
def test_profile_is_read_back_from_any_mig_device_name(model: str, profile: str) -> None:
    assert profile_from_name(f"{model} MIG {profile}") == profile


@given(st.text(max_size=60).filter(lambda s: "MIG" not in s.upper()))
def test_a_name_without_mig_has_no_profile(name: str) -> None:
    assert profile_from_name(name) is None


def test_a_full_gpu_name_has_no_profile() -> None:
    assert profile_from_name("NVIDIA A100-SXM4-40GB") is None
    assert profile_from_name("NVIDIA H100 80GB HBM3 MIG") is None


@pytest.mark.parametrize(
    ("slices", "compute", "mib", "expected"),
    [
        (1, 1, 4864, "1g.5gb"),  # A100 40GB
        (2, 2, 9856, "2g.10gb"),
        (3, 3, 19968, "3g.20gb"),
        (7, 7, 40192, "7g.40gb"),
        (3, 3, 40192, "3g.40gb"),  # A100 80GB
        (1, 1, 9984, "1g.10gb"),  # H100 80GB
        (3, 1, 40320, "1c.3g.40gb"),  # a compute instance smaller than its GPU instance
    ],
)
def test_profile_from_attributes_matches_the_names_nvidia_tools_print(
    slices: int, compute: int, mib: int, expected: str
) -> None:
    assert profile_from_attributes(slices, compute, mib) == expected


@given(st.integers(1, 8), st.integers(0, 8), st.integers(0, 200_000))
def test_a_profile_built_from_attributes_parses_back_from_a_device_name(slices: int, compute: int, mib: int) -> None:
    profile = profile_from_attributes(slices, compute, mib)
    assert profile_from_name(f"NVIDIA H100 80GB HBM3 MIG {profile}") == profile
    assert f"{slices}g." in profile


def test_profile_from_attributes_rejects_a_size_that_is_no_instance() -> None:
    with pytest.raises(ValueError, match="not a MIG instance size"):
        profile_from_attributes(0, 0, 4864)


# ---- identity details ---------------------------------------------------------------------------------------------


@given(st.integers(0, 99), st.integers(0, 9))
def test_cuda_driver_version_reads_as_major_dot_minor(major: int, minor: int) -> None:
    assert cuda_version_string(1000 * major + 10 * minor) == f"{major}.{minor}"


def test_mig_handle_flag_is_read_from_a_c_uint_and_from_an_int() -> None:
    import ctypes

    assert as_flag(ctypes.c_uint(1)) is True
    assert as_flag(ctypes.c_uint(0)) is False
    assert as_flag(1) is True
    assert as_flag(0) is False


# ---- errors -------------------------------------------------------------------------------------------------------


def test_error_rules_by_status_code() -> None:
    assert disposition(pynvml.NVML_ERROR_NOT_SUPPORTED) is Disposition.UNSUPPORTED
    assert disposition(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND) is Disposition.UNSUPPORTED  # an old driver
    assert disposition(pynvml.NVML_ERROR_NO_PERMISSION) is Disposition.NO_PERMISSION
    assert disposition(pynvml.NVML_ERROR_GPU_IS_LOST) is Disposition.LOST
    assert disposition(pynvml.NVML_ERROR_NOT_FOUND) is Disposition.EMPTY
    assert disposition(pynvml.NVML_ERROR_TIMEOUT) is Disposition.TIMEOUT
    assert disposition(pynvml.NVML_ERROR_UNKNOWN) is Disposition.FAILED


def test_error_names_follow_the_pynvml_constants() -> None:
    names = ErrorNames(pynvml)
    assert names(pynvml.NVML_ERROR_GPU_IS_LOST) == "GPU_IS_LOST"
    assert names(pynvml.NVML_ERROR_NO_PERMISSION) == "NO_PERMISSION"
    assert names(pynvml.NVML_ERROR_INSUFFICIENT_POWER) == "INSUFFICIENT_POWER"
    assert names(12345) == "ERROR_12345"


# ---- sample buffers -----------------------------------------------------------------------------------------------


@given(st.lists(st.floats(0, 1e4, allow_nan=False), max_size=50), st.integers(1, 20), st.floats(0, 1e4))
def test_history_keeps_the_newest_points_and_windows_them(times: list[float], capacity: int, since: float) -> None:
    history = SampleHistory(capacity)
    ordered = sorted(times)
    for i, at in enumerate(ordered):
        history.record("GPU-a", HistoryPoint(at, float(i), float(i * 10)))
    kept = [HistoryPoint(at, float(i), float(i * 10)) for i, at in enumerate(ordered)][-capacity:]
    assert history.window("GPU-a", float("-inf")) == tuple(kept)
    assert history.window("GPU-a", since) == tuple(p for p in kept if p.at >= since)
    assert history.window("GPU-other", 0) == ()


def test_history_span_is_fifteen_minutes_at_one_second() -> None:
    assert SampleHistory.for_span(900, 1.0).capacity == 900
    assert SampleHistory.for_span(900, 10.0).capacity == 90


def test_history_forgets_devices_that_are_gone() -> None:
    history = SampleHistory(5)
    history.record("GPU-a", HistoryPoint(1.0, 1.0, 1.0))
    history.record("GPU-b", HistoryPoint(1.0, 1.0, 1.0))
    history.retain(["GPU-b"])
    assert history.window("GPU-a", 0) == ()
    assert len(history.window("GPU-b", 0)) == 1


def test_history_readers_get_consistent_copies_while_a_writer_appends() -> None:
    history = SampleHistory(100)
    stop = threading.Event()
    problems: list[str] = []

    def write() -> None:
        at = 0.0
        while not stop.is_set():
            at += 1.0
            history.record("GPU-a", HistoryPoint(at, at, at))

    def read() -> None:
        for _ in range(2000):
            points = history.window("GPU-a", 0.0)
            if len(points) > 100 or [p.at for p in points] != sorted(p.at for p in points):
                problems.append(f"bad window of {len(points)} points")

    writer = threading.Thread(target=write)
    writer.start()
    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    stop.set()
    writer.join()
    assert problems == []


# ---- selection ----------------------------------------------------------------------------------------------------


def test_every_catalogue_measurement_is_read_from_nvml() -> None:
    assert NVML_MEASUREMENTS == frozenset(BY_KEY)
    # by default the default field set (tests/exporter/test_field_sets.py); every field all but the per-link NVLink
    # figures (18 links x 8 GPUs of series)
    assert enabled_measurements(None) == DEFAULT_MEASUREMENTS
    assert NVML_MEASUREMENTS - FIELD_SETS["all"] == {
        *(f"nvlink_bandwidth_l{link}" for link in range(MAX_LINKS)),
        "nvlink_link_tx",
        "nvlink_link_rx",
    }


@given(st.sets(st.sampled_from(sorted(BY_KEY))))
def test_selection_keeps_exactly_what_was_asked(keys: set[str]) -> None:
    assert enabled_measurements(keys) == frozenset(keys)


def test_selection_names_an_unknown_measurement() -> None:
    with pytest.raises(ValueError, match="unknown measurement 'gpu_utilisation'"):
        enabled_measurements({"gpu_util", "gpu_utilisation"})


def test_unselected_measurements_are_not_read() -> None:
    chosen = probes_for(frozenset({"fb_used", "power_usage"}), mig=False)
    assert [probe.name for probe, _ in chosen] == ["memory", "power_usage"]
    memory_keep = chosen[0][1]
    assert memory_keep == ((0, "fb_used"),)
    assert probes_for(frozenset({"gpu_util"}), mig=True) == []  # MIG instances give memory only


def test_pcie_throughput_and_the_vgpu_license_are_read_every_nth_cycle_and_board_constants_once() -> None:
    table = probes_for(NVML_MEASUREMENTS, mig=False, pcie_every=5, constant_every=60)
    chosen = {probe.name: probe.every for probe, _ in table}
    assert chosen["pcie_tx_throughput"] == chosen["pcie_rx_throughput"] == 5
    assert chosen["vgpu_license"] == 60
    assert chosen["utilization"] == 1
    static = {probe.name for probe, _ in table if probe.static}
    assert static == {"slowdown_threshold", "shutdown_threshold", "gpu_max_threshold"}


def _keys(entries: tuple[tuple[str, int, int], ...]) -> tuple[str, ...]:
    return tuple(key for key, _, _ in entries)


def test_nvlink_total_needs_both_directions_read() -> None:
    assert _keys(field_entries(frozenset({"nvlink_total"}))) == ("nvlink_tx", "nvlink_rx")
    assert _keys(field_entries(frozenset({"memory_temp"}))) == ("memory_temp",)
    assert set(_keys(field_entries(FIELD_SETS["all"], links=18))) == set(FIELDS)


def test_per_link_figures_read_each_link_in_both_directions_up_to_dcgms_18() -> None:
    entries = field_entries(frozenset({"nvlink_bandwidth_l0"}), links=24)
    links = [(field, scope) for key, field, scope in entries if ":" in key]
    assert len(links) == 2 * MAX_LINKS
    assert (138, 0) in links and (139, 17) in links and (138, 18) not in links
    assert field_entries(frozenset({"nvlink_bandwidth_l0"}), links=0) == ()


# ---- field values, decoded from the real pynvml structure ----------------------------------------------------------

_VALUE_TYPES = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: ("dVal", st.floats(-1e12, 1e12, allow_nan=False)),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: ("uiVal", st.integers(0, 2**32 - 1)),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: ("ulVal", st.integers(0, 2**32 - 1)),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: ("ullVal", st.integers(0, 2**53)),
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: ("sllVal", st.integers(-(2**53), 2**53)),
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: ("siVal", st.integers(-(2**31), 2**31 - 1)),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: ("usVal", st.integers(0, 2**16 - 1)),
}


_TYPED = 94  # NVML_FI_DEV_PCIE_REPLAY_COUNTER: a field NVML types (not in READ_AS)


@given(st.sampled_from(sorted(_VALUE_TYPES)).flatmap(lambda t: st.tuples(st.just(t), _VALUE_TYPES[t][1])))
def test_field_values_are_read_from_the_member_their_type_names(case: tuple[int, float]) -> None:
    value_type, value = case
    entry = pynvml.c_nvmlFieldValue_t()
    entry.fieldId = _TYPED
    entry.valueType = value_type
    setattr(entry.value, _VALUE_TYPES[value_type][0], value)
    assert field_value(entry) == pytest.approx(float(value))


@given(
    st.sampled_from(sorted(READ_AS)),
    st.integers(0, 2**53),
    st.sampled_from([*sorted(_VALUE_TYPES), 42]),
    st.integers(0, 2**62),
)
def test_fields_nvml_leaves_untyped_are_read_by_field_id_whatever_the_type_says(
    field: int, value: int, value_type: int, stamp: int
) -> None:
    """NVML leaves the type of the ECC fields (and, on R545, memory temperature) unset: DCGM reads them as unsigned
    long long and unsigned int whatever valueType says (DcgmCacheManager.cpp, NVML Bug 2032468, nvbugs 4300930), and
    so does the exporter, from memory and attribute by attribute."""
    entries = (pynvml.c_nvmlFieldValue_t * 1)()
    entries[0].fieldId = field
    entries[0].valueType = value_type  # 0 (DOUBLE) is what pynvml's zero-filled array says when NVML sets nothing
    entries[0].timestamp = stamp
    if READ_AS[field] == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        value %= 2**32
        entries[0].value.uiVal = value
    else:
        entries[0].value.ullVal = value
    assert field_value(entries[0]) == float(value)
    assert list(decoded_entries(entries)) == list(decoded_entries(list(entries))) == [(0, float(value), stamp)]


def test_a_field_of_unknown_value_type_is_refused() -> None:
    entry = pynvml.c_nvmlFieldValue_t()
    entry.fieldId = _TYPED
    entry.valueType = 42
    with pytest.raises(ValueError, match="unknown NVML value type 42"):
        field_value(entry)


@given(
    st.lists(
        st.sampled_from(sorted(_VALUE_TYPES)).flatmap(lambda t: st.tuples(st.just(t), _VALUE_TYPES[t][1])),
        min_size=1,
        max_size=40,
    ),
    st.integers(0, 2**62),
)
def test_an_answer_decoded_from_memory_reads_as_its_entries_do(cases: list[tuple[int, float]], stamp: int) -> None:
    """pynvml's array is decoded in one pass (nvml.h's nvmlFieldValue_t layout): the same values, codes and
    timestamps as read entry by entry through pynvml's attributes; a refused entry keeps its code."""
    entries = (pynvml.c_nvmlFieldValue_t * len(cases))()
    for i, (value_type, value) in enumerate(cases):
        entries[i].fieldId = _TYPED
        entries[i].valueType = value_type
        entries[i].timestamp = stamp + i
        entries[i].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED if i % 3 == 2 else pynvml.NVML_SUCCESS
        setattr(entries[i].value, _VALUE_TYPES[value_type][0], value)
    expected = [
        (int(e.nvmlReturn), field_value(e) if int(e.nvmlReturn) == 0 else 0.0, int(e.timestamp)) for e in entries
    ]
    assert list(decoded_entries(entries)) == expected
    assert list(decoded_entries(list(entries))) == expected  # not a buffer: attribute by attribute


def test_an_answer_with_an_unknown_value_type_is_refused_in_either_reading() -> None:
    entries = (pynvml.c_nvmlFieldValue_t * 1)()
    entries[0].fieldId = _TYPED
    entries[0].valueType = 42
    for answer in (entries, list(entries)):
        with pytest.raises(ValueError, match="unknown NVML value type 42"):
            list(decoded_entries(answer))


# ---- collector settings --------------------------------------------------------------------------------------------


def test_collector_settings_turn_periods_into_cycles_and_refuse_a_non_positive_interval() -> None:
    settings = CollectorSettings(interval_seconds=2.0, pcie_period_seconds=5.0, constant_period_seconds=60.0)
    assert (settings.pcie_every, settings.constant_every) == (3, 30)
    assert settings.slow_call_deadline == 2.0  # a GPU is stalled after one interval unless told otherwise
    assert CollectorSettings(slow_call_seconds=0.02).slow_call_deadline == 0.02
    assert CollectorSettings(interval_seconds=0.5).pcie_every == 10
    assert CollectorSettings(interval_seconds=10.0).pcie_every == 1
    with pytest.raises(ValueError, match="interval must be positive, got 0"):
        CollectorSettings(interval_seconds=0)
