"""Every shipped alert of both dialects can fire from the series the exporter really serves, with its default field
set and with dcgm-exporter's own default-counters.csv as `--collectors`, and stays quiet otherwise.

The series names and labels come from real expositions: the real exporter (`python -m exporter --simulate=faulty`,
the real collector over the NVML simulator: XIDs, a lost GPU, a pending row remap, pods) for each dialect and field
set, and the adapter's own metrics registry. Prometheus adds the scrape target's `job` and `instance`; the only
series made up here are Prometheus' `up`, kube-apiserver's `aggregator_unavailable_apiservice`, kube-state-metrics'
`kube_node_labels` and HPA series, the serving-engine series (the scenario runs no engine: they carry the catalogue's
labels on a pod the exporter serves) and the two recorded workload series the inference alerts read (the shipped
recording rules' own tests make them from the exporter's series). Each alert has a
recipe below that gives those real series values over time: one case that must fire it and one that must not, judged
by `promtool test rules` on the committed rule file (`ALERTS{alertstate="firing"}`). An alert without a recipe fails.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest

from adapter.api.selfmetrics import AdapterMetrics
from exporter.catalogue import CLOCK_EVENT_REASONS, POD_INFERENCE_LABELS, Dialect
from exporter.catalogue.dcgm_exporter_files import DEFAULT_COUNTERS, as_csv
from rules.dialect import Vocabulary
from rules.generate import ROOT
from rules.gpu_health import HARDWARE_SLOWDOWN, POWER_CAP, THERMAL, XID_APPLICATION, XID_HARDWARE, XID_MEMORY
from rules.inference import WORKLOAD_TTFT
from rules.jobs import Jobs
from rules.render import RULE_FILE
from rules.saturation import WORKLOAD_SATURATION
from tests.support.exporters import SERVING_LINE
from tests.support.loopback import http_get
from tests.support.processes import ChildProcesses, python_module
from tests.support.waiting import holds_within, patience

pytestmark = pytest.mark.timeout(180)

SCENARIO = "faulty"  # XIDs 13, 48 and 79 (a lost GPU), ECC, a pending row remap, pods: every family has series
FIELD_SETS = ("default", "default-counters.csv")
CASES = [(str(d), s) for d in Dialect for s in FIELD_SETS]
EXPORTER_TARGET = {"job": Jobs().exporter, "instance": "10.0.0.11:9400"}
ADAPTER_TARGET = {"job": Jobs().adapter, "instance": "10.0.1.1:6443"}
Labels = dict[str, str]
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})? \S+$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Exposition:
    """Sample name -> label sets, as Prometheus stores a scrape of it (target labels added)."""

    samples: Mapping[str, tuple[Labels, ...]]

    @classmethod
    def parse(cls, text: str, target: Labels) -> Exposition:
        """The sample lines of a text exposition, names as written (a parser of families would rename some)."""
        found: dict[str, list[Labels]] = {}
        for line in text.splitlines():
            sample = _SAMPLE.match(line)
            if sample is None:
                continue
            labels = {k: v for k, v in _LABEL.findall(sample["labels"] or "")}
            found.setdefault(sample["name"], []).append(labels | target)
        return cls({name: tuple(sets) for name, sets in found.items()})

    def of(self, name: str, **match: str) -> tuple[Labels, ...]:
        sets = tuple(s for s in self.samples.get(name, ()) if all(s.get(k) == v for k, v in match.items()))
        assert sets, f"the exporter serves no {name}{match or ''}: an alert reading it could never fire"
        return sets


def _selector(name: str, labels: Labels) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


@dataclass
class Case:
    """Input series (selector -> promtool values) and the time at which the alert is (not) firing."""

    at: str
    inputs: dict[str, str] = field(default_factory=dict)

    def put(self, name: str, sets: tuple[Labels, ...], values: str) -> Case:
        for labels in sets:
            self.inputs[_selector(name, labels)] = values
        return self


@dataclass(frozen=True)
class World:
    """What a recipe builds from: the dialect's names and the real series."""

    vocab: Vocabulary
    exporter: Exposition
    adapter: Exposition

    def family(self, key: str) -> tuple[str, tuple[Labels, ...]]:
        """Measurement `key`: its family name and the real series of it (constant labels matched)."""
        rendering = self.vocab.rendering(key)
        return rendering.name, self.exporter.of(rendering.name, **rendering.const_labels)

    def split(self, key: str, **extra: str) -> tuple[str, tuple[Labels, ...], tuple[Labels, ...]]:
        """The series of one whole GPU (GPU 0, every pod copy) and the others of the node."""
        name, sets = self.family(key)
        gpu = [s for s in sets if s.get("gpu") == "0" and not s.get(self.vocab.gpu_instance)]
        assert gpu, f"no series of GPU 0 in {name}"
        return name, tuple(s | extra for s in gpu), tuple(s for s in sets if s not in gpu)


