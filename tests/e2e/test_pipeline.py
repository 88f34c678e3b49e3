"""The whole pipeline end to end: simulated GPUs -> exporters -> Prometheus with the shipped rules -> the adapter (both
sources) -> what an HPA computes, asked through `kubectl get --raw` and the HTTP API (see stack.py and cluster.py).

The tests run in this order on one stack: the healthy cluster first (answers through kubectl and the HTTP API, the
two sources agreeing, every recording rule, no alert), then the simulator's timeline (the load change of `llm-serve`,
a GPU falling off the bus), the HPA's scale-up once the exporters' utilization window has taken the change in, the
GPU-lost alert firing after its `for`, every dashboard query (alerts fire by then), and last an exporter killed.
Each test that needs the cluster before a timeline event fails if the stack came up too late for it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from adapter.quantity import parse_quantity
from dashboards.generate import boards
from exporter.attribution.pods_builder import DEFAULT_WINDOW_SECONDS
from exporter.catalogue import BY_KEY, DEFAULT_MEASUREMENTS, FIELD_SETS, Dialect
from rules.promql import metric_names
from tests.e2e.answers import (
    CUSTOM,
    EXTERNAL,
    Served,
    hpa_path,
    pods_mean_utilization,
    served_items,
)
from tests.e2e.checks import (
    DIRECT_TOLERANCE,
    OBSERVATION,
    POLL,
    SOURCES_TOLERANCE,
    after_the_kill,
    answer,
    assert_fresh,
    desired_replicas,
    eventually_selects,
    exporter_truth,
    headroom,
    kill_exporter,
    require_before,
    source_tolerance,
)
from tests.e2e.cluster import (
    CHAT,
    CLOCK_OFFSETS,
    EMBED,
    FINETUNE,
    GPU_LOST_AT,
    HIGH_LOAD,
    KILLED_NODE,
    LLM_SERVE,
    LOAD_CHANGE_AT,
    LOST_GPU,
    LOW_LOAD,
    NOTEBOOK,
    RERANK,
    RERANK_LOAD,
    TRAINER,
    WITH_UTILIZATION,
    WORKLOADS,
    XID_GPU,
    pods_of,
)
from tests.e2e.stack import DIRECT_MAX_AGE, INTERVAL, PROMETHEUS_MAX_AGE, E2EStack
from tests.support.adapters import AdapterProcess
from tests.support.dashboard_queries import board_dialects, panel_targets, query_variables, substitute, variable_names
from tests.support.kubectl import kubectl_get_raw
from tests.support.prometheus import shipped_rules
from tests.support.waiting import patience, wait_for
from toolkit.pods_contract import NodePods

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def test_exporters_report_the_scenarios_pods(stack: E2EStack) -> None:
    for node, exporter in stack.exporters.items():
        document = exporter.document()
        assert document.node == node
        expected = {(p.namespace, p.name, p.uid) for p in stack.scenarios[node].pods}
        assert {(p.namespace, p.name, p.uid) for p in document.pods} == expected


def test_both_adapters_answer_the_hpa_query_through_kubectl(stack: E2EStack) -> None:
    require_before(stack, "e2e-whole", LOAD_CHANGE_AT, "the flat 30 % of llm-serve")
    for adapter in stack.adapters:
        for workload in WORKLOADS:
            path = hpa_path(workload)
            result = kubectl_get_raw(stack.kubeconfigs[adapter.name], path)
            assert result.code == 0, f"{adapter.name} {path}: {result.stderr}"
            items = served_items(result.body)
            truth = exporter_truth(stack, workload, adapter)
            expected = {pod for pod, figure in truth.items() if figure is not None}
            if workload in WITH_UTILIZATION:
                assert expected == set(pods_of(workload, stack.scenarios)), f"{workload.name}: {truth}"
            assert set(items) == expected, f"{adapter.name} {workload.name}: served {sorted(items)}"
            for name, item in items.items():
                figure = truth[name]
                assert figure is not None
                assert abs(float(item.value) - figure) <= source_tolerance(adapter, stack), (
                    f"{adapter.name} {workload.name}/{name}: served {item.value}, the exporter says {figure:.2f}"
                )
                assert Decimal(0) <= item.value <= Decimal(100)
            assert_fresh(items, adapter, f"{adapter.name} {workload.name}")
    # the simulator drives llm-serve's GPUs at a flat 30 %: exactly what both sources serve, and what an HPA
    # targeting 60 % makes of it (2 pods at half the target: 1)
    for adapter in stack.adapters:
        items = answer(adapter, stack, hpa_path(LLM_SERVE))
        assert {name: float(item.value) for name, item in items.items()} == {
            pod: LOW_LOAD for pod in pods_of(LLM_SERVE, stack.scenarios)
        }
        assert desired_replicas(items) == 1


def test_pods_on_dra_claims_reach_the_hpa_from_a_dcgm_dialect_exporter(stack: E2EStack) -> None:
    # the DRA node's kubelet names the GPUs only by driver/pool/device; its ResourceSlice gives their UUIDs
    for adapter in stack.adapters:
        kubeconfig = stack.kubeconfigs[adapter.name]
        result = kubectl_get_raw(kubeconfig, hpa_path(RERANK))
        assert result.code == 0, result.stderr
        items = served_items(result.body)
        assert set(items) == set(pods_of(RERANK, stack.scenarios)), f"{adapter.name}: {sorted(items)}"
        assert all(abs(float(item.value) - RERANK_LOAD) <= 1 for item in items.values()), items
        assert desired_replicas(items) == 3  # 2 pods at 75 % against 60 %
        # every default metric, from an exporter of the dcgm dialect, through both sources
        for metric in ("gpu_memory_used_bytes", "gpu_memory_utilization", "gpu_power_watts"):
            result = kubectl_get_raw(kubeconfig, hpa_path(RERANK, metric))
            assert result.code == 0, result.stderr
            assert set(served_items(result.body)) == set(pods_of(RERANK, stack.scenarios)), f"{adapter.name} {metric}"
    series = stack.prometheus.query('gpu_pulse_pod_gpu_utilization_ratio{namespace="search", pod=~"rerank-.*"}')
    assert {s["metric"]["dra_claim_name"] for s in series} == {"rerank-gpu-a", "rerank-gpu-b"}


def test_a_node_whose_clock_is_a_minute_ahead_is_served_on_the_adapters_clock(stack: E2EStack) -> None:
    (node, offset), *_ = CLOCK_OFFSETS.items()
    before = time.time()
    document = stack.exporters[node].document()
    skew = document.generated_at.timestamp() - before
    assert offset - 5 <= skew <= offset + 5, f"{node}'s exporter is not a minute ahead: {skew:.1f} s"
    # its pods are neither dropped as stale nor stamped in the future by the direct source
    for adapter in stack.adapters:
        items = answer(adapter, stack, hpa_path(EMBED))
        assert set(items) == set(pods_of(EMBED, stack.scenarios)), f"{adapter.name}: {sorted(items)}"
        assert_fresh(items, adapter, f"{adapter.name} {EMBED.name} on the skewed node")


def test_kubectl_reads_every_api_of_both_adapters(stack: E2EStack) -> None:
    selector = "labelSelector=app%3Dchat"
    for adapter in stack.adapters:
        kubeconfig = stack.kubeconfigs[adapter.name]
        v1beta1 = kubectl_get_raw(kubeconfig, hpa_path(CHAT, version="v1beta1"))
        assert v1beta1.code == 0, v1beta1.stderr
        assert v1beta1.body["apiVersion"] == "custom.metrics.k8s.io/v1beta1"
        assert set(served_items(v1beta1.body)) == set(pods_of(CHAT, stack.scenarios))
        assert {item["metricName"] for item in v1beta1.body["items"]} == {"gpu_utilization"}
        external = kubectl_get_raw(kubeconfig, f"{EXTERNAL}/namespaces/serving/namespace_gpu_utilization?{selector}")
        assert external.code == 0, external.stderr
        assert external.body["kind"] == "ExternalMetricValueList"
        [item] = external.body["items"]
        pods = served_items(kubectl_get_raw(kubeconfig, hpa_path(CHAT)).body)
        mean = sum((p.value for p in pods.values()), Decimal(0)) / len(pods)  # one GPU per chat pod: the mean over GPUs
        assert abs(mean - parse_quantity(item["value"])) <= 5, (item, pods)
        discovery = kubectl_get_raw(kubeconfig, f"{CUSTOM}/v1beta2")
        assert discovery.code == 0, discovery.stderr
        assert {"pods/gpu_utilization", "pods/gpu_memory_used_bytes"} <= {
            r["name"] for r in discovery.body["resources"]
        }


def test_the_http_api_serves_memory_owners_and_refuses_strangers(stack: E2EStack) -> None:
    require_before(stack, "e2e-whole", LOAD_CHANGE_AT, "llm-serve as a Deployment")
    for adapter in stack.adapters:
        # A100 MIG instances report no utilization: nothing is made up for finetune, but its memory is served
        assert answer(adapter, stack, hpa_path(FINETUNE)) == {}
        memory = answer(adapter, stack, hpa_path(FINETUNE, "gpu_memory_used_bytes"))
        assert set(memory) == {"finetune-0"}
        assert memory["finetune-0"].value == 15000 * 2**20  # the simulated process's framebuffer memory
        # the workload as a described object: a Deployment's pods aggregated
        path = f"{CUSTOM}/v1beta2/namespaces/serving/deployments.apps/llm-serve/gpu_utilization"
        status, body = adapter.get(path, stack.hpa)
        assert status == 200, body
        [item] = body["items"]
        deployment = {"kind": "Deployment", "namespace": "serving", "name": "llm-serve", "apiVersion": "apps/v1"}
        assert item["describedObject"] == deployment
        assert parse_quantity(item["value"]) == Decimal(LOW_LOAD)  # the mean over its pods' GPUs
        # no client certificate: 401, as a Status
        status, body = adapter.get(hpa_path(LLM_SERVE))
        assert status == 401 and body["kind"] == "Status", body


def test_the_two_sources_agree(stack: E2EStack) -> None:
    require_before(stack, "e2e-whole", LOAD_CHANGE_AT, "agreement on the steady load")
    compared = 0
    for workload in WORKLOADS:
        for metric, tolerance in (("gpu_utilization", SOURCES_TOLERANCE), ("gpu_memory_used_bytes", 0.0)):
            direct = answer(stack.direct, stack, hpa_path(workload, metric))
            via_prometheus = answer(stack.via_prometheus, stack, hpa_path(workload, metric))
            assert set(direct) == set(via_prometheus), f"{workload.name} {metric}"
            for name in direct:
                a, b = direct[name].value, via_prometheus[name].value
                assert abs(a - b) <= Decimal(tolerance), f"{workload.name}/{name} {metric}: direct {a}, prometheus {b}"
                compared += 1
    # every pod reports memory, and all but the A100 MIG pod utilization
    pods = sum(len(pods_of(w, stack.scenarios)) for w in WORKLOADS)
    assert compared == pods + sum(len(pods_of(w, stack.scenarios)) for w in WITH_UTILIZATION) == 27


def test_no_alert_is_pending_or_firing_in_the_healthy_cluster(stack: E2EStack) -> None:
    require_before(stack, LOST_GPU[0], GPU_LOST_AT, "the healthy cluster's alerts")
    # every rule group has been evaluated a few times over scraped data
    workload_rules = "namespace_workload:gpu_pulse_pod_gpu_utilization_ratio:avg"
    eventually_selects(stack, workload_rules, "the workload rules", 20)
    since = time.time()  # three evaluations of every group after this, then no alert may be pending or firing
    wait_for(lambda: _every_group_evaluated_after(stack, since + 2 * INTERVAL), "three rule evaluations", patience(20))
    assert stack.prometheus.query("ALERTS") == []


def _every_group_evaluated_after(stack: E2EStack, moment: float) -> bool:
    groups = stack.prometheus.rule_groups()
    return bool(groups) and all(_rfc3339(group["lastEvaluation"]) >= moment for group in groups)


def _rfc3339(text: str) -> float:
    """Prometheus' timestamps (nanoseconds, Z): to seconds."""
    stamp, _, fraction = text.removesuffix("Z").partition(".")
    return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp() + float(f"0.{fraction or 0}")


