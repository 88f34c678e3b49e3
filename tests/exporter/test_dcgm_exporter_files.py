"""dcgm-exporter's own counters files, every line enabled, fed to real exporters on four GPU generations: every field
NVML gives on that generation is served under the name the file spells, every other is named at start-up with its
reason, and what the shipped alerts read is served whatever the file says.

The files are written from gpu-pulse's table of them (exporter/catalogue/dcgm_exporter_files.py, the facts of
dcgm-exporter 4.5.3-4.8.2's etc/*.csv), in dcgm-exporter's format. Whether a generation gives a field is worked out
here from what the catalogue says a measurement needs and what the simulated board has (simulation/hardware.py); the
simulator refuses the rest as the real driver does, so the three have to agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.catalogue import ALWAYS_SERVED, BY_KEY, LABEL_FIELDS, MEASUREMENTS, NEVER_SERVED, Measurement, Need
from exporter.catalogue.dcgm_exporter_files import FILES, CounterLine, as_csv
from exporter.catalogue.dcgm_fields import FIELD_IDS
from simulation import load_scenario
from simulation.hardware import GPU_MODELS
from tests.support.loopback import http_get
from tests.support.processes import ChildProcesses, python_module
from tests.support.waiting import holds_within

pytestmark = pytest.mark.timeout(240)

SCENARIOS = ("h100x8", "a100x8", "l4x2", "h100-mig")
CASES = [(name, scenario) for name in FILES for scenario in SCENARIOS]
NOT_SERVED = "requested fields this node does not serve: "
ADDED = "leaves out what the shipped alerts read; serving these too: "
_TYPE = re.compile(r"^# TYPE (\S+) ", re.M)
_LABEL_NAMES = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="')


def needs_met(scenario: str) -> set[Need]:
    """What the scenario's GPUs have (any of them): the board's facts, MIG and ECC as the scenario sets them."""
    met: set[Need] = set()
    for gpu in load_scenario(scenario).gpus:
        model = GPU_MODELS[gpu.model]
        met |= {need for need, has in _HAS.items() if has(model)}
        if gpu.ecc:
            met.add(Need.ECC)
        if gpu.mig is None:
            met.add(Need.NO_MIG)
    return met


_HAS = {
    Need.HOPPER: lambda m: m.gpm,
    Need.NVLINK: lambda m: m.nvlink_links > 0,
    Need.HBM: lambda m: m.hbm,
    Need.PAGE_RETIREMENT: lambda m: m.page_retirement,
    Need.ROW_REMAPPING: lambda m: m.row_remapping,
}


def label_given(scenario: str, key: str) -> bool:
    """Whether the scenario's boards give a label field (the InfoROM power object, for one, they have not)."""
    attribute = {"inforom_image_version": 0, "inforom_oem_version": 1, "inforom_ecc_version": 2}
    attribute["inforom_power_version"] = 3
    if key not in attribute:
        return True
    return any(GPU_MODELS[g.model].inforom[attribute[key]] is not None for g in load_scenario(scenario).gpus)


def family_of(line: CounterLine) -> Measurement:
    fid = FIELD_IDS[line.name]
    return next(m for m in MEASUREMENTS if m.dcgm is not None and m.dcgm_fields[:1] == (fid,))


