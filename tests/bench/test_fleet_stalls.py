"""bench/fleet.py's reading of the replicas' own histograms (answers, the loop's lag, GC pauses by generation) from a
real adapter registry's exposition, and their quantiles over a measurement."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from prometheus_client import generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from fleet import SUM, histograms_of, quantile_of, stall_figures

from adapter.api.selfmetrics import AdapterMetrics


def test_quantiles_are_the_bounds_of_the_buckets_that_hold_them() -> None:
    buckets = {0.001: 50.0, 0.01: 98.0, 0.1: 100.0, math.inf: 100.0, SUM: 1.5}
    assert quantile_of(buckets, 0.5) == 0.001
    assert quantile_of(buckets, 0.99) == 0.1
    assert math.isnan(quantile_of({SUM: 0.0}, 0.99))
    assert stall_figures({"gc2": buckets})["gc2"] == {"count": 100.0, "seconds": 1.5, "p50_s": 0.001, "p99_s": 0.1}


def test_the_histograms_are_read_from_an_adapters_exposition() -> None:
    metrics = AdapterMetrics("direct")
    metrics.requests.labels("custom.metrics.k8s.io", "v1beta2", "200").observe(0.004)
    metrics.requests.labels("external.metrics.k8s.io", "v1beta1", "200").observe(0.5)  # another group: not read
    metrics.stalls.loop_lag.observe(0.003)
    metrics.stalls.gc_pause.labels("2").observe(0.2)
    metrics.stalls.gc_pause.labels("0").observe(0.0007)
    found = histograms_of(generate_latest(metrics.registry).decode())
    assert found["requests"][0.005] == 1 and found["requests"][math.inf] == 1 and found["requests"][SUM] == 0.004
    assert found["loop_lag"][0.0025] == 0 and found["loop_lag"][0.005] == 1
    assert found["gc2"][0.25] == 1 and found["gc2"][0.1] == 0 and found["gc2"][SUM] == 0.2
    assert found["gc0"][0.001] == 1 and found["gc1"][math.inf] == 0


def test_the_slowest_answers_say_when_and_which_replica_and_whether_it_was_just_back() -> None:
    from fleet import FRESHLY_READY, Answer, slowest

    started = 1000.0
    restarts = [(1, 1100.0, 1110.0)]  # replica 1: stopped at +100 s, ready again at +110 s
    answers = [
        Answer(1000, 0.012, 200, 1000, [], replica=0, asked=1050.0),
        Answer(1000, 0.030, 200, 1000, [], replica=1, asked=1115.0),  # 5 s after its replica came back
        Answer(1000, 0.025, 200, 1000, [], replica=1, asked=1110.0 + FRESHLY_READY + 1),
        Answer(1000, 0.009, 200, 1000, [], replica=0, asked=1200.0),
    ]
    listed = slowest(answers, started, restarts, shown=2)
    assert [round(a["ms"]) for a in listed] == [30, 25]
    assert [a["freshly_ready"] for a in listed] == [True, False]
    assert listed[0]["replica"] == 1 and listed[0]["at_s"] == 115.0