def test_every_recording_rule_has_data(stack: E2EStack) -> None:
    # the inference rules read the engines' series, which no exporter here serves (its scenarios' pods run no engine:
    # tests/exporter/test_engines_simulated.py and the dashboards' live stack hold those rules)
    records = [
        rule["record"]
        for rule in shipped_rules(Dialect.PROMETHEUS)
        if "record" in rule and "gpu_pulse_pod_inference_" not in rule["record"]
    ]
    missing: list[str] = records

    def all_recorded() -> bool:
        nonlocal missing
        missing = [record for record in missing if not stack.prometheus.query(record)]
        return not missing

    try:
        wait_for(all_recorded, "every recording rule", patience(30))
    except AssertionError:
        pytest.fail(f"recording rules without data: {missing}")
    # the workload level reads the owners the Kubernetes API has (kube-state-metrics' series of them)
    workloads = stack.prometheus.query("namespace_workload:gpu_pulse_pod_gpu_utilization_ratio:avg")
    found = {(s["metric"]["namespace"], s["metric"]["workload"], s["metric"]["workload_type"]) for s in workloads}
    assert found == {(w.namespace, w.name, w.kind) for w in WITH_UTILIZATION}


def _first_moved_document(stack: E2EStack) -> NodePods | None:
    document = stack.exporters["e2e-whole"].document("serving")
    pods = pods_of(LLM_SERVE, stack.scenarios)
    moved = [pods_mean_utilization(document, "serving", pod) for pod in pods]
    return document if all(m is not None and m > LOW_LOAD + 0.5 for m in moved) else None


