"""XIDs that reach only the kernel log (read from /dev/kmsg, opt-in), and the GPU-unavailable event that is not a loss:
the real collector over the NVML simulator, whose driver writes its kernel log where the collector reads it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.nvml.kernel_log import kernel_address, parse_xid_record
from exporter.snapshot import DeviceReading
from simulation import build_scenario
from tests.exporter.collecting import collecting
from tests.support.clocks import ManualClock
from tests.support.waiting import holds_within, patience

# ---- the record parser --------------------------------------------------------------------------------------------

instances = st.none() | st.tuples(st.integers(0, 14), st.none() | st.integers(0, 7))


def _record(domain: int, bus: int, device: int, xid: int, instance: tuple[int, int | None] | None) -> str:
    """A /dev/kmsg record of an Xid line, as open-gpu-kernel-modules kernel_rc.c `krcReportXid` prints it."""
    where = f"{domain:04x}:{bus:02x}:{device:02x}"
    if instance is not None:
        where += f" GPU-I:{instance[0]:02d}"
        if instance[1] is not None:
            where += f" GPU-CI:{instance[1]:02d}"
    return f"4,1021,86400123456,-;NVRM: Xid (PCI:{where}): {xid}, pid=4242, name=python3, Ch 00000008"


@given(
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFF),
    st.integers(0, 0x1F),
    st.integers(1, 999),
    instances,
)
def test_an_xid_line_is_read_back_with_its_gpu_address_and_instance(
    domain: int, bus: int, device: int, xid: int, instance: tuple[int, int | None] | None
) -> None:
    found = parse_xid_record(_record(domain, bus, device, xid, instance))
    assert found is not None
    assert found.xid == xid
    assert found.address == kernel_address(f"{domain:08X}:{bus:02X}:{device:02X}.0")  # NVML's spelling of the GPU
    assert found.gpu_instance == (instance[0] if instance is not None else None)


@given(st.text(max_size=200))
def test_other_records_are_not_xids(text: str) -> None:
    assert parse_xid_record(f"6,10,20,-;{text}") is None or "NVRM: Xid (PCI:" in text


def test_continuation_lines_and_other_drivers_lines_are_not_xids() -> None:
    assert parse_xid_record(" SUBSYSTEM=pci") is None
    assert parse_xid_record("3,7,8,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal") is None
    assert parse_xid_record("4,9,10,-;NVRM: GPU at PCI:0000:18:00: GPU-8f6c") is None


# ---- the collector ------------------------------------------------------------------------------------------------


def two_h100(version: str, *timeline: dict[str, Any]) -> Any:
    return build_scenario(
        {"driver_version": version, "gpus": [{"model": "H100-SXM5-80GB", "count": 2}], "timeline": list(timeline)},
        seed=4,
    )


def gpu(collector: Any, index: int) -> DeviceReading:
    return [r for r in collector.collect().devices if not r.is_mig][index]


def test_a_log_only_xid_119_on_r550_is_counted_and_its_gpu_rests_while_the_other_reports(tmp_path: Path) -> None:
    """R535-R560 print a GSP RPC timeout as Xid 119 and post nothing to NVML (kernel_gsp.c `_kgspLogXid119`): read
    from the kernel log it reaches DCGM_FI_DEV_XID_ERRORS and the XID counter, and the GPU is not called for a while
    (each call would wait out the RPC timeout), reported down with the timeout named; the other GPU keeps reporting."""
    clock = ManualClock()
    scenario = two_h100("550.54.15", {"at": 1, "action": "gsp_timeout", "gpu": 1})
    with collecting(scenario, clock, kernel_log=str(tmp_path / "kmsg"), xid_wait_ms=20) as (sim, collector):
        assert gpu(collector, 1).up
        clock.advance(2.0)
        gpu(collector, 0)  # a call: the timeline's timeout is due
        assert sim.kernel_log.records and ": 119, " in sim.kernel_log.records[-1]
        assert holds_within(lambda: gpu(collector, 1).vectors.get("xid_errors") == {"119": 1.0}, patience(10))
        resting = gpu(collector, 1)
        assert not resting.up and resting.values["last_xid"] == 119
        assert resting.stalled is not None and resting.stalled.call == "gsp_rpc_timeout"
        assert gpu(collector, 0).up
        clock.advance(61.0)
        back = gpu(collector, 1)
    assert back.up and back.vectors["xid_errors"] == {"119": 1.0}


def test_a_gsp_timeout_on_r570_is_not_a_gpu_fallen_off_the_bus() -> None:
    """R570 posts the GPU-unavailable event for every GSP RPC timeout, with eventData 0 (kernel_gsp.c, nvml.h): the GPU
    still answers, so no XID 79 is counted and it stays up."""
    clock = ManualClock()
    scenario = two_h100("570.86.15", {"at": 1, "action": "gsp_timeout", "gpu": 1})
    with collecting(scenario, clock, xid_wait_ms=20) as (sim, collector):
        gpu(collector, 1)
        clock.advance(2.0)
        gpu(collector, 0)
        assert holds_within(lambda: not sim.node.events.pending(), patience(5))
        readings = [gpu(collector, 1) for _ in range(3)]
    assert all(r.up for r in readings)
    assert "79" not in readings[-1].vectors.get("xid_errors", {})


def test_a_gsp_timeout_on_r570_with_the_kernel_log_is_xid_119_and_the_gpu_degraded(tmp_path: Path) -> None:
    clock = ManualClock()
    scenario = two_h100("570.86.15", {"at": 1, "action": "gsp_timeout", "gpu": 1})
    with collecting(scenario, clock, kernel_log=str(tmp_path / "kmsg"), xid_wait_ms=20) as (_, collector):
        gpu(collector, 1)
        clock.advance(2.0)
        gpu(collector, 0)
        assert holds_within(lambda: gpu(collector, 1).vectors.get("xid_errors") == {"119": 1.0}, patience(10))
        degraded = gpu(collector, 1)
    assert not degraded.up and degraded.stalled is not None and degraded.stalled.call == "gsp_rpc_timeout"


def test_an_idle_gpu_lost_on_r550_counts_its_logged_xid_79_once(tmp_path: Path) -> None:
    """R550 before 550.120 logs Xid 79 and posts nothing (osinit.c): the kernel log's line and the GPU_IS_LOST answers
    are the same loss, counted once."""
    clock = ManualClock()
    with collecting(two_h100("550.54.15"), clock, kernel_log=str(tmp_path / "kmsg"), xid_wait_ms=20) as (
        sim,
        collector,
    ):
        gpu(collector, 1)
        sim.lose_gpu(1)
        assert holds_within(lambda: gpu(collector, 1).vectors.get("xid_errors") == {"79": 1.0}, patience(10))
        for _ in range(3):
            clock.advance(1.0)
            lost = gpu(collector, 1)
    assert not lost.up and lost.vectors["xid_errors"] == {"79": 1.0}


def test_a_kernel_log_that_cannot_be_read_is_said_once_and_nothing_else_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    caplog.set_level(logging.WARNING, logger="exporter.nvml")

    def said() -> int:
        return sum("cannot be read" in r.getMessage() for r in caplog.records)

    with collecting(
        two_h100("550.54.15"), clock, kernel_log=str(tmp_path / "absent" / "kmsg"), driver_writes_kernel_log=False
    ) as (_, collector):
        readings = [gpu(collector, i) for i in (0, 1)]
        assert holds_within(lambda: said() == 1, patience(5))
    assert all(r.up for r in readings)
    assert said() == 1


def test_records_passed_through_a_pipe_are_read_as_the_charts_relay_writes_them(tmp_path: Path) -> None:
    """The chart's kmsg-relay writes the driver's Xid lines to a named pipe, which may not exist yet when the exporter
    starts, and whose writer may come and go: the reader waits for it and reads what comes."""
    import os
    import threading

    from exporter.nvml.kernel_log import KernelLogReader
    from exporter.nvml.xid import XidLedger

    pipe = tmp_path / "xid"
    ledger = XidLedger()
    reader = KernelLogReader(str(pipe), ledger, lambda: {"0000:18:00": "GPU-a"}, lambda: 0.0, retry_seconds=0.05)
    reader.start()
    try:
        os.mkfifo(pipe, 0o600)
        assert holds_within(lambda: reader.opened, patience(5))

        def relay(record: str) -> None:
            out = os.open(pipe, os.O_WRONLY)
            os.write(out, (record + "\n").encode())
            os.close(out)

        for record in (_record(0, 0x18, 0, 119, None), _record(0, 0x3B, 0, 119, None), _record(0, 0x18, 0, 13, None)):
            writer = threading.Thread(target=relay, args=(record,))
            writer.start()
            writer.join(patience(5))
        assert holds_within(lambda: ledger.read("GPU-a")[0] == {"119": 1.0}, patience(5))
        assert reader.gsp_timed_out("GPU-a") == 0.0
    finally:
        reader.stop()
