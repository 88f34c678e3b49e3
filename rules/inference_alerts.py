"""Alerts on LLM serving: a workload's time to first token above its SLO, a KV cache full while the queue grows, a
workload at its HPA's maximum replicas while saturated, and a GPU pod whose serving engine gives no figures.

The SLO is a parameter of the generator (`--ttft-slo-seconds`, InferenceSLO) that a workload overrides with a series
of its own (TTFT_SLO_OVERRIDE, a recording rule the team writes). A burn rate over an error budget needs the count of
requests over the SLO; the exporter serves percentiles over its window, not the engines' bucket counts, so the alert
holds the workload's p90 above the SLO for a while instead (docs/decisions/2026-11-29-inference-alerts.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rules.gpu_health import lab
from rules.inference import WORKLOAD_TTFT
from rules.model import Alert, AlertCase, ExpectedAlert, InputSeries, RuleTest, Severity
from rules.names import (
    OWNER,
    POD_INFERENCE_KV_CACHE,
    POD_INFERENCE_QUEUED,
    POD_INFERENCE_STATE,
    POD_INFERENCE_TTFT,
)
from rules.saturation import WORKLOAD_SATURATION
from rules.series import plain_series, ramp, steady

# The p90 time to first token a workload is held to unless it says otherwise: 2 s, MLCommons' bound for Llama 2 70B
# in the MLPerf Inference server scenario (mlcommons/inference, loadgen/mlperf.conf: `llama2-70b.Server.ttft_latency
# = 2000`, in ms, on the 99th percentile), a generous bound on the 90th.
DEFAULT_TTFT_SLO_SECONDS = 2.0
# A workload's own SLO, in seconds, labelled with its namespace and workload (and cluster, where series carry one):
# a series the team records itself (docs/runbooks.md#gpuinferencettftoverslo shows the rule).
TTFT_SLO_OVERRIDE = "namespace_workload:gpu_pulse_pod_inference_time_to_first_token_seconds:slo"
# KV-cache use at which an engine has no room for the requests it has waiting: vLLM preempts a running request (its
# blocks freed and recomputed later) when it cannot allocate a block for the next token (vLLM docs, "Optimization and
# Tuning", Preemption), so past this a growing queue only grows.
KV_CACHE_FULL = 0.9
WORKLOAD = "cluster, namespace, workload"
HPA = "cluster, namespace, horizontalpodautoscaler"


class SLOError(ValueError):
    """An SLO the alerts cannot compare against."""


@dataclass(frozen=True, slots=True)
class InferenceSLO:
    """The SLOs the inference alerts hold workloads to, unless a workload's own series says otherwise."""

    ttft_p90_seconds: float = DEFAULT_TTFT_SLO_SECONDS

    def __post_init__(self) -> None:
        if not (math.isfinite(self.ttft_p90_seconds) and self.ttft_p90_seconds > 0):
            raise SLOError(f"time to first token SLO {self.ttft_p90_seconds!r}: expected seconds above 0")

    @property
    def is_default(self) -> bool:
        return self == InferenceSLO()


# the example: Deployment `chat` (chat-a, chat-b) and StatefulSet `embed` (embed-0) in namespace `serve`, on one node
_NODE = "gpu-node-3"
_PODS = {"chat-a": ("chat", "Deployment"), "chat-b": ("chat", "Deployment"), "embed-0": ("embed", "StatefulSet")}
_TARGET = {"job": "gpu-pulse-exporter", "instance": "10.0.0.13:9400"}


def _engine(pod: str, **extra: str) -> dict[str, str]:
    """A pod's engine series labels as the exporter publishes them (catalogue POD_INFERENCE_LABELS), scraped."""
    return _TARGET | {"node": _NODE, "namespace": "serve", "pod": pod, "engine": "vllm", "model": "example"} | extra