Recipe = Callable[[World], tuple[Case, Case]]  # (firing, quiet)


def _device(key: str, fire: str, calm: str, at: str) -> Recipe:
    """GPU 0's series of `key` at `fire` values, the node's other GPUs and the quiet case at `calm`."""

    def build(w: World) -> tuple[Case, Case]:
        name, gpu, rest = w.split(key)
        return (
            Case(at).put(name, gpu, fire).put(name, rest, calm),
            Case(at).put(name, gpu, calm).put(name, rest, calm),
        )

    return build


def _xid(codes: tuple[int, ...]) -> Recipe:
    """The XID counter of GPU 0 with a code of the class: counted at minute 5, again at minute 30 (the alert has
    resolved by then, so only the repeat can fire it at minute 33); quiet: the same code, counted long ago."""

    def build(w: World) -> tuple[Case, Case]:
        rendering = w.vocab.rendering("xid_errors")
        label = rendering.vector_label or "xid"
        name, gpu, _ = w.split("xid_errors")
        one = tuple({**s, label: str(codes[0])} for s in gpu if s[label] == gpu[0][label])
        return Case("33m").put(name, one, "_x5 1x25 2x10"), Case("33m").put(name, one, "3x40")

    return build


def _clock(reasons: tuple[str, ...], for_minutes: int) -> Recipe:
    """GPU 0 held by the alert's first reason for `for_minutes` + 5 minutes; quiet: by every other reason."""
    at, n = f"{for_minutes + 5}m", for_minutes + 10
    others = [r for r in CLOCK_EVENT_REASONS if r not in reasons]

    def build(w: World) -> tuple[Case, Case]:
        rendering = w.vocab.rendering("clock_event_reasons")
        name = rendering.name
        if w.vocab.dialect is Dialect.PROMETHEUS:
            label = rendering.bit_label
            fire, calm = Case(at), Case(at)
            for reason in CLOCK_EVENT_REASONS:
                sets = w.exporter.of(name, **{label: reason})
                fire.put(name, sets, f"{int(reason == reasons[0])}x{n}")
                calm.put(name, sets, f"{int(reason in others)}x{n}")
            return fire, calm
        _, gpu, rest = w.split("clock_event_reasons")
        mask = sum(CLOCK_EVENT_REASONS[r] for r in others)
        return (
            Case(at).put(name, gpu, f"{CLOCK_EVENT_REASONS[reasons[0]]}x{n}").put(name, rest, f"0x{n}"),
            Case(at).put(name, gpu, f"{mask}x{n}").put(name, rest, f"0x{n}"),
        )

    return build


def _memory_nearly_full(w: World) -> tuple[Case, Case]:
    used, used_gpu, used_rest = w.split("fb_used")
    free, free_gpu, free_rest = w.split("fb_free")
    fire = Case("16m").put(used, used_gpu, "39x20").put(free, free_gpu, "1x20")
    calm = Case("16m").put(used, used_gpu, "60x20").put(free, free_gpu, "20x20")
    for case in (fire, calm):
        case.put(used, used_rest, "10x20").put(free, free_rest, "70x20")
    return fire, calm


