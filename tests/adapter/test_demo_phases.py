"""The demo's traffic phases as its summary shows them (issue 38's done-when: "the summary's two suggestions differ in
the phases above as the docs say they should", docs/llm-serving.md "Why GPU utilization alone misleads").

The demo runs as the README says, its summary as log lines: each line is what the adapter answered to the HPA's two
questions (gpu_utilization and inference_saturation, simulation/demo/summary.py), so the test reads the adapter's
answers and works nothing out itself. It waits through the quiet phase and the burst (three minutes) and checks the
lines near each phase's end, once the exporter's one-minute utilization window has settled on it:
- quiet-busy-gpu: an HPA on GPU utilization scales up, one on saturation stays or scales down;
- burst: both scale up, the one on saturation far more (driven by the queue), as utilization cannot read above 100.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulation.demo.scenarios import TRAFFIC
from tests.adapter.test_demo_run import running_demo
from tests.support.waiting import patience, wait_for

pytestmark = pytest.mark.timeout(360)

LINE = re.compile(
    r"\[traffic (\S+)\] llm-inference: (\d+) pods, gpu_utilization avg [\d.]+% \(.*?\); "
    r"HPA at 60%: (\d+) -> (\d+) replicas \(.*?\); inference_saturation avg ([\d.]+)% \(.*?\); "
    r"HPA at 100%: (\d+) -> (\d+) replicas \(.*?\), driven by (\S+)"
)
SETTLED = 3  # lines at a phase's end that the checks read (the summary prints every 3 s)


def _phases(output: str) -> list[tuple[str, list[re.Match[str]]]]:
    """The summary lines in runs of one phase each, in order."""
    runs: list[tuple[str, list[re.Match[str]]]] = []
    for match in LINE.finditer(output):
        if runs and runs[-1][0] == match[1]:
            runs[-1][1].append(match)
        else:
            runs.append((match[1], [match]))
    return runs


def test_the_two_hpas_disagree_in_the_quiet_phase_and_in_the_burst_as_the_docs_say(tmp_path: Path) -> None:
    quiet, burst, moderate = (p.name for p in TRAFFIC)
    with running_demo(tmp_path) as demo:
        wait_for(
            lambda: any(name == moderate for name, _ in _phases(demo.output())),
            "the summary's first line of the moderate phase",
            patience(300),
        )
        runs = _phases(demo.output())
    assert [name for name, _ in runs][:3] == [quiet, burst, moderate], [name for name, _ in runs]
    assert len(runs[0][1]) > SETTLED and len(runs[1][1]) > SETTLED
    for line in runs[0][1][-SETTLED:]:
        _, pods, gpu_now, gpu_wants, saturation, sat_now, sat_wants, _ = line.groups()
        assert int(pods) == int(gpu_now) == int(sat_now) == 4, line[0]
        # the GPUs read busy: an HPA on utilization adds pods ...
        assert int(gpu_wants) > int(gpu_now), line[0]
        # ... for requests that an idle queue and a near-empty KV cache say need no more
        assert int(sat_wants) <= int(sat_now) and float(saturation) < 100, line[0]
    for line in runs[1][1][-SETTLED:]:
        _, _, gpu_now, gpu_wants, saturation, _, sat_wants, driver = line.groups()
        # utilization is pinned near 100: the most it can ask for is 100/60 of the pods ...
        assert int(gpu_wants) <= -(-int(gpu_now) * 100 // 60), line[0]
        # ... while the queue grows: saturation asks for far more, and says why
        assert int(sat_wants) > 2 * int(gpu_wants) and driver == "queued_requests", line[0]
        assert float(saturation) > 200, line[0]