def test_a_load_change_reaches_both_adapters_within_their_bounds(stack: E2EStack) -> None:
    require_before(stack, "e2e-whole", LOAD_CHANGE_AT, "the load change")
    for adapter in stack.adapters:
        assert {float(i.value) for i in answer(adapter, stack, hpa_path(LLM_SERVE)).values()} == {LOW_LOAD}
    deadline = stack.wall_time_of("e2e-whole", LOAD_CHANGE_AT) + 2 * INTERVAL + PROMETHEUS_MAX_AGE + DIRECT_MAX_AGE
    deadline += headroom()  # the delays themselves are asserted below, from the exporter's own timestamps
    changed_at: float | None = None  # sample time of the exporter's first figures after the change
    seen: dict[str, float] = {}
    answers: dict[str, dict[str, Served]] = {}
    while len(seen) < 2:
        assert time.time() < deadline, f"the load change did not reach the adapters in time (seen: {seen})"
        if changed_at is None and (document := _first_moved_document(stack)) is not None:
            changed_at = document.generated_at.timestamp()
        for adapter in stack.adapters:
            if adapter.name in seen:
                continue
            items = answer(adapter, stack, hpa_path(LLM_SERVE))
            # both serve a mean over the last minute: it moves by a point per second from the first new sample
            if len(items) == 2 and all(float(i.value) > LOW_LOAD + 0.5 for i in items.values()):
                seen[adapter.name] = time.time()
                answers[adapter.name] = items
        time.sleep(POLL)
    assert changed_at is not None, "the adapters moved before the exporter did"
    direct_delay = seen[stack.direct.name] - changed_at
    prometheus_delay = seen[stack.via_prometheus.name] - changed_at
    print(f"load change: direct after {direct_delay:.2f} s, prometheus after {prometheus_delay:.2f} s")
    assert direct_delay <= DIRECT_MAX_AGE + OBSERVATION, f"direct source: {direct_delay:.1f} s"
    # one scrape and one rule evaluation (the source reads the raw per-pod series: no rule window to wait for)
    assert prometheus_delay <= 2 * INTERVAL + OBSERVATION, f"prometheus source: {prometheus_delay:.1f} s"
    # neither jumps to 90 %: both climb over the minute they say they cover, and they agree while they climb
    for name, items in answers.items():
        assert all(float(i.value) < (LOW_LOAD + HIGH_LOAD) / 2 for i in items.values()), (name, items)
        assert all(i.window is not None and i.window <= 60 for i in items.values()), (name, items)
        assert_fresh(items, stack.direct if name == stack.direct.name else stack.via_prometheus, "after the change")
    direct = answer(stack.direct, stack, hpa_path(LLM_SERVE))
    via_prometheus = answer(stack.via_prometheus, stack, hpa_path(LLM_SERVE))
    assert set(direct) == set(via_prometheus)
    for name in direct:
        a, b = float(direct[name].value), float(via_prometheus[name].value)
        assert abs(a - b) <= SOURCES_TOLERANCE, f"{name} during the climb: direct {a}, prometheus {b}"
    assert {i.window for i in via_prometheus.values()} == {60}, "avg_over_time(...[1m])"


