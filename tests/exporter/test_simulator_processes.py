"""Processes through the real pynvml: the running-process list and per-process utilization samples."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulation import Simulator, build_scenario, install
from simulation.load import whole_percents
from simulation.loader import load_scenario
from tests.support.clocks import ManualClock
from tests.support.pidspaces import sidecar_exporter

MIB = 1024 * 1024
NOT_AVAILABLE = 0xFFFFFFFF


@pytest.fixture
def shared(clock: ManualClock) -> Iterator[Simulator]:
    s = Simulator("shared", clock=clock)
    with install(s):
        pynvml.nvmlInit()
        yield s
        pynvml.nvmlShutdown()


def test_running_processes_two_call_protocol_and_contents(shared: Simulator) -> None:
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    expected = {p.pid: p.memory_mib for p in shared.scenario.processes if p.gpu == 0}
    assert {p.pid: p.usedGpuMemory for p in procs} == {pid: int(mib * MIB) for pid, mib in expected.items()}
    assert all(p.gpuInstanceId == NOT_AVAILABLE and p.computeInstanceId == NOT_AVAILABLE for p in procs)

    # the C protocol directly: no array -> INSUFFICIENT_SIZE with the count; a small array -> the same
    fn = shared.nvmlDeviceGetComputeRunningProcesses_v3
    count = pynvml.c_uint(0)
    assert fn(h, pynvml.byref(count), None) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert count.value == len(expected)
    small = (pynvml.c_nvmlProcessInfo_v3_t * 2)()
    count.value = 2
    assert fn(h, pynvml.byref(count), small) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert count.value == len(expected)


def test_an_idle_gpu_lists_no_processes() -> None:
    with install(Simulator("h100x8", clock=ManualClock())):
        pynvml.nvmlInit()
        try:
            assert pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(7)) == []
            with pytest.raises(pynvml.NVMLError_NotFound):  # no process: no samples
                pynvml.nvmlDeviceGetProcessUtilization(pynvml.nvmlDeviceGetHandleByIndex(7), 0)
        finally:
            pynvml.nvmlShutdown()


def test_process_samples_are_newer_than_last_seen_in_microseconds(shared: Simulator, clock: ManualClock) -> None:
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    clock.advance(3.5)
    samples = pynvml.nvmlDeviceGetProcessUtilization(h, 0)
    stamps = sorted({s.timeStamp for s in samples})
    start_us = int(shared.node.t0 * 1e6)
    assert stamps == [start_us, start_us + 1_000_000, start_us + 2_000_000, start_us + 3_000_000]
    newest = stamps[-1]
    with pytest.raises(pynvml.NVMLError_NotFound):  # nothing newer yet
        pynvml.nvmlDeviceGetProcessUtilization(h, newest)
    clock.advance(1)
    again = pynvml.nvmlDeviceGetProcessUtilization(h, newest)
    assert {s.timeStamp for s in again} == {newest + 1_000_000}
    assert {s.pid for s in again} <= {p.pid for p in shared.scenario.processes if p.gpu == 0}
    assert all(s.smUtil or s.memUtil for s in again), "only processes that used the GPU in the period"
    # the driver keeps a bounded buffer
    clock.advance(100)
    assert len({s.timeStamp for s in pynvml.nvmlDeviceGetProcessUtilization(h, 0)}) == 10


def test_process_shares_add_up_to_the_gpus_utilization(shared: Simulator, clock: ManualClock) -> None:
    last = [int(clock.now * 1e6)] * 2  # the first tick, at scenario start
    for _ in range(40):
        clock.advance(1)
        for i in (0, 1):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            samples = pynvml.nvmlDeviceGetProcessUtilization(h, last[i])
            assert {s.timeStamp for s in samples} == {max(s.timeStamp for s in samples)}  # one new tick per second
            last[i] = samples[0].timeStamp
            assert sum(s.smUtil for s in samples) == pynvml.nvmlDeviceGetUtilizationRates(h).gpu
            assert sum(s.memUtil for s in samples) == pynvml.nvmlDeviceGetUtilizationRates(h).memory
            assert all(s.encUtil == 0 and s.decUtil == 0 for s in samples)


def test_only_processes_busy_in_the_period_have_a_sample(clock: ManualClock) -> None:
    """nvml.h: one sample per process "that had some non-zero utilization during the last sample period"."""
    scenario = build_scenario(
        {
            "gpus": [{"model": "H100-SXM5-80GB"}],
            "processes": [
                {"pid": 101, "gpu": 0, "memory_mib": 100, "load": {"baseline": 60}},
                {"pid": 102, "gpu": 0, "memory_mib": 100, "load": {"baseline": 0}},
            ],
        },
        seed=1,
    )
    sim = Simulator(scenario, clock=clock)
    with install(sim):
        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            clock.advance(3.5)
            samples = pynvml.nvmlDeviceGetProcessUtilization(h, 0)
            assert {s.pid for s in samples} == {101}, "the idle process runs, but has no sample"
            assert len(pynvml.nvmlDeviceGetComputeRunningProcesses(h)) == 2
            sim.set_load(0, 0)  # both idle from now on: no valid sample at all
            clock.advance(2)
            newest = max(s.timeStamp for s in samples)
            with pytest.raises(pynvml.NVMLError_NotFound):
                pynvml.nvmlDeviceGetProcessUtilization(h, newest + 1_000_000)
        finally:
            pynvml.nvmlShutdown()


def test_each_pod_on_a_shared_gpu_gets_its_own_figure(shared: Simulator, clock: ManualClock) -> None:
    clock.advance(60)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    by_pod: dict[str, int] = defaultdict(int)
    for s in pynvml.nvmlDeviceGetProcessUtilization(h, int((clock.now - 1) * 1e6)):
        owner = shared.scenario.pod_of_pid(s.pid)
        assert owner is not None
        by_pod[owner[0].ref] += s.smUtil
    assert set(by_pod) == {"team-a/train-small-0", "team-a/eval-0", "team-b/llm-api-0", "team-c/notebook-bob"}
    assert len(set(by_pod.values())) > 1  # different workloads, different figures

    # moving one pod moves only its share (the e2e test moves a workload this way)
    before = dict(by_pod)
    shared.set_load("team-a/eval-0", 40)
    clock.advance(1)
    after: dict[str, int] = defaultdict(int)
    for s in pynvml.nvmlDeviceGetProcessUtilization(h, int((clock.now - 0.5) * 1e6)):
        owner = shared.scenario.pod_of_pid(s.pid)
        assert owner is not None
        after[owner[0].ref] += s.smUtil
    assert after["team-a/eval-0"] == 40  # a pinned figure holds; the other pods yield when the GPU is full
    assert sum(after.values()) == pynvml.nvmlDeviceGetUtilizationRates(h).gpu <= 100
    others = [p for p in before if p != "team-a/eval-0"]
    assert sorted(others, key=lambda p: before[p]) == sorted(others, key=lambda p: after[p])


def test_process_utilization_buffer_protocol_in_c(shared: Simulator, clock: ManualClock) -> None:
    clock.advance(2.2)
    h = pynvml.nvmlDeviceGetHandleByIndex(1)
    fn = shared.nvmlDeviceGetProcessUtilization
    count = pynvml.c_uint(0)
    assert fn(h, None, pynvml.byref(count), pynvml.c_ulonglong(0)) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert count.value == 3 * 4  # three ticks, four busy processes
    # a buffer for one tick gets the oldest tick; last-seen then picks up the rest
    buf = (pynvml.c_nvmlProcessUtilizationSample_t * 4)()
    count.value = 4
    assert fn(h, buf, pynvml.byref(count), pynvml.c_ulonglong(0)) == pynvml.NVML_SUCCESS
    assert count.value == 4 and len({s.timeStamp for s in buf}) == 1


@given(
    total=st.floats(0, 100),
    parts=st.lists(st.floats(0, 100), min_size=0, max_size=12),
)
def test_whole_percents_keep_the_parts_summing_to_the_total(total: float, parts: list[float]) -> None:
    s = sum(parts)
    scaled = {i: (v * total / s if s else 0.0) for i, v in enumerate(parts)}
    if not s:
        scaled = {i: 0.0 for i in range(len(parts))} if total == 0 else {}
    whole, ints = whole_percents(total, scaled)
    assert whole == round(total)
    if ints:
        assert sum(ints.values()) == whole
        assert all(v >= 0 and abs(v - scaled[k]) < 1 + 1e-9 for k, v in ints.items())


_curve = st.fixed_dictionaries(
    {"baseline": st.floats(0, 100), "noise": st.floats(0, 10)},
    optional={
        "waves": st.lists(
            st.fixed_dictionaries(
                {"amplitude": st.floats(0, 50), "period_s": st.floats(1, 1000), "phase": st.floats(0, 1)}
            ),
            max_size=3,
        )
    },
)


@st.composite
def _shared_gpu_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 6))
    processes = [
        {
            "pid": 1000 + k,
            "gpu": 0,
            "memory_mib": draw(st.floats(0, 10_000)),
            "share": draw(st.floats(0.01, 10)),
            **({"load": draw(_curve)} if draw(st.booleans()) else {}),
        }
        for k in range(n)
    ]
    return {"gpus": [{"model": "H100-SXM5-80GB", "load": draw(_curve)}], "processes": processes}


@settings(max_examples=40, deadline=None)
@given(data=_shared_gpu_scenarios(), seconds=st.lists(st.integers(0, 3600), min_size=1, max_size=4))
def test_any_mix_of_processes_adds_up(data: dict[str, Any], seconds: list[int]) -> None:
    clock = ManualClock()
    sim = Simulator(build_scenario(data, seed=1), clock=clock)
    with install(sim):
        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            for dt in sorted(seconds):
                clock.now = sim.node.t0 + dt + 0.5
                rates = pynvml.nvmlDeviceGetUtilizationRates(h)
                newest = int((sim.node.t0 + dt) * 1e6)
                assert 0 <= rates.gpu <= 100
                try:
                    samples = pynvml.nvmlDeviceGetProcessUtilization(h, newest - 1)
                except pynvml.NVMLError_NotFound:  # every process idle in the tick: no sample at all
                    samples = []
                assert sum(s.smUtil for s in samples) == rates.gpu
                assert all(s.smUtil or s.memUtil for s in samples)
                mem = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                assert mem.used == sum(p.usedGpuMemory for p in procs)
        finally:
            pynvml.nvmlShutdown()


# ---- PID namespaces and MPS ---------------------------------------------------------------------------------------


def _pid_namespace(driver: str) -> Any:
    return load_scenario("shared").model_copy(update={"exporter_pid_namespace": "container", "driver_version": driver})


def test_a_translating_driver_leaves_out_processes_outside_the_callers_namespace(clock: ManualClock) -> None:
    scenario = _pid_namespace("550.54.15")
    with install(Simulator(scenario, clock=clock)):
        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            clock.advance(3)
            assert pynvml.nvmlDeviceGetComputeRunningProcesses(h) == []
            # kern_perf_ctrl.c: the samples are not translated: they still name the host PIDs
            samples = pynvml.nvmlDeviceGetProcessUtilization(h, 0)
            assert {s.pid for s in samples} <= {p.pid for p in scenario.processes if p.gpu == 0}
            assert samples
            # the device itself still shows the work
            assert pynvml.nvmlDeviceGetUtilizationRates(h).gpu > 0
            assert pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used > 0
        finally:
            pynvml.nvmlShutdown()


def test_an_older_driver_gives_host_pids_that_the_callers_proc_lacks(clock: ManualClock, tmp_path: Any) -> None:
    from simulation.proctree import write_proc_tree

    scenario = _pid_namespace("535.104.05")
    with install(Simulator(scenario, clock=clock)):
        pynvml.nvmlInit()
        try:
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(0))
        finally:
            pynvml.nvmlShutdown()
    assert {p.pid for p in procs} == {p.pid for p in scenario.processes if p.gpu == 0}
    assert write_proc_tree(tmp_path / "proc", scenario) == ()
    assert list((tmp_path / "proc").iterdir()) == []


def test_mps_clients_come_from_the_mps_list_and_the_compute_list_has_the_server(clock: ManualClock) -> None:
    base = load_scenario("shared")
    gpus = (base.gpus[0].model_copy(update={"mps_server_pid": 4242}), *base.gpus[1:])
    with install(Simulator(base.model_copy(update={"gpus": gpus}), clock=clock)):
        pynvml.nvmlInit()
        try:
            mps_gpu, plain_gpu = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
            assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(mps_gpu)] == [4242]
            clients = pynvml.nvmlDeviceGetMPSComputeRunningProcesses_v3(mps_gpu)
            assert {p.pid for p in clients} == {p.pid for p in base.processes if p.gpu == 0}
            assert pynvml.nvmlDeviceGetMPSComputeRunningProcesses_v3(plain_gpu) == []
            assert len(pynvml.nvmlDeviceGetComputeRunningProcesses(plain_gpu)) == len(
                [p for p in base.processes if p.gpu == 1]
            )
        finally:
            pynvml.nvmlShutdown()


def test_a_process_in_the_callers_namespace_is_listed_by_its_namespace_pid_and_sampled_by_its_host_pid(
    clock: ManualClock, tmp_path: Any
) -> None:
    from simulation.proctree import write_proc_tree

    scenario = sidecar_exporter("550.54.15")
    with install(Simulator(scenario, clock=clock)):
        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            clock.advance(2.5)
            listed = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            samples = pynvml.nvmlDeviceGetProcessUtilization(h, 0)
        finally:
            pynvml.nvmlShutdown()
    assert [(p.pid, p.usedGpuMemory) for p in listed] == [(7, 1000 * MIB)]  # the sidecar's process, by its PID there
    by_pid = defaultdict(set)
    for sample in samples:
        by_pid[sample.pid].add(sample.smUtil)
    assert set(by_pid) == {5001, 7}  # host PIDs: "7" in a sample is the other pod's process
    assert by_pid[5001] == {20} and by_pid[7] == {70}
    # the caller's /proc has the namespace PID, with the sidecar's container cgroup
    assert write_proc_tree(tmp_path / "proc", scenario) == (7,)
    assert "with-exporter" not in (tmp_path / "proc" / "7" / "cgroup").read_text()  # cgroups name pod UIDs
    pod = scenario.pods[0]
    assert str(pod.uid).replace("-", "_") in (tmp_path / "proc" / "7" / "cgroup").read_text()


def test_an_older_driver_lists_host_pids_even_for_a_process_in_the_callers_namespace(clock: ManualClock) -> None:
    with install(Simulator(sidecar_exporter("535.104.05"), clock=clock)):
        pynvml.nvmlInit()
        try:
            listed = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(0))
        finally:
            pynvml.nvmlShutdown()
    assert sorted(p.pid for p in listed) == [7, 5001]


def test_a_namespace_pid_needs_an_exporter_in_a_container_namespace() -> None:
    from simulation import ScenarioError

    data = {"gpus": [{"model": "L4"}], "processes": [{"pid": 9, "namespace_pid": 3, "gpu": 0, "memory_mib": 1}]}
    with pytest.raises(ScenarioError, match="exporter_pid_namespace: container"):
        build_scenario(data)


def test_mps_samples_name_the_server_with_the_clients_summed_work(clock: ManualClock) -> None:
    base = load_scenario("shared")
    gpus = (base.gpus[0].model_copy(update={"mps_server_pid": 4242}), *base.gpus[1:])
    with install(Simulator(base.model_copy(update={"gpus": gpus}), clock=clock)):
        pynvml.nvmlInit()
        try:
            clock.advance(5.5)
            mps_gpu, plain_gpu = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
            samples = pynvml.nvmlDeviceGetProcessUtilization(mps_gpu, 0)
            assert {s.pid for s in samples} == {4242}, "no sample names an MPS client"
            by_stamp = {s.timeStamp: s for s in samples}
            assert len(by_stamp) == len(samples)  # one sample per tick
            newest = by_stamp[max(by_stamp)]
            assert newest.smUtil == pynvml.nvmlDeviceGetUtilizationRates(mps_gpu).gpu > 0
            assert {s.pid for s in pynvml.nvmlDeviceGetProcessUtilization(plain_gpu, 0)} <= {
                p.pid for p in base.processes if p.gpu == 1
            }
        finally:
            pynvml.nvmlShutdown()


def test_a_wall_clock_step_back_stamps_new_samples_before_the_old_ones(shared: Simulator, clock: ManualClock) -> None:
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    clock.advance(4.5)
    before = pynvml.nvmlDeviceGetProcessUtilization(h, 0)
    newest = max(s.timeStamp for s in before)
    shared.node.step_wall_clock(-3600)
    assert shared.node.wall_time() == pytest.approx(clock.now - 3600)
    clock.advance(2)
    with pytest.raises(pynvml.NVMLError_NotFound):  # asked with the newest stamp seen: nothing is newer
        pynvml.nvmlDeviceGetProcessUtilization(h, newest)
    stamps = sorted({s.timeStamp for s in pynvml.nvmlDeviceGetProcessUtilization(h, 0)})
    stepped = [t for t in stamps if t < newest - 3000 * 1_000_000]
    assert stepped == [int((shared.node.t0 + tick - 3600) * 1e6) for tick in (5, 6)]  # the two ticks after the step
    clock.advance(20)  # the buffer (10 s) has dropped every tick from before the step
    assert max(s.timeStamp for s in pynvml.nvmlDeviceGetProcessUtilization(h, 0)) < newest


def test_a_wall_clock_step_is_a_timeline_event(clock: ManualClock) -> None:
    data = {
        "gpus": [{"model": "L4"}],
        "processes": [{"pid": 9, "gpu": 0, "memory_mib": 1, "load": {"baseline": 50}}],
        "timeline": [{"at": 3, "action": "step_wall_clock", "seconds": -60}],
    }
    sim = Simulator(build_scenario(data), clock=clock)
    clock.advance(2)
    assert sim.node.wall_time() == clock.now
    clock.advance(2)
    assert sim.node.wall_time() == clock.now - 60
    assert sim.node.tick_time_us(3) == int((sim.node.t0 + 3) * 1e6)  # taken as the clock stepped: stamped before
    assert sim.node.tick_time_us(4) == int((sim.node.t0 + 4 - 60) * 1e6)
