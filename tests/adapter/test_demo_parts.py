"""The demo's parts on their own: the HPA calculation, the scenarios' moving load, the summary, the kubeconfig guard,
the printed commands, and `run_demo` refusing options that cannot work (before anything starts)."""

from __future__ import annotations

import errno
import io
import math
import os
import shlex
import socket
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulation import load_scenario
from simulation.curves import Curve, LoadCurve, Phase, phase_at
from simulation.demo import DemoOptions, run_demo
from simulation.demo.cluster import demo_pods
from simulation.demo.commands import kubectl_commands
from simulation.demo.hpa import suggest_replicas
from simulation.demo.nodes import child_environment
from simulation.demo.scenarios import (
    DEPLOYMENT,
    NAMESPACE,
    TARGET_UTILIZATION,
    TRAFFIC,
    TRAFFIC_CYCLE_S,
    traffic_phase,
    write_scenarios,
)
from simulation.demo.summary import render_line, render_screen, summarize, summarize_saturation
from simulation.demo.trust import (
    KubeconfigInUseError,
    clear_kubeconfig_path,
    create_trust,
    is_demo_kubeconfig,
    server_url,
    serving_hostnames,
    write_demo_kubeconfig,
)
from simulation.scenario import Scenario
from tests.support.hpa import hpa_desired_replicas
from toolkit.settings import ListenAddress, parse_listen

TARGET = Decimal(TARGET_UTILIZATION)
percentages = st.decimals(min_value=Decimal("0.5"), max_value=100, places=3)


@given(st.lists(percentages, min_size=1, max_size=30))
def test_with_every_pod_reporting_the_suggestion_is_the_hpa_formula(values: list[Decimal]) -> None:
    pods = [f"p{i}" for i in range(len(values))]
    suggestion = suggest_replicas(pods, dict(zip(pods, values, strict=True)), TARGET)
    assert suggestion.current == len(pods) and suggestion.missing == 0
    assert suggestion.desired == max(1, hpa_desired_replicas(values, TARGET))


def test_pods_without_figures_damp_the_change_as_the_hpa_does() -> None:
    pods = ["a", "b", "c", "d"]
    # scale up (90 % is 1.5 x the target), but with the missing pods at 0: (90+90+0+0)/4 = 45 %, below the target:
    # the direction flips, so nothing changes
    assert suggest_replicas(pods, {"a": Decimal(90), "b": Decimal(90)}, TARGET).desired == 4
    # scale up that survives: (120+120+120+0)/4 = 90 -> ratio 1.5 -> ceil(1.5 * 4) = 6
    high = {"a": Decimal(120), "b": Decimal(120), "c": Decimal(120)}
    assert suggest_replicas(pods, high, TARGET).desired == 6
    # scale down: missing pods count as the target -> (6+6+60+60)/4 = 33 -> ratio 0.55 -> ceil(2.2) = 3
    low = suggest_replicas(pods, {"a": Decimal(6), "b": Decimal(6)}, TARGET)
    assert (low.desired, low.missing) == (3, 2)
    assert "scale down" in low.verdict
    # no figures at all: the HPA does not act
    none = suggest_replicas(pods, {}, TARGET)
    assert (none.desired, none.ratio) == (4, None)
    # within the tolerance of 0.1 nothing changes; min and max replicas bound the rest
    assert suggest_replicas(pods, dict.fromkeys(pods, Decimal(65)), TARGET).desired == 4
    assert suggest_replicas(pods, dict.fromkeys(pods, Decimal(100)), TARGET, max_replicas=5).desired == 5
    assert suggest_replicas(pods, dict.fromkeys(pods, Decimal(1)), TARGET).desired == 1


def _written(tmp_path: Path) -> dict[str, Path]:
    return write_scenarios(tmp_path, seed=1)


def test_the_scenarios_put_the_deployment_on_every_kind_of_node(tmp_path: Path) -> None:
    scenarios = {node: load_scenario(str(path)) for node, path in _written(tmp_path).items()}
    pods = demo_pods(scenarios)
    assert {p.namespace for p in pods} == {NAMESPACE}
    inference = [p for p in pods if p.workload.name == DEPLOYMENT]
    assert len(inference) == 4 and {p.node for p in inference} == set(scenarios)
    for scenario in scenarios.values():
        for pod in scenario.pods:
            assert pod.labels["app"] in {"llm-inference", "embeddings", "finetune"}
            assert pod.uid  # the loader derives it: the Kubernetes API test server gets the same