def test_a_lost_gpu_raises_the_gpu_lost_alerts(stack: E2EStack) -> None:
    node, gpu = LOST_GPU
    lost = f'node="{node}", gpu="{gpu}"'
    deadline = stack.wall_time_of(node, GPU_LOST_AT) + 3 * INTERVAL + headroom()
    eventually_selects(stack, f"nvidia_gpu_up{{{lost}}} == 0", "the GPU reported down", max(deadline - time.time(), 1))
    # an XID has no `for`: it fires at once
    node_xid, gpu_xid, xid = XID_GPU
    where = f'node="{node_xid}", gpu="{gpu_xid}"'
    application = f'ALERTS{{alertname="GPUXidApplicationError", alertstate="firing", {where}}}'
    [alert] = eventually_selects(stack, application, "GPUXidApplicationError firing", 10)
    assert alert["metric"]["xid"] == str(xid)
    # GPUDown waits its `for` (1 m) before firing: pending now, and its expression selects exactly the lost GPU
    # (test_the_gpu_lost_alert_fires_after_its_for checks it fires, once the HPA test has used up the minute)
    [rule] = [r for r in shipped_rules(Dialect.PROMETHEUS) if r.get("alert") == "GPUDown"]
    eventually_selects(stack, f'ALERTS{{alertname="GPUDown", {lost}}}', "GPUDown pending", 10)
    selected = stack.prometheus.query(rule["expr"])
    assert [(s["metric"]["node"], s["metric"]["gpu"]) for s in selected] == [(node, str(gpu))]
    lost_count = f'node:nvidia_gpu_up:count{{node="{node}"}} - node:nvidia_gpu_up:sum{{node="{node}"}}'
    # the recorded node series follow at their next evaluations (the cluster dashboard's "GPUs lost")
    eventually_selects(stack, f"({lost_count}) == 1", "the recorded count of lost GPUs", 5 * INTERVAL)
    # the node's other GPUs are still measured and served
    for adapter in stack.adapters:
        assert set(answer(adapter, stack, hpa_path(TRAINER))) == {"trainer-0"}


