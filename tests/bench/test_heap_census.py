"""bench/heap_census.py: a heap census names the large containers by where they are held, and its report says which
grew, including the dicts of strings and numbers that the garbage collector does not track (the hot path's caches)."""

from __future__ import annotations

import gc
import json
import re
import sys
import threading
import tracemalloc
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from heap_census import LARGE, census, growth, start

from tests.support.waiting import wait_for


class Holder:
    def __init__(self) -> None:
        self.pods: list[str] = [f"pod-{i}" for i in range(LARGE + 5)]


@pytest.fixture
def module() -> types.ModuleType:
    made = types.ModuleType("census_probe")
    made.TEXTS = {}  # type: ignore[attr-defined]
    sys.modules[made.__name__] = made
    yield made
    del sys.modules[made.__name__]


def _write(path: Path, *counts: dict[str, object]) -> None:
    path.write_text("".join(json.dumps({**count, "elapsed": 60.0 * i}) + "\n" for i, count in enumerate(counts)))


def test_an_untracked_global_dict_is_found_through_its_module_and_its_growth_reported(
    module: types.ModuleType, tmp_path: Path
) -> None:
    module.TEXTS.update((i, str(i)) for i in range(LARGE))
    gc.collect()
    assert not gc.is_tracked(module.TEXTS)  # only strings and numbers: what gc.get_objects() cannot see
    first = census()
    assert first["large"]["census_probe[TEXTS] dict"] == [1, LARGE]
    module.TEXTS.update((i, str(i)) for i in range(LARGE, 3 * LARGE))
    last = census()
    assert last["large"]["census_probe[TEXTS] dict"] == [1, 3 * LARGE]
    # the report on these two counts, the probe's container alone: a test process's own containers (the test
    # runner's, hypothesis') change between two censuses too, and may change more
    probe = "census_probe[TEXTS] dict"
    _write(
        tmp_path / "census",
        {**first, "large": {probe: first["large"][probe]}},
        {**last, "large": {probe: last["large"][probe]}},
    )
    report = growth(tmp_path / "census")
    assert report[0].startswith("census       2 censuses over 1 min")
    grown = [line for line in report if re.match(r"\s+[+-][\d,]+ items", line)]
    said = f"+{2 * LARGE:,} items census_probe[TEXTS] dict (1 containers, {3 * LARGE:,} items now)"
    assert [" ".join(line.split()) for line in grown] == [said]


def test_a_container_listed_only_from_a_later_census_grows_from_there(tmp_path: Path) -> None:
    """A container under LARGE items at the first census is not listed in it: its growth is counted from the census
    that first lists it, and the report says which, not as if it had held nothing before."""
    count = census()
    steady, late = "Steady.items dict", "Late.items dict"
    _write(
        tmp_path / "census",
        {**count, "large": {steady: [1, 2 * LARGE]}},
        {**count, "large": {steady: [1, 2 * LARGE], late: [1, 8 * LARGE]}},
        {**count, "large": {steady: [1, 5 * LARGE], late: [1, 8 * LARGE + 4]}},
    )
    grown = [" ".join(line.split()) for line in growth(tmp_path / "census") if re.match(r"\s+[+-][\d,]+ items", line)]
    assert grown == [
        f"+{3 * LARGE:,} items {steady} (1 containers, {5 * LARGE:,} items now)",
        f"+4 items {late} (1 containers, {8 * LARGE + 4:,} items now; listed from census 2, under {LARGE:,} items"
        " before)",
    ]


def test_small_dicts_adding_up_within_a_dict_are_counted_by_where_that_dict_is_held(module: types.ModuleType) -> None:
    """The describedObject texts' shape: a dict per namespace, each small, many namespaces."""
    module.TEXTS.update((f"namespace-{n}", {f"pod-{i}": "text" for i in range(10)}) for n in range(LARGE // 5))
    assert census()["large"]["census_probe[TEXTS] dict > containers"] == [1, LARGE * 2]


def test_an_instance_attribute_is_named_by_its_class_and_attribute_before_and_after_its_dict_is_made() -> None:
    holder = Holder()
    assert census()["large"]["Holder.pods list"] == [1, len(holder.pods)]
    vars(holder)  # CPython 3.11 makes the instance's attribute dict when asked: the holder is that dict from now on
    assert census()["large"]["Holder.pods list"] == [1, len(holder.pods)]


def test_frozen_objects_are_counted_and_stay_frozen() -> None:
    gc.freeze()
    try:
        held = [Holder()]
        gc.freeze()
        frozen = gc.get_freeze_count()
        count = census()
        assert count["frozen"] == frozen and count["large"]["Holder.pods list"] == [1, len(held[0].pods)]
        assert gc.get_freeze_count() >= frozen and all(o is not held[0] for o in gc.get_objects())
    finally:
        gc.unfreeze()


def test_small_containers_are_not_listed(module: types.ModuleType) -> None:
    module.TEXTS.update((i, str(i)) for i in range(LARGE - 1))
    assert not any(place.startswith("census_probe") for place in census()["large"])


def test_the_counts_of_a_process_are_those_of_its_own_allocators() -> None:
    count = census()
    assert count["blocks"] > count["types"]["dict"]  # every object is a block or more
    assert count["types"]["dict"] > 0 and count["types"]["function"] > 0
    if sys.platform == "linux":  # glibc
        assert count["malloc"]["in_use"] > 0


def test_a_report_needs_two_censuses(tmp_path: Path) -> None:
    assert "fewer than two censuses" in growth(tmp_path / "absent")[0]
    _write(tmp_path / "census", census())
    assert "fewer than two censuses" in growth(tmp_path / "census")[0]


def test_the_thread_writes_a_census_line_after_its_first_wait_and_then_every_period(tmp_path: Path) -> None:
    out, stop = tmp_path / "census", threading.Event()
    thread = start(0.0, 0.05, out, stop=stop)
    try:
        wait_for(lambda: out.exists() and len(out.read_text().splitlines()) >= 2, "two census lines", 10)
    finally:
        stop.set()
        thread.join()
    first, second = (json.loads(line) for line in out.read_text().splitlines()[:2])
    assert 0 <= first["elapsed"] <= second["elapsed"]
    assert first["blocks"] > 0


def test_a_traced_census_names_the_line_whose_live_bytes_grew(tmp_path: Path) -> None:
    kept: list[bytes] = []
    out, stop = tmp_path / "census", threading.Event()
    thread = start(0.0, 0.05, out, trace=True, stop=stop)
    try:
        wait_for(lambda: '"traced"' in out.read_text(), "a census with what was traced since the first", 30)
        lines = len(out.read_text().splitlines())
        kept.extend(bytes(4096) for _ in range(64))  # 256 KiB that stay alive, allocated on this line
        allocated_on = sys._getframe().f_lineno - 1
        wait_for(lambda: len(out.read_text().splitlines()) >= lines + 2, "two traced censuses after it", 30)
    finally:
        stop.set()
        thread.join()
        tracemalloc.stop()
    report = growth(out)
    assert any(f"test_heap_census.py:{allocated_on}" in line for line in report), report