def _inference_curves(scenario: Scenario) -> list[Curve]:
    """The load curve behind each llm-inference pod: its processes' own, else its GPU's or MIG instance's."""
    curves = []
    for pod in scenario.pods:
        if pod.labels.get("app") != DEPLOYMENT:
            continue
        for container in pod.containers:
            own = [p.load for p in scenario.processes if p.pid in container.pids and p.load is not None]
            for ref in container.gpus if not own else ():
                gpu = scenario.gpus[ref.gpu]
                own.append(gpu.load if ref.mig is None else next(m.load for m in gpu.mig or () if m.index == ref.mig))
            curves += [load.compile(f"{scenario.name}/{pod.name}") for load in own]
    return curves


def test_the_load_moves_the_hpa_suggestion_over_a_few_minutes(tmp_path: Path) -> None:
    """The llm-inference pods' load, averaged over the exporter's one-minute window as /pods reports it: the HPA's
    answer changes several times within ten minutes, up and down."""
    curves = [c for path in _written(tmp_path).values() for c in _inference_curves(load_scenario(str(path)))]
    assert len(curves) == 4

    def windowed(curve: Curve, t: int) -> Decimal:
        return Decimal(sum(curve(s) for s in range(t - 59, t + 1)) / 60).quantize(Decimal("0.001"))

    pods = ["a", "b", "c", "d"]
    suggestions = [
        suggest_replicas(pods, {pod: windowed(c, t) for pod, c in zip(pods, curves, strict=True)}, TARGET)
        for t in range(60, 660, 15)
    ]
    assert len({s.desired for s in suggestions}) >= 3
    assert {"scale up", "scale down"} <= {s.verdict for s in suggestions}


