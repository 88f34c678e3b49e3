"""Alerts on GPU allocation and on gpu-pulse itself: an allocated GPU left idle, the exporter (down, missing from a GPU
node, stale snapshot, failing collector, no kubelet mapping) and the adapter (API unavailable, down, serving nothing).
"""

from __future__ import annotations

from rules.dialect import Vocabulary
from rules.examples import GPU1, TRAIN_ON_GPU0, TRAIN_ON_GPU2
from rules.gpu_health import fast_gpu_alerts, lab, minute_gpu_alerts, slow_gpu_alerts, steady_gpu_alerts
from rules.inference_alerts import InferenceSLO, inference_alerts
from rules.jobs import Jobs
from rules.model import Alert, AlertCase, ExpectedAlert, Group, InputSeries, RuleTest, Severity
from rules.names import POD_UTIL, SNAPSHOT_AGE
from rules.series import (
    PodEdge,
    PodKey,
    Values,
    gap,
    plain_series,
    pod_series,
    ramp,
    steady,
)

# How often each alert group is evaluated: every alert at the longest interval that delays it by little against its
# hold (`for`), since at 20,000 GPUs each expression reads 20,000 to 40,000 series an evaluation and the groups' cost
# is what they read times how often (docs/decisions/2026-11-29-rules-on-prometheus-3.md). The rule tests evaluate every
# minute whatever the group's interval, so they hold each alert's firing minute, not its group's.
#
# GPUDown, GPURowRemapFailure and the XID alerts (a minute's hold or none) are in `gpu-pulse.gpu.alerts`, at the global
# interval (commonly 30 s).
#
# Every minute: alerts held 5 minutes or whose condition is itself a 10-minute window (GPUUncorrectableECCErrors: an
# increase over 10 minutes stays true for 10 minutes), and the exporter's alerts (each held 5 minutes or more). They
# fire at most 30 s later than at 30 s, a tenth of the shortest hold.
MINUTE_INTERVAL = "1m"
# Every two minutes: GPU alerts held 10 minutes or more (GPURowRemapPending, GPUThermalThrottling, GPUPowerCapped,
# GPUMemoryNearlyFull). They fire at most 90 s later than at 30 s, under a sixth of the shortest hold.
STEADY_INTERVAL = "2m"
# Every ten minutes: alerts with a range function of an hour or a window tiled by the evaluations over a family with a
# series per GPU or per pod, held 30 minutes or more (GPUMemoryFillingUp, GPUAllocatedButIdle). They fire at most
# 10 minutes later than at 30 s, a third of the shortest hold, for a twentieth of the reads.
SLOW_MINUTES = 10
SLOW_INTERVAL = f"{SLOW_MINUTES}m"
# GPUAllocatedButIdle's 90 minutes of idleness, read as windows of one SLOW_INTERVAL each: each evaluation reads the
# samples since the last one (the windows tile the time, left-open), and the `for` holds the rest of the 90 minutes.
IDLE_MINUTES = 90

# the labels of one exporter's scrape target in the rule tests (its job is the generator's exporter job)
EXPORTER_INSTANCE = {"instance": "10.0.0.11:9400", "node": "gpu-node-1"}
# kube-state-metrics' kube_node_labels target, and the label of a node with GPUs (GPU feature discovery's)
KSM = {"job": "kube-state-metrics", "instance": "10.0.2.1:8080"}
GPU_NODE = {"label_nvidia_com_gpu_present": "true"}