def test_the_hpa_scales_up_once_the_window_has_taken_in_the_new_load(stack: E2EStack) -> None:
    """The direct source serves the exporter's window mean: it climbs from 30 to 90 % over the window, each answer
    matching what the exporter says, and then an HPA at 60 % scales llm-serve from 2 to 3 on either source."""
    # the last 30 % sample leaves the exporter's window one window after the change
    deadline = stack.wall_time_of("e2e-whole", LOAD_CHANGE_AT) + DEFAULT_WINDOW_SECONDS + DIRECT_MAX_AGE + 2 * INTERVAL
    deadline += headroom()
    while True:
        items = answer(stack.direct, stack, hpa_path(LLM_SERVE))
        truth = exporter_truth(stack, LLM_SERVE, stack.direct)
        for name, item in items.items():
            figure = truth[name]
            assert figure is not None and abs(float(item.value) - figure) <= DIRECT_TOLERANCE + 1, (name, item, figure)
        assert_fresh(items, stack.direct, "during the climb")
        if len(items) == 2 and all(float(i.value) >= HIGH_LOAD - 0.5 for i in items.values()):
            break
        assert time.time() < deadline, f"the direct answer never reached {HIGH_LOAD} %: {items}"
        time.sleep(0.5)
    for adapter in stack.adapters:  # the prometheus source's minute ends a scrape or two later at most
        reached: dict[str, Served] = {}

        def at_high_load(adapter: AdapterProcess = adapter, reached: dict[str, Served] = reached) -> bool:
            reached.clear()
            reached.update(answer(adapter, stack, hpa_path(LLM_SERVE)))
            return len(reached) == 2 and all(abs(float(i.value) - HIGH_LOAD) <= 0.5 for i in reached.values())

        wait_for(at_high_load, f"{adapter.name} serving the new load", 3 * INTERVAL + OBSERVATION + headroom())
        assert desired_replicas(reached) == 3


