"""The report against a real Prometheus holding a history whose answer is known (known_history.py): every figure and
every recommendation, with workloads from kube-state-metrics' history and from the Kubernetes API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from report.cli import main
from simulation.kubeconfig import write_kubeconfig
from tests.report.conftest import KnownPrometheus, by_workload, run_report
from tests.report.known_history import GIB, PODS, WINDOW_HOURS, KnownPod
from tests.support.kubeapi import kube_api_on_a_thread

HOURS = float(WINDOW_HOURS)
# (namespace, kind, name) -> (action, profile, saving in GPU-hours)
EXPECTED = {
    ("ml", "StatefulSet", "notebook"): ("reclaim", None, HOURS),
    ("ml", "Deployment", "small-infer"): ("mig", "1g.10gb", HOURS * 6 / 7),
    ("ml", "Deployment", "mid-infer"): ("mig", "3g.40gb", HOURS * 4 / 7),
    ("ml", "Job", "train"): ("keep", None, 0.0),
    ("team", "Deployment", "chat"): ("keep", None, 0.0),
    ("team", "StatefulSet", "embed"): ("reclaim", None, HOURS / 2),
    ("team", "StatefulSet", "finetune"): ("mig", "2g.20gb", HOURS * (3 / 7 - 2 / 7)),
    ("team", "Pod", "rerank-0"): ("share", None, HOURS * 3 / 4),
}


def share_of(pod: KnownPod) -> float:
    """GPUs the pod holds: its MIG profile's share (3g of 7), 1/n of a GPU shared by n."""
    return (3 / 7 if pod.mig else 1.0) / pod.sharing


def busy_of(pod: KnownPod) -> float:
    return pod.utilization * (3 / 7 if pod.mig else 1.0)


def test_every_workload_has_its_figures(document: dict[str, Any]) -> None:
    workloads = by_workload(document)
    assert set(workloads) == set(EXPECTED)
    assert document["window"]["step_seconds"] == 60
    for pod in PODS:
        f = workloads[(pod.namespace, *pod.workload)]["figures"]
        held = share_of(pod) * HOURS
        assert f["pods"] == 1
        assert f["gpus_mean"] == pytest.approx(share_of(pod), rel=1e-9)
        assert f["held_gpu_hours"] == pytest.approx(held, rel=1e-9)
        assert f["known_gpu_hours"] == pytest.approx(held, rel=1e-9)
        assert f["busy_gpu_hours"] == pytest.approx(busy_of(pod) * HOURS, rel=1e-9)
        assert f["idle_gpu_hours"] == pytest.approx(max(0.0, held - busy_of(pod) * HOURS), rel=1e-9, abs=1e-9)
        idle_held = held if pod.utilization <= 0.05 else 0.0
        assert f["idle_held_gpu_hours"] == pytest.approx(idle_held, rel=1e-9)
        for q in ("utilization_p50", "utilization_p95", "utilization_p99"):
            assert f[q] == pytest.approx(pod.utilization, rel=1e-9), q
        assert f["memory_p99"] == pytest.approx(pod.memory_gib * GIB, rel=1e-9)
        assert f["memory_peak"] == pytest.approx(pod.memory_gib * GIB, rel=1e-9)
        assert f["models"] == [{"model": pod.model, "gpu_hours": pytest.approx(held, rel=1e-9)}]
        assert f["placement"] == ("mig" if pod.mig else "shared" if pod.sharing > 1 else "whole")
        # SM activity where the waste rules recorded it (train-0's GPU has GPM), none elsewhere
        assert f["sm_active_p50"] == pod.sm_active and f["sm_active_p95"] == pod.sm_active


