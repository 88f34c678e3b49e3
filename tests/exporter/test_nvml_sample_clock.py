"""Per-process utilization across a step of the clock NVML stamps samples with: never frozen, nothing counted twice."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.nvml.sample_cursor import SampleCursor
from simulation import build_scenario
from tests.exporter.collecting import collecting
from tests.support.clocks import ManualClock


def _one_process(load: float) -> Any:
    return build_scenario(
        {
            "gpus": [{"model": "H100-SXM5-80GB"}],
            "processes": [{"pid": 101, "gpu": 0, "memory_mib": 100, "load": {"baseline": load}}],
        },
        seed=1,
    )


@pytest.mark.parametrize("step", [-3600.0, -30.0, -4.0])
def test_a_wall_clock_step_back_does_not_freeze_per_process_utilization(
    step: float, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    with (
        caplog.at_level(logging.WARNING, logger="exporter.nvml"),
        collecting(_one_process(60), clock) as (sim, collector),
    ):
        for _ in range(3):
            clock.advance(1.0)
            (gpu,) = collector.collect().devices
        assert [p.sm_util_percent for p in gpu.processes] == [60.0]
        sim.node.step_wall_clock(step)
        sim.set_load(0, 25)  # from now on the process runs at 25 %: only new samples can say so
        seen: list[float | None] = []
        for _ in range(20):
            clock.advance(1.0)
            (gpu,) = collector.collect().devices
            seen.append(gpu.processes[0].sm_util_percent)
    # held for a few cycles, then unknown while the old samples are still in the driver's 10 s buffer, then the new
    # figure: never an hour of a frozen (or missing) figure
    assert seen[-5:] == [25.0] * 5
    assert seen.index(25.0) <= 16
    assert all(v in (60.0, None, 25.0) for v in seen)
    rewinds = [r for r in caplog.records if "went back" in r.getMessage()]
    assert len(rewinds) == (1 if -step > 10 else len(rewinds))  # a short step may resolve by itself
    assert len(rewinds) <= 1


@pytest.mark.parametrize("step", [-3600.0, -60.0, -13.0])
def test_after_a_wall_clock_step_back_per_process_utilization_is_never_unknown(
    step: float, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 41, item 9: the driver's whole buffer is looked at on the first cycle without a new sample, and the
    samples there not counted yet are the new ones: the new figure comes on the next poll, no poll is unknown."""
    clock = ManualClock()
    with (
        caplog.at_level(logging.WARNING, logger="exporter.nvml"),
        collecting(_one_process(60), clock) as (sim, collector),
    ):
        for _ in range(3):
            clock.advance(1.0)
            collector.collect()
        sim.node.step_wall_clock(step)
        sim.set_load(0, 25)
        seen: list[float | None] = []
        for _ in range(15):
            clock.advance(1.0)
            (gpu,) = collector.collect().devices
            seen.append(gpu.processes[0].sm_util_percent)
    assert seen == [25.0] * 15
    assert len([r for r in caplog.records if "went back" in r.getMessage()]) == 1


def test_a_wall_clock_step_forward_needs_nothing() -> None:
    clock = ManualClock()
    with collecting(_one_process(60), clock) as (sim, collector):
        clock.advance(1.0)
        collector.collect()
        sim.node.step_wall_clock(+3600)
        sim.set_load(0, 25)
        clock.advance(1.0)
        (gpu,) = collector.collect().devices
    assert [p.sm_util_percent for p in gpu.processes] == [25.0]


def test_an_idle_device_is_not_probed_and_busy_idle_processes_are_probed_sparingly() -> None:
    clock = ManualClock()
    with collecting(_one_process(0), clock) as (sim, collector):
        for _ in range(30):
            clock.advance(1.0)
            collector.collect()
        calls = sim.call_counts["nvmlDeviceGetProcessUtilization"]
    # one call per cycle, plus a look at the whole buffer at most every 5 s (nothing was ever seen: none at all)
    assert calls == 30


def test_fast_polls_of_processes_gone_idle_look_at_the_whole_buffer_a_few_times() -> None:
    """Cycles shorter than NVML's sampling period, processes gone idle: the whole buffer is looked at on the first
    cycle without a new sample, at most three times more within the hold (3 s), then every 5 s."""
    clock = ManualClock()
    with collecting(_one_process(60), clock) as (sim, collector):
        for _ in range(3):
            clock.advance(1.0)
            collector.collect()
        sim.set_load(0, 0)
        clock.advance(1.0)
        collector.collect()  # the last busy tick's sample
        before = sim.call_counts["nvmlDeviceGetProcessUtilization"]
        cycles = 80
        for _ in range(cycles):  # 20 s of 0.25 s cycles
            clock.advance(0.25)
            collector.collect()
        looks = sim.call_counts["nvmlDeviceGetProcessUtilization"] - before - cycles
    assert 1 + 3 <= looks <= 1 + 3 + 4  # the first, three within the hold, one per 5 s of the remaining ~17 s


# ---- the cursor against a model of the driver's ring buffer -------------------------------------------------------


@dataclass(frozen=True)
class _Sample:
    pid: int
    timeStamp: int  # noqa: N815  (NVML's field name)
    smUtil: int = 50  # noqa: N815
    memUtil: int = 10  # noqa: N815
    seq: int = 0  # which sample it is (two samples may carry the same stamp across a step)


class _Driver:
    """A ring buffer of the last `span` seconds of samples (one per second), stamped by a wall clock that may step."""

    def __init__(self, span: int = 10) -> None:
        self.span = span
        self.buffer: list[_Sample] = []
        self.taken: list[_Sample] = []

    def tick(self, wall_us: int) -> None:
        sample = _Sample(1, wall_us, seq=len(self.taken))
        self.taken.append(sample)
        self.buffer = [*self.buffer, sample][-self.span :]

    def ask(self, last_seen: int) -> list[_Sample]:
        return [s for s in self.buffer if s.timeStamp > last_seen]


@settings(max_examples=200, deadline=None)
@given(
    before=st.integers(1, 30),
    step_s=st.integers(-100_000, 100_000),
    after=st.integers(1, 60),
)
def test_the_cursor_counts_every_sample_at_most_once_and_never_stays_stuck(
    before: int, step_s: int, after: int
) -> None:
    monotonic = ManualClock(0.0)
    cursor = SampleCursor(monotonic, probe_seconds=5.0)
    driver = _Driver()
    counted: list[_Sample] = []
    wall = 1_760_000_000_000_000

    def cycle() -> None:
        fresh = cursor.take(driver.ask(cursor.last_seen_us))
        if not fresh and cursor.probe_due(running=True):
            fresh = cursor.rewound(driver.ask(0), "GPU 0")
        counted.extend(fresh)

    for _ in range(before):
        monotonic.advance(1.0)
        wall += 1_000_000
        driver.tick(wall)
        cycle()
    wall += step_s * 1_000_000
    for _ in range(after):
        monotonic.advance(1.0)
        wall += 1_000_000
        driver.tick(wall)
        cycle()
    assert len(counted) == len(set(counted)), "a sample counted twice"
    assert set(counted) <= set(driver.taken)
    if after >= 22:  # the buffer (10 s) and two probe periods later, the newest samples are counted again
        assert counted[-1] == driver.taken[-1]
    if step_s >= 0:
        assert counted == driver.taken, "a clock that does not go back loses nothing"
    if step_s <= -13:  # no new sample can carry the stamp of one still remembered (REMEMBER_SECONDS, 12 s)
        assert counted == driver.taken, "a step back loses nothing either"