def test_the_gpu_lost_alert_fires_after_its_for(stack: E2EStack) -> None:
    node, gpu = LOST_GPU
    [rule] = [r for r in shipped_rules(Dialect.PROMETHEUS) if r.get("alert") == "GPUDown"]
    wait = _duration_seconds(rule["for"])
    deadline = stack.wall_time_of(node, GPU_LOST_AT) + 2 * INTERVAL + wait + 3 * INTERVAL + headroom()
    firing = f'ALERTS{{alertname="GPUDown", alertstate="firing", node="{node}", gpu="{gpu}"}}'
    eventually_selects(stack, firing, "GPUDown firing", max(deadline - time.time(), 1))
    # the lost GPU keeps the XID 79 it fell off the bus with, so its hardware XID alert fires while it is down
    xid79 = f'ALERTS{{alertname="GPUXidHardwareError", alertstate="firing", node="{node}", gpu="{gpu}", xid="79"}}'
    eventually_selects(stack, xid79, "GPUXidHardwareError firing for the lost GPU", 3 * INTERVAL)
    # beside those and the application XID's alert, nothing else fires
    firing_now = {s["metric"]["alertname"] for s in stack.prometheus.query('ALERTS{alertstate="firing"}')}
    assert firing_now == {"GPUDown", "GPUXidHardwareError", "GPUXidApplicationError"}


def _duration_seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]]


def _beyond_the_default_set(dialect: Dialect) -> frozenset[str]:
    """The series names only measurements outside the default field set publish (the exporters here serve the
    default set, as a default install does)."""

    def names(keys: frozenset[str]) -> set[str]:
        return {r.name for key in keys if (r := BY_KEY[key].rendering(dialect)) is not None}

    return frozenset(names(FIELD_SETS["all"] - DEFAULT_MEASUREMENTS) - names(DEFAULT_MEASUREMENTS))


BEYOND_THE_DEFAULT_SET = _beyond_the_default_set(Dialect.PROMETHEUS)


def _reads_engines(expr: str) -> bool:
    """Whether `expr` reads a serving engine's series or a series recorded from them (tests/dashboards' live stack
    serves those and checks these panels)."""
    return any("gpu_pulse_pod_inference_" in name for name in metric_names(expr))