def test_every_recommendation_and_its_saving(document: dict[str, Any]) -> None:
    workloads = by_workload(document)
    for key, (action, profile, saving) in EXPECTED.items():
        rec = workloads[key]["recommendation"]
        assert (rec["action"], rec["profile"]) == (action, profile), (key, rec["why"])
        assert rec["saving_gpu_hours"] == pytest.approx(saving, rel=1e-9), key
        assert rec["why"], key
    assert workloads[("team", "Pod", "rerank-0")]["recommendation"]["share_with"] == 4
    totals = document["totals"]
    assert totals["held_gpu_hours"] == pytest.approx(sum(share_of(p) for p in PODS) * HOURS, rel=1e-9)
    assert totals["saving_gpu_hours"] == pytest.approx(sum(s for _, _, s in EXPECTED.values()), rel=1e-9)


def test_the_why_names_the_figures(document: dict[str, Any]) -> None:
    workloads = by_workload(document)
    small = " ".join(workloads[("ml", "Deployment", "small-infer")]["recommendation"]["why"])
    assert "1g.10gb" in small and "8.0%" in small and "6.00 GiB" in small and "20.0% headroom" in small
    notebook = " ".join(workloads[("ml", "StatefulSet", "notebook")]["recommendation"]["why"])
    assert "100.0% of the" in notebook and "5.0%" in notebook


def test_the_timeline_adds_up(document: dict[str, Any]) -> None:
    timeline = document["timeline"]
    assert len(timeline["times"]) == WINDOW_HOURS * 60
    held = sum(share_of(p) for p in PODS)
    busy = sum(busy_of(p) for p in PODS)
    assert all(h == pytest.approx(held) for h in timeline["held"])
    assert all(b == pytest.approx(busy) for b in timeline["busy"])


def test_prices_turn_hours_into_money(known: KnownPrometheus, tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text('currency: EUR\nper_hour: {"NVIDIA H100 80GB HBM3": 2.5}\ndefault: 1\n', encoding="utf-8")
    workloads = by_workload(run_report(known, tmp_path / "out", "--prices", str(prices)))
    notebook = workloads[("ml", "StatefulSet", "notebook")]
    assert notebook["figures"]["cost"] == pytest.approx(2.5 * HOURS)
    assert notebook["recommendation"]["saving_cost"] == pytest.approx(2.5 * HOURS)
    finetune = workloads[("team", "StatefulSet", "finetune")]
    assert finetune["figures"]["cost"] == pytest.approx(2.5 * HOURS * 3 / 7)
    assert workloads[("team", "Pod", "rerank-0")]["figures"]["cost"] == pytest.approx(1 * HOURS)


def test_the_kubernetes_api_names_the_same_workloads(known: KnownPrometheus, tmp_path: Path) -> None:
    with kube_api_on_a_thread() as kube:
        for pod in PODS:
            kind, name = pod.owner
            if kind == "ReplicaSet":
                kube.put_replica_set(pod.namespace, name, deployment=pod.workload[1])
            owner = None if kind == "<none>" else (kind, name)
            kube.put_pod(pod.namespace, pod.pod, node=pod.node, owner=owner, gpus_per_container=1)
        config = write_kubeconfig(tmp_path / "kubeconfig", server=kube.url)
        document = run_report(known, tmp_path / "out", "--kubeconfig", str(config))
    assert set(by_workload(document)) == set(EXPECTED)
    assert document["owners"].startswith("the Kubernetes API (8 pods)")


def test_a_window_without_pod_series_is_nothing_to_judge(
    known: KnownPrometheus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A window before the history began (a new install, a --window too long, the wrong Prometheus): exit 3 and one
    line naming the series looked for, the Prometheus and the window; the page and report.json say so too."""
    end = known.end - 30 * 86400
    args = ["--prometheus-url", known.url, "--window", "1h", "--end", str(end), "--output", str(tmp_path)]
    assert main(args) == 3
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("gpu-pulse-report: error: nothing to judge: no gpu_pulse_pod_gpu_sharing_pods series")
    assert known.url in lines[0] and "index.html says so" in lines[0]
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert "Nothing to judge." in page and "kept" not in page.split("Nothing to judge.")[0]
    document = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert document["workloads"] == [] and document["nothing_to_judge"].startswith("nothing to judge")