def _gpu_lost(w: World) -> tuple[Case, Case]:
    name = w.vocab.up
    sets = w.exporter.of(name)
    gpu = tuple(s for s in sets if s.get("gpu") == "0" and not s.get(w.vocab.gpu_instance))
    rest = tuple(s for s in sets if s not in gpu)
    return (
        Case("8m").put(name, gpu, "1x2 0x10").put(name, rest, "1x12"),
        Case("8m").put(name, gpu, "1x12").put(name, rest, "1x12"),
    )


def _self(name: str, fire: str, calm: str, at: str, **match: str) -> Recipe:
    """A self-metric of the exporter: every real series of it at `fire` (or `calm`)."""

    def build(w: World) -> tuple[Case, Case]:
        sets = w.exporter.of(name, **match)
        return Case(at).put(name, sets, fire), Case(at).put(name, sets, calm)

    return build


def _snapshot_stale(w: World) -> tuple[Case, Case]:
    stamp, poll = "gpu_pulse_snapshot_timestamp_seconds", "gpu_pulse_poll_interval_seconds"
    stamps, polls = w.exporter.of(stamp), w.exporter.of(poll)
    return (
        Case("20m").put(stamp, stamps, "0+60x10 600x15").put(poll, polls, "1x25"),
        Case("20m").put(stamp, stamps, "0+60x25").put(poll, polls, "1x25"),
    )


def _target_up(target: Labels, fire: str, calm: str, at: str) -> Recipe:
    def build(w: World) -> tuple[Case, Case]:
        return Case(at).put("up", (target,), fire), Case(at).put("up", (target,), calm)

    return build


def _node_without_exporter(w: World) -> tuple[Case, Case]:
    # kube-state-metrics' own series (nodes' labels as its --metric-labels-allowlist exposes them) and the exporter's
    # target on that node, which a paused pod leaves (from minute 3) or keeps
    node = {"job": "kube-state-metrics", "instance": "10.0.2.1:8080", "node": "gpu-node-1"}
    node |= {"label_nvidia_com_gpu_present": "true"}
    target = EXPORTER_TARGET | {"node": "gpu-node-1"}
    return (
        Case("40m").put("kube_node_labels", (node,), "1x45").put("up", (target,), "1x3"),
        Case("40m").put("kube_node_labels", (node,), "1x45").put("up", (target,), "1x45"),
    )


def _apiservice(w: World) -> tuple[Case, Case]:
    # kube-apiserver's own series (kube-aggregator): its labels as it serves them
    ours = ({"job": "apiserver", "instance": "10.0.0.1:6443", "name": "v1beta2.custom.metrics.k8s.io"},)
    name = "aggregator_unavailable_apiservice"
    return Case("9m").put(name, ours, "0x2 1x10"), Case("9m").put(name, ours, "0x12")


def _serving_nothing(w: World) -> tuple[Case, Case]:
    requests, served = "gpu_pulse_adapter_request_duration_seconds_count", "gpu_pulse_adapter_served_values_total"
    errors = w.adapter.of(requests, code="404")
    values = w.adapter.of(served)
    return (
        Case("18m").put(requests, errors, "0+30x40"),
        Case("18m").put(requests, errors, "0+30x40").put(served, values, "0+60x40"),
    )


def _allocated_idle(w: World) -> tuple[Case, Case]:
    name = "gpu_pulse_pod_gpu_utilization_ratio"
    sets = w.exporter.of(name, share="exclusive")
    return Case("125m").put(name, sets[:1], "0.5x30 0x120"), Case("125m").put(name, sets[:1], "0.5x150")


def _engine(w: World, **extra: str) -> tuple[Labels, ...]:
    """A serving engine's series labels on the first pod the exporter serves a figure of (catalogue
    POD_INFERENCE_LABELS, scraped): the faulty scenario runs no engine."""
    pod = w.exporter.of("gpu_pulse_pod_gpu_utilization_ratio")[0]
    labels = {k: pod[k] for k in ("node", "namespace", "pod")} | {"engine": "vllm", "model": "example"}
    assert set(labels) == set(POD_INFERENCE_LABELS)
    return (labels | EXPORTER_TARGET | extra,)