def test_every_dashboard_query_and_variable_returns_data(stack: E2EStack) -> None:
    """Every panel of the dashboards for this dialect, including the adapter's panels (both adapters are scraped),
    the autoscaling panels (kube-state-metrics' HPA series) and the alert panels (an alert fires by now)."""
    # the alert panels need a firing alert: the application XID at GPU_LOST_AT fires one at once
    deadline = stack.wall_time_of(XID_GPU[0], GPU_LOST_AT) + 5 * INTERVAL + headroom()
    eventually_selects(stack, 'ALERTS{alertstate="firing"}', "a firing alert", max(deadline - time.time(), 1))
    empty = []
    stems = [stem for stem in boards() if Dialect.PROMETHEUS in board_dialects(stem)]
    for stem in stems:
        variables = variable_names(stem)
        for title, expr in panel_targets(stem):
            if metric_names(expr) <= BEYOND_THE_DEFAULT_SET:
                continue  # the node board charts every field; these come with --field-set all (docs/migration.md)
            if _reads_engines(expr):
                continue  # no exporter here reads an engine (as for the inference rules above): the live stack does
            if not stack.prometheus.query(substitute(expr, variables)):
                empty.append(f"{stem} / {title}: {expr}")
        for name, selector, label in query_variables(stem):
            if _reads_engines(selector):
                continue  # the LLM serving board's variables: workloads with an engine the exporters read
            if not stack.prometheus.label_values(label, selector):
                empty.append(f"{stem} / variable {name}: label_values({selector}, {label})")
    assert empty == [], "dashboard queries without data:\n" + "\n".join(empty)


def test_killing_an_exporter_drops_its_pods_and_nothing_else(stack: E2EStack) -> None:
    chat = pods_of(CHAT, stack.scenarios)
    on_killed_node = {pod for pod, node in chat.items() if node == KILLED_NODE}
    others = {pod for pod, node in chat.items() if node != KILLED_NODE}
    assert on_killed_node and others
    for adapter in stack.adapters:
        assert set(answer(adapter, stack, hpa_path(CHAT))) == on_killed_node | others
        assert set(answer(adapter, stack, hpa_path(NOTEBOOK))) == {"notebook-dana"}
    killed_at = kill_exporter(stack, KILLED_NODE)
    for adapter in stack.adapters:
        gone = after_the_kill(
            stack, adapter, CHAT, killed_at, lambda status, body: status == 200 and set(served_items(body)) == others
        )
        print(f"{adapter.name}: the killed node's chat pods gone {gone:.2f} s after the kill")
    # the notebook's only node is gone: the direct source has no exporter left to ask (503, as a Status);
    # Prometheus has no series (an empty list)
    after_the_kill(
        stack, stack.direct, NOTEBOOK, killed_at,
        lambda status, body: status == 503 and body.get("reason") == "ServiceUnavailable",
    )  # fmt: skip
    after_the_kill(
        stack, stack.via_prometheus, NOTEBOOK, killed_at, lambda status, body: status == 200 and not body["items"]
    )
    # nothing crashed: both adapters answer for the other nodes' workloads, and Prometheus notices the exporter
    for adapter in stack.adapters:
        stack.processes.check_running(adapter.name)
        assert adapter.ready()
        assert "Traceback" not in stack.processes.log_path(adapter.name).read_text(), adapter.name
        for workload in (LLM_SERVE, EMBED, TRAINER):
            assert set(answer(adapter, stack, hpa_path(workload))) == set(pods_of(workload, stack.scenarios))
    exporter_up = f'up{{job="gpu-pulse-exporter", node="{KILLED_NODE}"}} == 0'
    eventually_selects(stack, exporter_up, "prometheus seeing the exporter down", 10)
    exporter_down = f'ALERTS{{alertname="GPUExporterDown", node="{KILLED_NODE}"}}'
    eventually_selects(stack, exporter_down, "GPUExporterDown pending", 10)