def _owners(samples: int) -> tuple[InputSeries, ...]:
    """Each pod's owner and its engine's state (ready), from which the workload group records the engine pods'
    owners that the inference group joins (rules/inference.py)."""
    owners = tuple(
        plain_series(OWNER, {"namespace": "serve", "pod": pod} | _workload(w), steady(1, samples))
        for pod, (w, _) in _PODS.items()
    )
    states = tuple(plain_series(POD_INFERENCE_STATE, _engine(pod, state="ready"), steady(1, samples)) for pod in _PODS)
    return owners + states


def _workload(workload: str) -> dict[str, str]:
    kind = next(kind for w, kind in _PODS.values() if w == workload)
    return {"namespace": "serve", "workload": workload, "workload_type": kind}


def _ttft(pod: str, values: str) -> InputSeries:
    return InputSeries(_selector(POD_INFERENCE_TTFT, _engine(pod, quantile="0.9")), values)


def _selector(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _ttft_alert(slo: InferenceSLO) -> Alert:
    p90 = f'{WORKLOAD_TTFT}{{quantile="0.9"}}'
    default = f"max by ({WORKLOAD}) ({p90}) * 0 + {slo.ttft_p90_seconds!r}"
    over, under = slo.ttft_p90_seconds * 1.5, slo.ttft_p90_seconds * 0.75
    description = (
        f"The time to first token of {lab('namespace')}/{lab('workload')} ({lab('workload_type')}) has been above "
        "its SLO for 10 minutes: its slowest pod's p90 is {{ $value | humanizeDuration }}. Requests wait for a "
        "batch slot: the workload needs more replicas, or its replicas more room."
    )

    def said(workload: str, seconds: float) -> ExpectedAlert:
        kind = _workload(workload)["workload_type"]
        return ExpectedAlert(
            _workload(workload) | {"quantile": "0.9"},
            f"The time to first token of serve/{workload} ({kind}) has been above its SLO for 10 minutes: its "
            f"slowest pod's p90 is {_duration(seconds)}. Requests wait for a batch slot: the workload needs more "
            "replicas, or its replicas more room.",
        )

    return Alert(
        "GPUInferenceTTFTOverSLO",
        f"{p90} > on ({WORKLOAD}) group_left () "
        f"(max by ({WORKLOAD}) ({TTFT_SLO_OVERRIDE}) or on ({WORKLOAD}) {default})",
        "10m",
        Severity.WARNING,
        "An LLM serving workload's time to first token has been above its SLO for 10 minutes.",
        description,
        (
            RuleTest(
                f"GPUInferenceTTFTOverSLO: p90 above the default SLO ({slo.ttft_p90_seconds} s) on one pod of chat",
                (
                    _ttft("chat-a", f"{under}x25"),
                    _ttft("chat-b", f"{under}x2 {over}x23"),
                    _ttft("embed-0", f"{under}x25"),
                    *_owners(26),
                ),
                alert_cases=(AlertCase("8m", ()), AlertCase("15m", (said("chat", over),))),
            ),
            RuleTest(
                "GPUInferenceTTFTOverSLO: a workload's own SLO wins over the default, lower and higher",
                (
                    _ttft("chat-a", f"{over}x25"),
                    _ttft("chat-b", f"{over}x25"),
                    _ttft("embed-0", f"{under}x25"),
                    plain_series(TTFT_SLO_OVERRIDE, {"namespace": "serve", "workload": "chat"}, steady(over * 2, 26)),
                    plain_series(TTFT_SLO_OVERRIDE, {"namespace": "serve", "workload": "embed"}, steady(under / 2, 26)),
                    *_owners(26),
                ),
                alert_cases=(AlertCase("15m", (said("embed", under),)),),
            ),
        ),
    )


def _duration(seconds: float) -> str:
    """Prometheus' humanizeDuration for the figures of these tests: under a second in ms, else seconds."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


def _kv_cache_alert() -> Alert:
    description = (
        f"The KV cache of {lab('engine')} in pod {lab('namespace')}/{lab('pod')} on node {lab('node')} is "
        "{{ $value | humanizePercentage }} full and its queue has grown for 5 minutes: requests wait or are "
        "preempted until replicas are added or requests end."
    )
    chat_a = _engine("chat-a")
    return Alert(
        "GPUInferenceKVCacheFull",
        f"{POD_INFERENCE_KV_CACHE} > {KV_CACHE_FULL}"
        f" and on (cluster, namespace, pod) deriv({POD_INFERENCE_QUEUED}[5m]) > 0",
        "5m",
        Severity.WARNING,
        "A serving engine's KV cache is full while its queue grows.",
        description,
        (
            RuleTest(
                "GPUInferenceKVCacheFull: a full cache with a growing queue, not a full one with a steady queue nor "
                "a growing queue with room",
                (
                    plain_series(POD_INFERENCE_KV_CACHE, chat_a, steady(0.96, 15)),
                    plain_series(POD_INFERENCE_QUEUED, chat_a, ramp(0, 2, 15)),
                    plain_series(POD_INFERENCE_KV_CACHE, _engine("chat-b"), steady(0.97, 15)),
                    plain_series(POD_INFERENCE_QUEUED, _engine("chat-b"), steady(4, 15)),
                    plain_series(POD_INFERENCE_KV_CACHE, _engine("embed-0"), steady(0.5, 15)),
                    plain_series(POD_INFERENCE_QUEUED, _engine("embed-0"), ramp(0, 3, 15)),
                ),
                alert_cases=(
                    AlertCase("3m", ()),
                    AlertCase(
                        "10m",
                        (
                            ExpectedAlert(
                                chat_a,
                                "The KV cache of vllm in pod serve/chat-a on node gpu-node-3 is 96% full and its queue "
                                "has grown for 5 minutes: requests wait or are preempted until replicas are added or "
                                "requests end.",
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


def _hpa(name: str, kind: str, workload: str, current: int, maximum: int, samples: int) -> tuple[InputSeries, ...]:
    """kube-state-metrics' series of one HPA, as it serves them (kubernetes/kube-state-metrics,
    docs/metrics/workload/horizontalpodautoscaler-metrics.md: `kube_horizontalpodautoscaler_info` labelled with the
    target's kind and name)."""
    ksm = {"job": "kube-state-metrics", "instance": "10.0.2.1:8080", "namespace": "serve"}
    hpa = ksm | {"horizontalpodautoscaler": name}
    info = hpa | {"scaletargetref_api_version": "apps/v1", "scaletargetref_kind": kind, "scaletargetref_name": workload}
    return (
        plain_series("kube_horizontalpodautoscaler_info", info, steady(1, samples)),
        plain_series("kube_horizontalpodautoscaler_status_current_replicas", hpa, steady(current, samples)),
        plain_series("kube_horizontalpodautoscaler_spec_max_replicas", hpa, steady(maximum, samples)),
    )


def _max_replicas_alert() -> Alert:
    at_max = (
        f"max by ({HPA}) (kube_horizontalpodautoscaler_status_current_replicas)"
        f" >= on ({HPA}) max by ({HPA}) (kube_horizontalpodautoscaler_spec_max_replicas)"
    )
    targets = (
        f"({at_max}) * on ({HPA}) group_left (scaletargetref_kind, scaletargetref_name)"
        f" max by ({HPA}, scaletargetref_kind, scaletargetref_name) (kube_horizontalpodautoscaler_info)"
    )
    workloads = (
        f'label_replace(label_replace({targets}, "workload", "$1", "scaletargetref_name", "(.+)"),'
        ' "workload_type", "$1", "scaletargetref_kind", "(.+)")'
    )
    description = (
        f"{lab('namespace')}/{lab('workload')} ({lab('workload_type')}) has run at its HPA's maximum replicas for 10 "
        "minutes with its serving engines at {{ $value | humanizePercentage }} of their saturation target: the HPA "
        "cannot add the replicas the load needs."
    )
    queue = {"chat-a": 15, "chat-b": 10, "embed-0": 15}
    return Alert(
        "GPUInferenceAtMaxReplicas",
        f"{WORKLOAD_SATURATION} > 1 and on (cluster, namespace, workload, workload_type) {workloads}",
        "10m",
        Severity.WARNING,
        "An LLM serving workload is saturated at its HPA's maximum replicas.",
        description,
        (
            RuleTest(
                "GPUInferenceAtMaxReplicas: saturated at the maximum, not saturated below it",
                (
                    *(plain_series(POD_INFERENCE_QUEUED, _engine(pod), steady(n, 20)) for pod, n in queue.items()),
                    *_owners(20),
                    *_hpa("chat", "Deployment", "chat", 2, 2, 20),
                    *_hpa("embed", "StatefulSet", "embed", 1, 4, 20),
                ),
                alert_cases=(
                    AlertCase("5m", ()),
                    AlertCase(
                        "15m",
                        (
                            ExpectedAlert(
                                _workload("chat"),
                                "serve/chat (Deployment) has run at its HPA's maximum replicas for 10 minutes with its "
                                "serving engines at 250% of their saturation target: the HPA cannot add the replicas "
                                "the load needs.",
                            ),
                        ),
                    ),
                ),
            ),
            RuleTest(
                "GPUInferenceAtMaxReplicas: at the maximum but not saturated",
                (
                    *(plain_series(POD_INFERENCE_QUEUED, _engine(pod), steady(2, 20)) for pod in queue),
                    *_owners(20),
                    *_hpa("chat", "Deployment", "chat", 2, 2, 20),
                ),
                alert_cases=(AlertCase("15m", ()),),
            ),
        ),
    )


def _silent_alert() -> Alert:
    description = (
        f"The serving engine of pod {lab('namespace')}/{lab('pod')} on node {lab('node')} has given gpu-pulse no "
        "figures for 15 minutes: the pod is left out of every inference figure and of autoscaling on them. Its state "
        "and reason are in gpu_pulse_pod_inference_engine_state and the exporter's /pods."
    )
    state = POD_INFERENCE_STATE

    def series(pod: str, state_: str, values: str) -> InputSeries:
        return InputSeries(_selector(state, _engine(pod, state=state_, reason=f"example {state_} reason")), values)

    return Alert(
        "GPUInferenceEngineSilent",
        f'max by (cluster, namespace, pod, node) ({state}{{state!="ready"}}) == 1',
        "15m",
        Severity.WARNING,
        "A GPU pod's serving engine gives no figures.",
        description,
        (
            RuleTest(
                "GPUInferenceEngineSilent: an engine gone quiet, not one that warmed up nor one that answers",
                (
                    series("chat-a", "ready", "1x2"),
                    series("chat-a", "unreachable", "_x2 1x23"),
                    series("chat-b", "warming", "1x5"),
                    series("chat-b", "ready", "_x6 1x18"),
                    series("embed-0", "ready", "1x25"),
                ),
                alert_cases=(
                    AlertCase("12m", ()),
                    AlertCase(
                        "20m",
                        (
                            ExpectedAlert(
                                {"namespace": "serve", "pod": "chat-a", "node": _NODE},
                                "The serving engine of pod serve/chat-a on node gpu-node-3 has given gpu-pulse no "
                                "figures for 15 minutes: the pod is left out of every inference figure and of "
                                "autoscaling on them. Its state and reason are in gpu_pulse_pod_inference_engine_state "
                                "and the exporter's /pods.",
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


def inference_alerts(slo: InferenceSLO) -> tuple[Alert, ...]:
    return (_ttft_alert(slo), _kv_cache_alert(), _max_replicas_alert(), _silent_alert())