def _body(values: dict[str, str]) -> dict[str, object]:
    items = [
        {
            "describedObject": {"kind": "Pod", "namespace": NAMESPACE, "name": name, "apiVersion": "/v1"},
            "metric": {"name": "gpu_utilization", "selector": None},
            "timestamp": "2026-01-02T03:04:05Z",
            "windowSeconds": 60,
            "value": value,
        }
        for name, value in values.items()
    ]
    return {"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {}, "items": items}


def test_the_summary_shows_each_pod_and_the_hpa_suggestion(tmp_path: Path) -> None:
    scenarios = {node: load_scenario(str(path)) for node, path in _written(tmp_path).items()}
    pods = demo_pods(scenarios)
    names = sorted(p.name for p in pods if p.workload.name == DEPLOYMENT)
    served = dict(zip(names, ["85300m", "90", "75", "72055555556n"], strict=True))
    summary = summarize(pods, _body(served), taken_at=1767323045.0)
    assert [f.name for f in summary.pods] == names
    assert summary.suggestion.desired == math.ceil(4 * (85.3 + 90 + 75 + 72.055555556) / 4 / 60)
    line = render_line(summary)
    assert line.startswith("2026-01-02T03:04:05Z llm-inference: 4 pods, gpu_utilization avg 80.6%")
    assert f"{names[0]} 85.3%" in line and "HPA at 60%: 4 -> 6 replicas (scale up)" in line
    screen = render_screen(summary, ["header"], ["footer"])
    assert screen.splitlines()[0] == "header" and screen.splitlines()[-1] == "footer"
    assert all(name in screen for name in names) and "03:04:05" in screen and "4 -> 6 replicas" in screen
    # a pod the adapter has no figure for is shown as such and counted as the HPA counts it
    partial = summarize(pods, _body({names[0]: "90"}), taken_at=1767323045.0)
    assert partial.suggestion.missing == 3 and "3 pod(s) without a figure" in render_line(partial)
    failed = summarize(pods, None, taken_at=1767323045.0, problem="HTTP 503: no exporter answered")
    assert "no figures: HTTP 503: no exporter answered" in render_line(failed)
    # the traffic phase the pods are in leads the line and the screen
    phased = summarize(pods, _body(served), taken_at=1767323045.0, phase="burst")
    assert render_line(phased).startswith("2026-01-02T03:04:05Z [traffic burst] llm-inference: 4 pods,")
    assert "traffic phase: burst" in render_screen(phased, ["header"], ["footer"])


def test_the_summary_shows_saturation_its_driving_terms_and_the_hpa_at_100_beside(tmp_path: Path) -> None:
    scenarios = {node: load_scenario(str(path)) for node, path in _written(tmp_path).items()}
    pods = demo_pods(scenarios)
    names = sorted(p.name for p in pods if p.workload.name == DEPLOYMENT)
    saturation = summarize_saturation(
        pods,
        _body(dict(zip(names, ["240", "90", "0", "60"], strict=True))),
        dict(zip(names, ["queued_requests", "kv_cache_utilization", "idle", "queued_requests"], strict=True)),
    )
    assert saturation.suggestion.desired == math.ceil(4 * (240 + 90 + 0 + 60) / 4 / 100)
    assert saturation.driver == "queued_requests"  # 240 + 60 of the 390 the pods sum to
    gpu = summarize(pods, _body(dict.fromkeys(names, "50")), taken_at=1767323045.0, saturation=saturation)
    line = render_line(gpu)
    assert "HPA at 60%: 4 -> 4 replicas" in line  # GPU utilization says hold ...
    assert f"{names[0]} 240.0% queued_requests" in line and f"{names[2]} 0.0% idle" in line
    assert "inference_saturation avg 97.5%" in line
    assert "HPA at 100%: 4 -> 4 replicas (stay (within tolerance)), driven by queued_requests" in line
    assert "HPA at 100%: 4 -> 4" in render_screen(gpu, ["header"], ["footer"])
    failed = summarize_saturation(pods, None, {}, problem="HTTP 404: no such metric")
    assert "inference_saturation: no figures: HTTP 404" in render_line(replace(gpu, saturation=failed))


def test_the_kubeconfig_is_ours_to_replace_and_nobody_elses(tmp_path: Path) -> None:
    trust = create_trust(tmp_path / "trust", ListenAddress("127.0.0.1", 6443), "demo-user", ())
    path = tmp_path / "gpu-pulse-demo.kubeconfig"
    write_demo_kubeconfig(path, "https://127.0.0.1:6443", trust)
    assert is_demo_kubeconfig(path) and path.stat().st_mode & 0o077 == 0
    clear_kubeconfig_path(path)  # a demo kubeconfig left by an earlier run goes
    assert not path.exists()
    foreign = tmp_path / "config"
    foreign.write_text("apiVersion: v1\nkind: Config\ncurrent-context: production\n")
    with pytest.raises(KubeconfigInUseError, match="not a gpu-pulse demo kubeconfig"):
        clear_kubeconfig_path(foreign)
    assert "production" in foreign.read_text()


def test_kubectl_is_pointed_at_an_address_the_certificate_names() -> None:
    assert server_url(parse_listen("0.0.0.0:6443"), 6443) == "https://127.0.0.1:6443"
    assert server_url(parse_listen("[::1]:7443"), 7443) == "https://[::1]:7443"
    assert server_url(parse_listen("127.0.0.1:0"), 41000) == "https://127.0.0.1:41000"
    assert "0.0.0.0" not in serving_hostnames(parse_listen(":6443"))
    assert serving_hostnames(parse_listen("demo.local:6443"))[0] == "demo.local"


def test_the_printed_commands_are_one_shell_word_per_argument() -> None:
    commands = [shlex.split(command) for _, command in kubectl_commands(Path("my dir/demo.kubeconfig"))]
    assert all(argv[:4] == ["kubectl", "--kubeconfig", "my dir/demo.kubeconfig", "get"] for argv in commands)
    assert [argv[4:] for argv in commands[:5]] == [
        ["pods", "-n", "demo"],
        ["deploy", "-n", "demo"],
        ["statefulsets", "-n", "demo"],
        ["nodes", "-L", "nvidia.com/gpu.product"],
        ["hpa", "-n", "demo"],
    ]
    for argv in commands[5:]:
        assert argv[4] == "--raw" and len(argv) == 6 and argv[5].startswith("/apis/")


def test_exporter_children_get_no_settings_of_ours_and_find_the_package() -> None:
    env = child_environment({"GPU_PULSE_LISTEN": "0.0.0.0:1", "PATH": "/bin", "PYTHONPATH": "/elsewhere"})
    assert "GPU_PULSE_LISTEN" not in env and env["PATH"] == "/bin"
    root, rest = env["PYTHONPATH"].split(":", 1)
    assert (Path(root) / "exporter" / "__init__.py").exists() and rest == "/elsewhere"


def test_a_taken_address_fails_at_once_without_a_kubeconfig(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = io.StringIO()
        kubeconfig = tmp_path / "demo.kubeconfig"
        assert run_demo(DemoOptions(listen=f"127.0.0.1:{port}", kubeconfig=kubeconfig), out=out) == 2
    lines = capsys.readouterr().err.splitlines()
    in_use = os.strerror(errno.EADDRINUSE)
    hint = "(is another demo or adapter running? choose another --listen)"
    assert lines == [f"gpu-pulse-adapter: error: --listen 127.0.0.1:{port}: cannot listen: {in_use} {hint}"]
    assert not kubeconfig.exists() and out.getvalue() == ""


def test_options_that_cannot_work_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    foreign = tmp_path / "config"
    foreign.write_text("current-context: production\n")
    # port 0: an address that can be bound, so that the kubeconfig is what fails
    assert run_demo(DemoOptions(listen="127.0.0.1:0", kubeconfig=foreign), out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-pulse-adapter: error: --demo-kubeconfig") and "production" in foreign.read_text()
    assert run_demo(DemoOptions(listen="nowhere", kubeconfig=tmp_path / "k"), out=io.StringIO()) == 2
    assert "--listen nowhere" in capsys.readouterr().err
    with pytest.raises(ValueError, match="interval"):
        DemoOptions(interval=0)


def _engine_arrivals(scenario: Scenario) -> list[Curve]:
    return [
        pod.engine.arrivals.compile(f"{scenario.name}/{pod.name}/arrivals")
        for pod in scenario.pods
        if pod.engine is not None and pod.labels.get("app") == DEPLOYMENT
    ]


@given(st.floats(min_value=0, max_value=3 * TRAFFIC_CYCLE_S, allow_nan=False))
def test_a_curve_with_phases_holds_each_phases_level_in_turn(t: float) -> None:
    phases = tuple(Phase(name=p.name, duration_s=p.duration_s, level=p.gpu_percent) for p in TRAFFIC)
    flat = LoadCurve(phases=phases).compile("flat")
    shown = phase_at(phases, t)
    assert shown is not None and shown.name == traffic_phase(t).name
    assert flat(t) == traffic_phase(t).gpu_percent


def test_the_gpus_and_the_engines_follow_one_traffic_schedule(tmp_path: Path) -> None:
    """Each llm-inference pod's GPU curve and its engine's arrivals name the same phases for the same spans, the
    summary's phase names them too, and in every phase the engine's arrivals tell the story its GPU reading does
    not: low while the GPU reads high, past the engine's saturation while the GPU is pinned."""
    scenarios = [load_scenario(str(path)) for path in _written(tmp_path).values()]
    for scenario in scenarios:
        engines = [p.engine for p in scenario.pods if p.engine is not None and p.labels.get("app") == DEPLOYMENT]
        for engine in engines:
            spans = [(p.name, p.duration_s) for p in engine.arrivals.phases]
            assert spans == [(p.name, p.duration_s) for p in TRAFFIC]
    gpu_curves = [c for s in scenarios for c in _inference_curves(s)]
    arrivals = [c for s in scenarios for c in _engine_arrivals(s)]
    assert len(gpu_curves) == len(arrivals) == 4
    for curve in (*gpu_curves, *arrivals):
        assert [p.name for p in curve.phases] == [p.name for p in TRAFFIC]
    quiet, burst, _ = TRAFFIC
    middle = quiet.duration_s / 2
    assert all(c(middle) > TARGET_UTILIZATION for c in gpu_curves)  # GPU says busy ...
    assert all(c(middle) * 1.5 < 25 for c in arrivals)  # ... at under a quarter of the engine's saturation rate
    during = quiet.duration_s + burst.duration_s / 2
    assert all(c(during) >= 95 for c in gpu_curves)
    assert all(c(during) * 1.5 > 110 for c in arrivals)  # more arrives than the engine can finish: the queue grows
