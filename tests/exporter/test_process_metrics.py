"""The exporter's `process_*` series: the six prometheus-client writes, with its names, types and HELP texts, read
back by both parsers, whatever the figures."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.exposition import ExpositionRenderer
from exporter.exposition.textformat import format_value
from exporter.snapshot import Snapshot
from toolkit.process import PROCESS_SERIES, ProcessFigures, process_reader

SIX = {
    "process_cpu_seconds_total",
    "process_virtual_memory_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_open_fds",
    "process_max_fds",
}


def _rendered(figures: ProcessFigures | None) -> tuple[str, str]:
    rendered = ExpositionRenderer().render(Snapshot(taken_at=1.0, node="n", devices=(), process=figures))
    return rendered.text.decode(), rendered.openmetrics.decode()


def test_the_six_series_are_read_from_this_process() -> None:
    figures = process_reader()()
    assert {name for name, _ in figures.values} == SIX == set(PROCESS_SERIES)
    assert (figures.get("process_resident_memory_bytes") or 0) > 1_000_000
    open_fds, max_fds = figures.get("process_open_fds"), figures.get("process_max_fds")
    assert open_fds is not None and max_fds is not None and 3 <= open_fds <= max_fds
    started = figures.get("process_start_time_seconds")
    assert started is not None and time.time() - 3600 < started <= time.time()
    assert figures.get("process_cpu_seconds_total") is not None


def test_families_read_as_prometheus_clients_own() -> None:
    """Names, types and HELP as prometheus-client's exposition of its process collector has them."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    theirs = {f.name: (f.type, f.documentation) for f in parse_text(generate_latest(registry).decode())}
    text, openmetrics = _rendered(process_reader()())
    ours = {f.name: (f.type, f.documentation) for f in parse_text(text) if f.name.startswith("process_")}
    assert ours == theirs and len(ours) == 6
    om = {f.name: f.type for f in parse_openmetrics(openmetrics) if f.name.startswith("process_")}
    assert om["process_cpu_seconds"] == "counter" and om["process_open_fds"] == "gauge"


@given(st.dictionaries(st.sampled_from(sorted(SIX)), st.floats(0, 2**53, allow_nan=False), min_size=0, max_size=6))
def test_any_figures_read_back_exactly_in_both_formats(values: dict[str, float]) -> None:
    figures = ProcessFigures(tuple((name, values[name]) for name in PROCESS_SERIES if name in values))
    text, openmetrics = _rendered(figures)
    for parse in (parse_text, parse_openmetrics):
        got = {
            s.name: s.value
            for family in parse(text if parse is parse_text else openmetrics)
            for s in family.samples
            if s.name.startswith("process_")
        }
        assert got == {name: float(format_value(value)) for name, value in values.items()}  # as every value is


def test_without_figures_there_are_no_process_series() -> None:
    text, _ = _rendered(None)
    assert "process_" not in text