def _kv_cache_full(w: World) -> tuple[Case, Case]:
    kv, queued = "gpu_pulse_pod_inference_kv_cache_utilization_ratio", "gpu_pulse_pod_inference_queued_requests"
    return (
        Case("10m").put(kv, _engine(w), "0.96x15").put(queued, _engine(w), "0+2x15"),
        Case("10m").put(kv, _engine(w), "0.96x15").put(queued, _engine(w), "4x15"),
    )


def _engine_silent(w: World) -> tuple[Case, Case]:
    name = "gpu_pulse_pod_inference_engine_state"
    gone = _engine(w, state="unreachable", reason="annotations: connection refused")
    return Case("20m").put(name, gone, "1x25"), Case("20m").put(name, _engine(w, state="ready", reason=""), "1x25")


_WORKLOAD = {"namespace": "serve", "workload": "chat", "workload_type": "Deployment"}


def _ttft_over_slo(w: World) -> tuple[Case, Case]:
    p90 = (_WORKLOAD | {"quantile": "0.9"},)
    return Case("15m").put(WORKLOAD_TTFT, p90, "3x25"), Case("15m").put(WORKLOAD_TTFT, p90, "1x25")


def _at_max_replicas(w: World) -> tuple[Case, Case]:
    hpa = {"job": "kube-state-metrics", "instance": "10.0.2.1:8080", "namespace": "serve"}
    hpa |= {"horizontalpodautoscaler": "chat"}
    info = hpa | {"scaletargetref_api_version": "apps/v1", "scaletargetref_kind": "Deployment"}
    info |= {"scaletargetref_name": "chat"}

    def case(current: int) -> Case:
        return (
            Case("15m")
            .put(WORKLOAD_SATURATION, (_WORKLOAD,), "2x20")
            .put("kube_horizontalpodautoscaler_info", (info,), "1x20")
            .put("kube_horizontalpodautoscaler_status_current_replicas", (hpa,), f"{current}x20")
            .put("kube_horizontalpodautoscaler_spec_max_replicas", (hpa,), "4x20")
        )

    return case(4), case(2)


RECIPES: Mapping[str, Recipe] = {
    "GPUDown": _gpu_lost,
    "GPUXidHardwareError": _xid(XID_HARDWARE),
    "GPUXidMemoryError": _xid(XID_MEMORY),
    "GPUXidApplicationError": _xid(XID_APPLICATION),
    "GPUUncorrectableECCErrors": _device("ecc_dbe_volatile", "0x5 2x10", "4x15", "8m"),
    "GPURowRemapFailure": _device("row_remap_failure", "0x3 1x8", "0x11", "8m"),
    "GPURowRemapPending": _device("row_remap_pending", "1x25", "0x25", "20m"),
    "GPUHighTemperature": _device("gpu_temp", "70x2 91x12", "84x15", "10m"),
    "GPUThermalThrottling": _clock(THERMAL, 10),
    "GPUHardwareSlowdown": _clock(HARDWARE_SLOWDOWN, 5),
    "GPUPowerCapped": _clock(POWER_CAP, 30),
    "GPUMemoryNearlyFull": _memory_nearly_full,
    "GPUMemoryFillingUp": _device("fb_free", "70-0.25x120", "10x120", "90m"),
    "GPUAllocatedButIdle": _allocated_idle,
    "GPUExporterDown": _target_up(EXPORTER_TARGET, "1x2 0x10", "1x12", "9m"),
    "GPUNodeWithoutExporter": _node_without_exporter,
    "GPUExporterSnapshotStale": _snapshot_stale,
    "GPUExporterCollectorFailing": _self("gpu_pulse_collector_success", "0x25", "1x25", "20m", collector="nvml"),
    "GPUKubeletMappingUnavailable": _self("gpu_pulse_kubelet_up", "1x2 0x10", "1x12", "9m"),
    "GPUMetricsAPIUnavailable": _apiservice,
    "GPUAdapterDown": _target_up(ADAPTER_TARGET, "1x2 0x20", "1x22", "17m"),
    "GPUAdapterServingNothing": _serving_nothing,
    "GPUInferenceTTFTOverSLO": _ttft_over_slo,
    "GPUInferenceKVCacheFull": _kv_cache_full,
    "GPUInferenceAtMaxReplicas": _at_max_replicas,
    "GPUInferenceEngineSilent": _engine_silent,
}


