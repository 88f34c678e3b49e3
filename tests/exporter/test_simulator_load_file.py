"""A scenario's `load_file`: a running node's load moved from outside its process (simulation/loadfile.py), as the
control plane tests move it while real controllers add and remove pods."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from simulation import Simulator, build_scenario, install
from tests.support.clocks import ManualClock


@pytest.fixture
def load_file(tmp_path: Path) -> Path:
    return tmp_path / "load.json"


@pytest.fixture
def sim(clock: ManualClock, load_file: Path) -> Iterator[Simulator]:
    scenario = build_scenario(
        {"node": "n", "seed": 3, "load_file": str(load_file), "gpus": [{"model": "H100-SXM5-80GB", "count": 2}]}
    )
    s = Simulator(scenario, clock=clock)
    with install(s):
        pynvml.nvmlInit()
        yield s
        pynvml.nvmlShutdown()


def write(path: Path, loads: dict[str, float | None], mtime_ns: int) -> None:
    partial = path.with_name("partial")
    partial.write_text(json.dumps(loads), encoding="utf-8")
    os.utime(partial, ns=(mtime_ns, mtime_ns))  # a new version of the file, whatever the filesystem's granularity
    os.replace(partial, path)


def utilization(index: int) -> int:
    return int(pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(index)).gpu)


def test_the_file_sets_each_gpus_load_within_a_second(sim: Simulator, clock: ManualClock, load_file: Path) -> None:
    assert utilization(0) == 0  # idle, and no file yet
    uuid = sim.scenario.gpus[1].uuid or ""
    write(load_file, {"0": 40, uuid: 75}, 1)
    clock.advance(2)
    assert (utilization(0), utilization(1)) == (40, 75)
    write(load_file, {"0": None, uuid: 20}, 2)  # null: back to the GPU's own curve (idle here)
    clock.advance(2)
    assert (utilization(0), utilization(1)) == (0, 20)


def test_a_file_that_does_not_parse_is_read_again_later(sim: Simulator, clock: ManualClock, load_file: Path) -> None:
    load_file.write_text('{"0": 4', encoding="utf-8")  # a writer that did not replace the file whole
    clock.advance(2)
    assert utilization(0) == 0
    write(load_file, {"0": 60}, 5)
    clock.advance(2)
    assert utilization(0) == 60


def test_unknown_targets_are_skipped_and_the_rest_applied(sim: Simulator, clock: ManualClock, load_file: Path) -> None:
    write(load_file, {"nowhere/nothing": 50, "1": 30}, 1)
    clock.advance(2)
    assert utilization(1) == 30