@dataclass(frozen=True)
class Run:
    metrics: str
    log: str

    def families(self) -> set[str]:
        return set(_TYPE.findall(self.metrics))

    def labels_of(self, family: str) -> set[str]:
        line = next(ln for ln in self.metrics.splitlines() if ln.startswith(family + "{"))
        return set(_LABEL_NAMES.findall(line))

    def line(self, marker: str) -> str:
        return next((ln for ln in self.log.splitlines() if marker in ln), "")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], Run]]:
    """One real exporter per (file, scenario), all started at once, read once each has served three polls."""
    workdir = tmp_path_factory.mktemp("dcgm-files")
    processes = ChildProcesses(workdir)
    urls: dict[tuple[str, str], str] = {}
    try:
        for name, scenario in CASES:
            path = workdir / f"{scenario}-{name}"
            path.write_text(as_csv(FILES[name], all_enabled=True))
            # port 0, the address read from the "serving" line: a port picked free beforehand can be taken by any
            # client's connection while a dozen exporters start at once
            args = [
                f"--simulate={scenario}", f"--collectors={path}", "--dialect=dcgm", "--listen=127.0.0.1:0",
                "--interval=1", "--log-level=info", "--node-name=node-1",
            ]  # fmt: skip
            processes.start(f"{scenario}-{name}", python_module("exporter", *args))

        def serving(case: tuple[str, str]) -> bool:
            processes.check_running(f"{case[1]}-{case[0]}")
            log = Path(processes.log_path(f"{case[1]}-{case[0]}")).read_text()
            address = re.search(r"serving .* on (http://127\.0\.0\.1:\d+)", log)
            if address is not None:
                urls[case] = f"{address.group(1)}/metrics"
            return address is not None

        def polled_thrice(case: tuple[str, str]) -> bool:
            if case not in urls and not serving(case):
                return False
            processes.check_running(f"{case[1]}-{case[0]}")
            try:
                text = http_get(urls[case], timeout=5).decode()
            except OSError:
                return False
            timestamps = re.findall(r"^gpu_pulse_snapshot_timestamp_seconds (\S+)", text, re.M)
            return bool(timestamps) and float(timestamps[0]) - _first.setdefault(case, float(timestamps[0])) >= 2.0

        _first: dict[tuple[str, str], float] = {}
        found: dict[tuple[str, str], Run] = {}
        for case in CASES:
            assert holds_within(lambda case=case: polled_thrice(case), within=120, period=0.25), case  # type: ignore[misc]
            log = Path(processes.log_path(f"{case[1]}-{case[0]}")).read_text()
            found[case] = Run(http_get(urls[case], timeout=5).decode(), log)
        yield found
    finally:
        processes.stop_all()


@pytest.mark.parametrize(("name", "scenario"), CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_every_field_is_served_or_named(runs: dict[tuple[str, str], Run], name: str, scenario: str) -> None:
    run = runs[(name, scenario)]
    met = needs_met(scenario)
    families = run.families()
    named = run.line(NOT_SERVED)
    labels = run.labels_of("DCGM_FI_DEV_GPU_TEMP")
    missing, silent = [], []
    for line in FILES[name]:
        if line.name in NEVER_SERVED:
            served = False
        elif line.type == "label":
            key = next(f.key for f in LABEL_FIELDS if f.dcgm_field == FIELD_IDS[line.name])
            served = label_given(scenario, key)
            if served and line.name not in labels:
                missing.append(f"label {line.name}")
            if not served and f"{line.name} [" not in named:
                silent.append(line.name)
            continue
        else:
            served = family_of(line).needs <= met
        first_spelling = next(
            other.name for other in FILES[name] if FIELD_IDS.get(other.name) == FIELD_IDS.get(line.name)
        )
        if served and first_spelling not in families:
            missing.append(line.name)
        if not served and f"{line.name} [" not in named:
            silent.append(line.name)
    assert missing == [], f"{scenario} gives these, but they are not served: {missing}"
    assert silent == [], f"{scenario} does not give these, and the start-up line does not name them: {silent}"


@pytest.mark.parametrize(("name", "scenario"), CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_what_the_alerts_read_is_served_whatever_the_file_says(
    runs: dict[tuple[str, str], Run], name: str, scenario: str
) -> None:
    """Under dcgm-exporter's current names, as the shipped alerts read them; the ones the file leaves out or spells
    otherwise (1.x names) are named once at start-up."""
    run = runs[(name, scenario)]
    spelled = {FIELD_IDS[line.name]: line.name for line in reversed(FILES[name]) if line.name in FIELD_IDS}
    added = run.line(ADDED)
    for key in sorted(ALWAYS_SERVED):
        measurement = BY_KEY[key]
        if measurement.dcgm is None:
            continue
        family = measurement.dcgm.name
        if measurement.needs <= needs_met(scenario) and not measurement.vector:  # a vector has series once keyed
            assert family in run.families(), family
        if spelled.get(measurement.dcgm_fields[0]) != family:
            assert family in added, f"{family} is served beyond the file but not named: {added}"
        else:
            assert f" {family}," not in f" {added.partition(ADDED)[2]},", f"{family} is in the file"