def _alert_groups(dialect: str) -> list[dict[str, Any]]:
    """The groups of the committed rule file that hold alerts, as they are (the recorded series the inference alerts
    read are given as inputs)."""
    doc = yaml.safe_load((ROOT / "dist" / dialect / RULE_FILE).read_text(encoding="utf-8"))
    groups: list[dict[str, Any]] = doc["groups"]
    return [g for g in groups if any("alert" in rule for rule in g["rules"])]


def _rule_file_alerts(dialect: str) -> list[str]:
    return [rule["alert"] for group in _alert_groups(dialect) for rule in group["rules"] if "alert" in rule]


def _adapter_exposition() -> Exposition:
    """The adapter's own registry after a request answered 404 and one that served a value."""
    metrics = AdapterMetrics(source="direct")
    metrics.requests.labels("custom.metrics.k8s.io", "v1beta2", "404").observe(0.01)
    metrics.served_values.labels("custom.metrics.k8s.io").inc()
    return Exposition.parse(generate_latest(metrics.registry).decode(), ADAPTER_TARGET)


@pytest.fixture(scope="module")
def expositions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], Exposition]]:
    """One real exporter per (dialect, field set), all started at once, read once each has seen the scenario's XID
    48 (t=8 s) while its GPU 1 is still lost (until t=60 s)."""
    workdir = tmp_path_factory.mktemp("alerts-can-fire")
    counters = workdir / "default-counters.csv"
    counters.write_text(as_csv(DEFAULT_COUNTERS), encoding="utf-8")
    processes = ChildProcesses(workdir)
    urls: dict[tuple[str, str], str] = {}
    try:
        for dialect, fields in CASES:
            args = [
                f"--simulate={SCENARIO}", f"--dialect={dialect}", "--listen=127.0.0.1:0", "--interval=1",
                "--log-level=info", "--node-name=gpu-node-1",
            ]  # fmt: skip
            if fields != "default":
                args.append(f"--collectors={counters}")
            processes.start(f"{dialect}-{fields}", python_module("exporter", *args))

        def ready(case: tuple[str, str]) -> bool:
            name = f"{case[0]}-{case[1]}"
            processes.check_running(name)
            if case not in urls:  # its address, from its "serving" line
                urls[case] = processes.wait_for_line(name, SERVING_LINE, patience(60)).group(1) + "/metrics"
            try:
                text = http_get(urls[case], timeout=5).decode()
            except OSError:
                return False
            return 'xid="48"' in text

        found: dict[tuple[str, str], Exposition] = {}
        for case in CASES:
            assert holds_within(lambda case=case: ready(case), within=60, period=0.25), case  # type: ignore[misc]
            found[case] = Exposition.parse(http_get(urls[case], timeout=5).decode(), EXPORTER_TARGET)
        yield found
    finally:
        processes.stop_all()


def _test_group(alert: str, case: Case, firing: bool) -> dict[str, Any]:
    query = f'ALERTS{{alertname="{alert}",alertstate="firing"}}'
    if firing:
        check = {"expr": f"count({query}) > bool 0", "exp_samples": [{"labels": "{}", "value": 1}]}
    else:
        check = {"expr": f"absent({query})", "exp_samples": [{"labels": query.removeprefix("ALERTS"), "value": 1}]}
    return {
        "name": f"{alert} {'fires' if firing else 'stays quiet'}",
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in case.inputs.items()],
        "promql_expr_test": [{"eval_time": case.at, **check}],
    }


_FAILED = re.compile(r'expr: "(count|absent)\(ALERTS\{alertname=\\"(\w+)\\"')


def _failures(output: str) -> list[str]:
    """`<alert> does not fire` / `<alert> fires when it should not`, from promtool's failure report."""
    return [
        f"{name} {'does not fire' if check == 'count' else 'fires when it should not'}"
        for check, name in _FAILED.findall(output)
    ]