def pod_alerts() -> tuple[Alert, ...]:
    idle = TRAIN_ON_GPU0
    busy = TRAIN_ON_GPU2
    shared = PodEdge(PodKey("team-b", "notebook-1", "notebook"), GPU1, share="process")
    labels = {k: v for k, v in idle.labels().items() if v}
    return (
        Alert(
            "GPUAllocatedButIdle",
            f'max_over_time({POD_UTIL}{{share=~"exclusive|mig"}}[{SLOW_INTERVAL}]) < 0.01',
            f"{IDLE_MINUTES - SLOW_MINUTES}m",
            Severity.INFO,
            "A pod holds a GPU it has not used for over an hour.",
            f"Pod {lab('namespace')}/{lab('pod')} (container {lab('container')}) holds GPU {lab('gpu')} "
            f"({lab('uuid')}) on node {lab('node')} but has kept it below 1% utilization for {IDLE_MINUTES} minutes; "
            "the GPU could serve another workload.",
            (
                RuleTest(
                    "GPUAllocatedButIdle: a GPU idle for 90 minutes, not a busy one nor an idle share of a shared GPU",
                    (
                        pod_series(POD_UTIL, idle, steady(0.5, 31).then(steady(0, 120))),
                        pod_series(POD_UTIL, busy, steady(0.5, 151)),
                        pod_series(POD_UTIL, shared, steady(0, 151)),
                    ),
                    alert_cases=(
                        AlertCase("100m", ()),
                        AlertCase(
                            "125m",
                            (
                                ExpectedAlert(
                                    labels,
                                    f"Pod {idle.pod.namespace}/{idle.pod.pod} (container {idle.pod.container}) holds "
                                    f"GPU {idle.device.gpu} ({idle.device.uuid}) on node {idle.device.node} but has "
                                    "kept it below 1% utilization for 90 minutes; the GPU could serve another "
                                    "workload.",
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


def exporter_alerts(jobs: Jobs) -> tuple[Alert, ...]:
    target = {"job": jobs.exporter} | EXPORTER_INSTANCE

    def _target(values: Values, **labels: str) -> InputSeries:
        return plain_series("up", target | labels, values)

    other = {"instance": "10.0.0.12:9400", "node": "gpu-node-2"}
    on_node = "on node {{ $labels.node }} ({{ $labels.instance }})"
    node1 = f"on node {target['node']} ({target['instance']})"
    self_labels = target
    return (
        Alert(
            "GPUExporterDown",
            f"up{{{jobs.exporter_selector}}} == 0",
            "5m",
            Severity.WARNING,
            "A gpu-pulse exporter cannot be scraped.",
            f"The gpu-pulse exporter {on_node} cannot be scraped: that node's GPUs have no metrics, and "
            "autoscalers reading them get no figures for its pods.",
            (
                RuleTest(
                    "GPUExporterDown: fires after 5 minutes down",
                    (_target(steady(1, 2).then(steady(0, 10))), _target(steady(1, 12), **other)),
                    alert_cases=(
                        AlertCase("4m", ()),
                        AlertCase(
                            "9m",
                            (
                                ExpectedAlert(
                                    target,
                                    f"The gpu-pulse exporter {node1} cannot be scraped: that node's GPUs have no "
                                    "metrics, and autoscalers reading them get no figures for its pods.",
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Alert(
            "GPUNodeWithoutExporter",
            # kube-state-metrics' node labels (with --metric-labels-allowlist=nodes=[nvidia.com/gpu.present]): a node
            # with GPUs whose gpu-pulse exporter has no scrape target at all, which no `up == 0` can say. The GPU
            # Operator's mig-manager leaves the pause label set when its wait for paused pods times out or applying a
            # MIG configuration fails (mig-parted pkg/mig/reconfigure/reconfigure.go, `Run`); a driver upgrade takes
            # minutes, so 30 minutes without an exporter is no upgrade.
            f'max by (node) (kube_node_labels{{label_nvidia_com_gpu_present="true"}})'
            f" unless on (node) max by (node) (up{{{jobs.exporter_selector}}})",
            "30m",
            Severity.WARNING,
            "A GPU node has had no gpu-pulse exporter for 30 minutes.",
            "Node {{ $labels.node }} has GPUs but no gpu-pulse exporter has been a scrape target on it for 30 minutes: "
            "no GPU alert can fire for it. A GPU Operator pause label left set (nvidia.com/gpu.deploy.client not "
            "true) is the usual cause.",
            (
                RuleTest(
                    "GPUNodeWithoutExporter: a GPU node whose exporter went away, not one that keeps it",
                    (
                        plain_series("kube_node_labels", KSM | {"node": "gpu-node-1"} | GPU_NODE, steady(1, 45)),
                        plain_series("kube_node_labels", KSM | {"node": "gpu-node-2"} | GPU_NODE, steady(1, 45)),
                        plain_series("kube_node_labels", KSM | {"node": "cpu-node-1"}, steady(1, 45)),
                        _target(steady(1, 3)),  # gone from minute 3: the pod was deleted for a pause
                        _target(steady(1, 45), **other),
                    ),
                    alert_cases=(
                        AlertCase("30m", ()),
                        AlertCase(
                            "40m",
                            (
                                ExpectedAlert(
                                    {"node": "gpu-node-1"},
                                    "Node gpu-node-1 has GPUs but no gpu-pulse exporter has been a scrape target on it "
                                    "for 30 minutes: no GPU alert can fire for it. A GPU Operator pause label left set "
                                    "(nvidia.com/gpu.deploy.client not true) is the usual cause.",
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Alert(
            "GPUExporterSnapshotStale",
            f"{SNAPSHOT_AGE} > clamp_min(3 * gpu_pulse_poll_interval_seconds, 30)",
            "5m",
            Severity.WARNING,
            "A gpu-pulse exporter serves an old snapshot.",
            f"The gpu-pulse exporter {on_node} serves GPU figures that are {{{{ $value | humanizeDuration }}}} old: "
            "its NVML poll loop is stuck or too slow.",
            (
                RuleTest(
                    "GPUExporterSnapshotStale: a poll loop stuck at minute 10, not one that keeps up",
                    (
                        plain_series(
                            "gpu_pulse_snapshot_timestamp_seconds", self_labels, ramp(0, 60, 11).then(steady(600, 15))
                        ),
                        plain_series("gpu_pulse_poll_interval_seconds", self_labels, steady(1, 26)),
                        plain_series("gpu_pulse_snapshot_timestamp_seconds", target | other, ramp(0, 60, 26)),
                        plain_series("gpu_pulse_poll_interval_seconds", target | other, steady(1, 26)),
                    ),
                    alert_cases=(
                        AlertCase("12m", ()),
                        AlertCase(
                            "20m",
                            (
                                ExpectedAlert(
                                    target,
                                    f"The gpu-pulse exporter {node1} serves GPU figures that are 10m 0s old: its "
                                    "NVML poll loop is stuck or too slow.",
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Alert(
            "GPUExporterCollectorFailing",
            "gpu_pulse_collector_success == 0",
            "15m",
            Severity.WARNING,
            "A collector of a gpu-pulse exporter keeps failing.",
            f"The {lab('collector')} collector of the gpu-pulse exporter {on_node} has failed every cycle for 15 "
            "minutes; the figures it provides are missing. The exporter's log says why.",
            (
                RuleTest(
                    "GPUExporterCollectorFailing: fires after 15 minutes of failures",
                    (
                        plain_series(
                            "gpu_pulse_collector_success", self_labels | {"collector": "processes"}, steady(0, 25)
                        ),
                        plain_series("gpu_pulse_collector_success", self_labels | {"collector": "nvml"}, steady(1, 25)),
                    ),
                    alert_cases=(
                        AlertCase("10m", ()),
                        AlertCase(
                            "20m",
                            (
                                ExpectedAlert(
                                    self_labels | {"collector": "processes"},
                                    f"The processes collector of the gpu-pulse exporter {node1} has failed every "
                                    "cycle for 15 minutes; the figures it provides are missing. The exporter's log "
                                    "says why.",
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Alert(
            "GPUKubeletMappingUnavailable",
            "gpu_pulse_kubelet_up == 0",
            "5m",
            Severity.WARNING,
            "A gpu-pulse exporter cannot read the kubelet's pod-resources API.",
            f"The gpu-pulse exporter {on_node} cannot list pod resources from the kubelet: GPU series lose their "
            "pod labels once its last mapping is too old, and per-pod figures from that node stop.",
            (
                RuleTest(
                    "GPUKubeletMappingUnavailable: fires after 5 minutes without the kubelet",
                    (
                        plain_series("gpu_pulse_kubelet_up", self_labels, steady(1, 2).then(steady(0, 10))),
                        plain_series("gpu_pulse_kubelet_up", target | other, steady(1, 12)),
                    ),
                    alert_cases=(
                        AlertCase("4m", ()),
                        AlertCase(
                            "9m",
                            (
                                ExpectedAlert(
                                    self_labels,
                                    f"The gpu-pulse exporter {node1} cannot list pod resources from the kubelet: GPU "
                                    "series lose their pod labels once its last mapping is too old, and per-pod "
                                    "figures from that node stop.",
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


def adapter_alerts(jobs: Jobs) -> tuple[Alert, ...]:
    apiservice = "v1beta2.custom.metrics.k8s.io"
    adapter = {"job": jobs.adapter}
    replica = adapter | {"instance": "10.0.1.1:6443"}
    requests = "gpu_pulse_adapter_request_duration_seconds_count"
    served = "gpu_pulse_adapter_served_values_total"
    return (
        Alert(
            "GPUMetricsAPIUnavailable",
            "max by (cluster, name) (aggregator_unavailable_apiservice"
            "{name=~`v1beta[12]\\.(custom|external)\\.metrics\\.k8s\\.io`}) == 1",
            "5m",
            Severity.CRITICAL,
            "The kube-apiserver cannot reach the GPU metrics API.",
            f"The kube-apiserver marks the APIService {lab('name')} unavailable: HorizontalPodAutoscalers that "
            "read GPU metrics get none and stop scaling.",
            (
                RuleTest(
                    "GPUMetricsAPIUnavailable: fires for our APIServices only",
                    (
                        plain_series(
                            "aggregator_unavailable_apiservice",
                            {"job": "apiserver", "instance": "10.0.0.1:6443", "name": apiservice},
                            steady(0, 2).then(steady(1, 10)),
                        ),
                        plain_series(
                            "aggregator_unavailable_apiservice",
                            {"job": "apiserver", "instance": "10.0.0.1:6443", "name": "v1beta1.metrics.k8s.io"},
                            steady(1, 12),
                        ),
                    ),
                    alert_cases=(
                        AlertCase("4m", ()),
                        AlertCase(
                            "9m",
                            (
                                ExpectedAlert(
                                    {"name": apiservice},
                                    f"The kube-apiserver marks the APIService {apiservice} unavailable: "
                                    "HorizontalPodAutoscalers that read GPU metrics get none and stop scaling.",
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Alert(
            "GPUAdapterDown",
            f"sum by (cluster) (up{{{jobs.adapter_selector}}}) == 0",
            "5m",
            Severity.CRITICAL,
            "No gpu-pulse adapter replica can be scraped.",
            "Every gpu-pulse adapter replica has been unreachable for 5 minutes: the custom and external metrics "
            "APIs are down and GPU autoscaling has stopped.",
            (
                RuleTest(
                    "GPUAdapterDown: fires when all replicas are down, not when one of two is",
                    (
                        plain_series("up", adapter | {"instance": "10.0.1.1:6443"}, steady(1, 2).then(steady(0, 20))),
                        plain_series("up", adapter | {"instance": "10.0.1.2:6443"}, steady(1, 10).then(steady(0, 12))),
                    ),
                    alert_cases=(
                        AlertCase("8m", ()),
                        AlertCase(
                            "17m",
                            (
                                ExpectedAlert(
                                    {},
                                    "Every gpu-pulse adapter replica has been unreachable for 5 minutes: the custom "
                                    "and external metrics APIs are down and GPU autoscaling has stopped.",
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Alert(
            "GPUAdapterServingNothing",
            f'sum by (cluster) (rate({requests}{{{jobs.adapter_selector}, code=~"404|503"}}[15m])) > 0'
            f" unless on (cluster) sum by (cluster) (rate({served}{{{jobs.adapter_selector}}}[15m])) > 0",
            "15m",
            Severity.WARNING,
            "The gpu-pulse adapter answers metric requests but serves no values.",
            "For 15 minutes the gpu-pulse adapter has answered {{ $value | humanize }} failed metric requests per "
            "second (not found or unavailable) and served no value at all: autoscalers that read GPU metrics get "
            "nothing.",
            (
                RuleTest(
                    "GPUAdapterServingNothing: only errors fire, errors beside served values do not",
                    (
                        plain_series(
                            requests,
                            replica | {"group": "custom.metrics.k8s.io", "version": "v1beta2", "code": "404"},
                            ramp(0, 30, 41),
                        ),
                        plain_series(
                            requests,
                            replica | {"group": "custom.metrics.k8s.io", "version": "v1beta2", "code": "200"},
                            steady(0, 21).then(ramp(0, 60, 20)),
                        ),
                        plain_series(
                            served,
                            replica | {"group": "custom.metrics.k8s.io"},
                            gap(21).then(ramp(0, 60, 20)),
                        ),
                    ),
                    alert_cases=(
                        AlertCase(
                            "18m",
                            (
                                ExpectedAlert(
                                    {},
                                    "For 15 minutes the gpu-pulse adapter has answered 500m failed metric requests "
                                    "per second (not found or unavailable) and served no value at all: autoscalers "
                                    "that read GPU metrics get nothing.",
                                ),
                            ),
                        ),
                        AlertCase("40m", ()),
                    ),
                ),
            ),
        ),
    )


def alert_groups(vocab: Vocabulary, jobs: Jobs, slo: InferenceSLO | None = None) -> tuple[Group, ...]:
    """Alert groups of one dialect (only the GPU health alerts differ between dialects), selecting gpu-pulse's own
    targets by the job names in `jobs`, holding LLM serving workloads to `slo` (default: InferenceSLO())."""
    return (
        Group("gpu-pulse.gpu.alerts", fast_gpu_alerts(vocab)),
        Group("gpu-pulse.gpu.minute.alerts", minute_gpu_alerts(vocab), interval=MINUTE_INTERVAL),
        Group("gpu-pulse.gpu.steady.alerts", steady_gpu_alerts(vocab), interval=STEADY_INTERVAL),
        Group("gpu-pulse.gpu.slow.alerts", slow_gpu_alerts(vocab) + pod_alerts(), interval=SLOW_INTERVAL),
        Group("gpu-pulse.exporter.alerts", exporter_alerts(jobs), interval=MINUTE_INTERVAL),
        Group("gpu-pulse.adapter.alerts", adapter_alerts(jobs)),
        Group("gpu-pulse.inference.alerts", inference_alerts(slo or InferenceSLO())),
    )
