"""The `/` page: GPUs, state, pods, sparklines from the sample buffers; escaped; no JavaScript; well-formed."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from html.parser import HTMLParser

from hypothesis import given
from hypothesis import strategies as st

from exporter.collection import HistoryPoint
from exporter.page import render_page, sparkline
from exporter.snapshot import DeviceReading
from tests.support.snapshots import (
    gpu,
    node_with_everything,
    pod,
    reading,
    simulated_node,
    snapshot,
    use,
)

SVG = "{http://www.w3.org/2000/svg}"


class Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(page: str) -> Collect:
    collector = Collect()
    collector.feed(page)
    return collector


def no_history(uuid: str, seconds: float) -> tuple[HistoryPoint, ...]:
    return ()


def test_gpus_states_and_pods() -> None:
    page = render_page(node_with_everything(), no_history)
    text = " ".join(parsed(page).text)
    assert "gpu-pulse · gpu-node-1" in text
    assert "driver 550.54.15" in text
    for index in range(4):
        assert f"GPU {index}" in text
    assert page.count('<span class="down">down</span>') == 1  # GPU 3 was lost
    assert page.count('<span class="up">up</span>') == 5
    assert "87 %" in text  # GPU 0 utilization
    assert "ml/train-0" in text and "serve/infer-a" in text and "research/mig-job" in text
    assert "MIG 3g.40gb" in text
    assert "script" not in parsed(page).tags
    assert 'href="/metrics"' in page and 'href="/pods"' in page


def test_outside_strings_are_escaped() -> None:
    evil = '<script>alert("x")</script>'
    g = gpu(0, model=evil)
    page = render_page(snapshot((reading(g),), (use(pod(evil, namespace="a&b"), g.uuid),), node=evil), no_history)
    assert "<script" not in page
    assert "&lt;script&gt;" in page
    assert "a&amp;b" in page
    assert evil in " ".join(parsed(page).text)  # shown as text, intact


def test_before_the_first_snapshot() -> None:
    page = render_page(None, no_history, readiness="no snapshot yet")
    assert "No snapshot yet" in page and 'href="/metrics"' in page


def test_sparklines_from_the_real_collectors_buffers() -> None:
    with simulated_node("h100x8") as node:
        for _ in range(4):
            node.loop.poll_once()
        published = node.loop.published
        assert published is not None
        page = render_page(published.snapshot, node.collector.history)
    assert page.count("<polyline") == 16  # utilization and memory for each of the 8 GPUs
    assert page.count("<svg") == 16


def test_a_failing_history_does_not_break_the_page() -> None:
    def broken(uuid: str, seconds: float) -> tuple[HistoryPoint, ...]:
        raise RuntimeError("buffer gone")

    page = render_page(snapshot((reading(gpu(0)),)), broken)
    assert "GPU 0" in page


def test_a_down_gpu_shows_no_figures() -> None:
    page = render_page(snapshot((DeviceReading(gpu(0), False, {"gpu_util": 50}),)), no_history)
    assert "50 %" not in page and "down" in page


@given(
    st.lists(st.tuples(st.floats(-1e9, 1e9), st.floats(allow_nan=False)), max_size=50),
    st.floats(-1e6, 1e6),
    st.floats(0, 1e6),
)
def test_sparkline_is_well_formed_svg_inside_its_box(
    points: list[tuple[float, float]], low: float, span: float
) -> None:
    points.sort()
    high = low + span
    svg = sparkline(points, low, high, title='util <"50%">', colour="#123456")
    if len(points) < 2 or not high > low:
        assert "<svg" not in svg
        return
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" or root.tag == "svg"
    width, height = float(root.attrib["width"]), float(root.attrib["height"])
    polyline = next(el for el in root.iter() if el.tag.endswith("polyline"))
    coords = [tuple(map(float, p.split(","))) for p in polyline.attrib["points"].split()]
    assert len(coords) == len(points)
    for x, y in coords:
        assert 0 <= x <= width and 0 <= y <= height
    title = next(el for el in root.iter() if el.tag.endswith("title"))
    assert title.text == 'util <"50%">'


def test_a_mig_row_shows_the_figure_its_sparkline_draws_and_the_sparklines_say_what_they_are() -> None:
    """NVML gives no utilization per MIG instance: the row shows GPM's engine activity, which its sparkline draws
    (Hopper), or says the figure is unknown (A100), never "n/a" beside a moving line."""
    from tests.support.snapshots import mig

    parent = gpu(0, mig=True)
    hopper = reading(mig(parent, 0), gr_engine_active=37.0, fb_used=2.0 * 1024**3, fb_total=9.75 * 1024**3)
    ampere = reading(mig(parent, 1, profile="3g.40gb"), fb_used=1.0 * 1024**3, fb_total=39.5 * 1024**3)
    page = render_page(snapshot((reading(parent), hopper, ampere), ()), no_history)
    text = " ".join(parsed(page).text)
    assert '37 % <span class="muted">(engine active, GPM)</span>' in page
    assert "unknown: no per-instance figure without GPM" in text and "n/a" not in text
    assert "utilization, 0-100 %" in text and "memory used, 0 to its size" in text