def test_every_alert_has_a_recipe() -> None:
    """A new alert without a recipe fails here (and in the promtool runs below)."""
    for dialect in Dialect:
        assert set(_rule_file_alerts(str(dialect))) == set(RECIPES), dialect


@pytest.mark.parametrize(("dialect", "fields"), CASES, ids=[f"{d}-{f}" for d, f in CASES])
def test_every_alert_fires_from_real_series_and_only_then(
    promtool: str, expositions: dict[tuple[str, str], Exposition], dialect: str, fields: str, tmp_path: Path
) -> None:
    world = World(Vocabulary.of(Dialect(dialect)), expositions[(dialect, fields)], _adapter_exposition())
    tests = []
    for alert in _rule_file_alerts(dialect):
        recipe = RECIPES.get(alert)
        assert recipe is not None, f"{alert}: no recipe that makes it fire from the exporter's series"
        fire, calm = recipe(world)
        tests += [_test_group(alert, fire, True), _test_group(alert, calm, False)]
    (tmp_path / RULE_FILE).write_text(yaml.safe_dump({"groups": _alert_groups(dialect)}, width=100_000))
    (tmp_path / "cases.yaml").write_text(
        yaml.safe_dump({"rule_files": [RULE_FILE], "evaluation_interval": "1m", "tests": tests}, width=100_000)
    )
    result = subprocess.run(
        [promtool, "test", "rules", "cases.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, (
        f"{_failures(result.stdout + result.stderr)}\n{result.stdout[-4000:]}{result.stderr[-2000:]}"
    )


def test_a_family_the_exporter_does_not_serve_fails_the_recipe(
    expositions: dict[tuple[str, str], Exposition],
) -> None:
    """The check is live: without DCGM_FI_DEV_ROW_REMAP_PENDING in the scrape, GPURowRemapPending has no case."""
    real = expositions[("dcgm", "default-counters.csv")]
    served = {n: s for n, s in real.samples.items() if n != "DCGM_FI_DEV_ROW_REMAP_PENDING"}
    world = World(Vocabulary.of(Dialect.DCGM), Exposition(served), _adapter_exposition())
    with pytest.raises(AssertionError, match="DCGM_FI_DEV_ROW_REMAP_PENDING"):
        RECIPES["GPURowRemapPending"](world)


def test_a_repeated_xid_fires_where_the_last_xid_gauge_cannot(
    promtool: str, expositions: dict[tuple[str, str], Exposition], tmp_path: Path
) -> None:
    """The same XID 48 on GPU 0 at minute 5 and again at minute 30, as the dcgm dialect serves it: the last-XID gauge
    stays 48 (one series, err_code 48), the counter goes 1 then 2. The expression the XID alerts had before, over the
    gauge, cannot fire for the repeat; the shipped one, over the counter, does."""
    real = expositions[("dcgm", "default-counters.csv")]
    last = "DCGM_FI_DEV_XID_ERRORS"
    gauge = real.of(last, gpu="0", err_code="48")[:1]  # the scenario's GPU 0 had an XID 48 last
    before = f"({last} == 48) and (changes({last}[10m]) > 0 or ({last} unless {last} offset 10m))"
    groups = [*_alert_groups("dcgm"), {"name": "before", "rules": [{"alert": "XidBefore", "expr": before}]}]
    world = World(Vocabulary.of(Dialect.DCGM), real, _adapter_exposition())
    fire, _ = RECIPES["GPUXidHardwareError"](world)
    fire.put(last, gauge, "_x5 48x35")
    tests = [_test_group("GPUXidHardwareError", fire, True), _test_group("XidBefore", fire, False)]
    (tmp_path / RULE_FILE).write_text(yaml.safe_dump({"groups": groups}, width=100_000))
    (tmp_path / "cases.yaml").write_text(
        yaml.safe_dump({"rule_files": [RULE_FILE], "evaluation_interval": "1m", "tests": tests}, width=100_000)
    )
    result = subprocess.run(
        [promtool, "test", "rules", "cases.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
