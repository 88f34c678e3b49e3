"""Inference recording rules: what the serving engine in each pod reports, per pod and per workload.

The exporter publishes a pod's engine figures (`gpu_pulse_pod_inference_*`, identical in both dialects) with the labels
of the per-pod series, so a pod on several GPUs may carry one copy per device: the pod level keeps one value per pod
(`max`), and the workload level combines pods, as the adapter combines them: the queue and the running requests are
summed, the KV-cache use averaged, and a latency percentile is the slowest pod's (percentiles of different pods do not
combine into the workload's own; the `quantile` label is kept). A pod whose engine is not ready has no figure series,
so it is left out of every workload figure (its owner is in ENGINE_OWNER from its engine's discovery on, and joins
nothing until the pod has a figure). The group ends with each pod's saturation and tokens per second
(rules/saturation.py), which read the pod level recorded before them.

The group runs every 15 s, a common scrape interval: these are the series a Prometheus-based autoscaler on LLM
serving reads, where a minute of delay is a minute of queue.
"""

from __future__ import annotations

from rules.examples import expect
from rules.model import ExprCase, InputSeries, Recording, RuleTest, Sample
from rules.names import (
    BY_POD,
    BY_WORKLOAD,
    OWNER,
    POD_INFERENCE_GENERATED_TOKENS,
    POD_INFERENCE_ITL,
    POD_INFERENCE_KV_CACHE,
    POD_INFERENCE_QUEUED,
    POD_INFERENCE_RUNNING,
    POD_INFERENCE_STATE,
    POD_INFERENCE_TTFT,
)
from rules.saturation import saturation_rules
from rules.series import PodEdge, PodKey, TestDevice, plain_series, ramp, steady

INTERVAL = "15s"

POD_QUEUED = "namespace_pod:gpu_pulse_pod_inference_queued_requests:max"
POD_RUNNING = "namespace_pod:gpu_pulse_pod_inference_running_requests:max"
POD_KV_CACHE = "namespace_pod:gpu_pulse_pod_inference_kv_cache_utilization_ratio:max"
POD_TTFT = "namespace_pod:gpu_pulse_pod_inference_time_to_first_token_seconds:max"
POD_ITL = "namespace_pod:gpu_pulse_pod_inference_inter_token_latency_seconds:max"
# The owners of the pods with a serving engine (any engine state, warming included): the workload level joins these,
# not every GPU pod's owner (rules/workloads.py), which at 20,000 GPU pods is a read of 20,000 series. It is recorded
# in the workload group, every two minutes with the owners it filters, so this group, every 15 s, reads only the
# engine pods' owners; a pod is in it from its engine's discovery, minutes before its engine is ready
# (docs/decisions/2026-11-29-rules-on-prometheus-3.md).
ENGINE_OWNER = "namespace_workload_pod:gpu_pulse_pod_inference_owner:relabel"
WORKLOAD_QUEUED = "namespace_workload:gpu_pulse_pod_inference_queued_requests:sum"
WORKLOAD_RUNNING = "namespace_workload:gpu_pulse_pod_inference_running_requests:sum"
WORKLOAD_KV_CACHE = "namespace_workload:gpu_pulse_pod_inference_kv_cache_utilization_ratio:avg"
WORKLOAD_TTFT = "namespace_workload:gpu_pulse_pod_inference_time_to_first_token_seconds:max"
WORKLOAD_ITL = "namespace_workload:gpu_pulse_pod_inference_inter_token_latency_seconds:max"

# The example: Deployment `chat` with chat-a on one GPU and chat-b on two (its figures repeated on each), and chat-c
# whose engine is warming (no figure series); StatefulSet `embed` with embed-0.
_NODE = "gpu-node-3"
_GPUS = tuple(TestDevice(node=_NODE, gpu=i, uuid=f"GPU-c{i}000000-0000-0000-0000-000000000000") for i in range(4))
CHAT_A = (PodEdge(PodKey("serve", "chat-a", "vllm"), _GPUS[0]),)
CHAT_B = (PodEdge(PodKey("serve", "chat-b", "vllm"), _GPUS[1]), PodEdge(PodKey("serve", "chat-b", "vllm"), _GPUS[2]))
EMBED_0 = (PodEdge(PodKey("serve", "embed-0", "server"), _GPUS[3]),)
_ENGINES = {"chat-a": "vllm", "chat-b": "vllm", "embed-0": "sglang"}
_WORKLOADS = {
    "chat-a": ("chat", "Deployment"),
    "chat-b": ("chat", "Deployment"),
    "chat-c": ("chat", "Deployment"),  # warming: an owner, no figure
    "embed-0": ("embed", "StatefulSet"),
}
_CHAT = {"namespace": "serve", "workload": "chat", "workload_type": "Deployment"}
_EMBED = {"namespace": "serve", "workload": "embed", "workload_type": "StatefulSet"}


def _series(name: str, edges: tuple[PodEdge, ...], value: float, **extra: str) -> tuple[InputSeries, ...]:
    """A pod's engine figure as the exporter publishes it: one copy per device, labelled with the engine and model."""
    labels = [
        {k: v for k, v in edge.labels().items() if v}
        | {"engine": _ENGINES[edge.pod.pod], "model": "example-model"}
        | extra
        for edge in edges
    ]
    return tuple(plain_series(name, one, steady(value, 3)) for one in labels)


def _owners() -> tuple[InputSeries, ...]:
    """Each pod's owner, and the engine state the exporter publishes for each pod with a serving engine (chat-c's
    `warming`, with no figure); `train-0` has an owner and no engine."""
    owners = tuple(
        plain_series(
            OWNER, {"namespace": "serve", "pod": pod, "workload": workload, "workload_type": kind}, steady(1, 3)
        )
        for pod, (workload, kind) in (*_WORKLOADS.items(), ("train-0", ("train", "StatefulSet")))
    )
    states = tuple(
        plain_series(
            POD_INFERENCE_STATE,
            {
                "node": _NODE,
                "namespace": "serve",
                "pod": pod,
                "engine": _ENGINES.get(pod, "vllm"),
                "model": "example-model",
                "state": "warming" if pod == "chat-c" else "ready",
            },
            steady(1, 3),
        )
        for pod in _WORKLOADS
    )
    return owners + states


def _token_counters() -> tuple[InputSeries, ...]:
    """The generated-token counters as the exporter publishes them: one series per pod (its own total, labelled
    node, namespace, pod, engine and model), rising 50, 100 and 10 tokens per second (3000, 6000, 600 a minute)."""
    per_minute = {"chat-a": 3000, "chat-b": 6000, "embed-0": 600}
    counters = tuple(
        plain_series(
            POD_INFERENCE_GENERATED_TOKENS,
            {"node": _NODE, "namespace": "serve", "pod": pod, "engine": _ENGINES[pod], "model": "example-model"},
            ramp(0, step, 11),
        )
        for pod, step in per_minute.items()
    )
    return (*counters, *_owners())


def _pod(pod: str) -> dict[str, str]:
    return {"namespace": "serve", "pod": pod}


def _gauge_inputs(name: str, a: float, b: float, embed: float) -> tuple[InputSeries, ...]:
    return (*_series(name, CHAT_A, a), *_series(name, CHAT_B, b), *_series(name, EMBED_0, embed), *_owners())


def _quantile_inputs(name: str) -> tuple[InputSeries, ...]:
    """p90 and p99 of chat-a (0.4 s, 2 s), chat-b (0.6 s, 1.5 s) and embed-0 (0.1 s, 0.2 s)."""
    figures = ((CHAT_A, "0.4", "2"), (CHAT_B, "0.6", "1.5"), (EMBED_0, "0.1", "0.2"))
    inputs: list[InputSeries] = []
    for edges, p90, p99 in figures:
        inputs += _series(name, edges, float(p90), quantile="0.9")
        inputs += _series(name, edges, float(p99), quantile="0.99")
    return (*inputs, *_owners())


def _pod_rule(
    record: str, source: str, meaning: str, by: str, inputs: tuple[InputSeries, ...], **want: float
) -> Recording:
    """A pod level rule: one value per pod whatever copies its figure has; `want` by pod (chat-b: on two GPUs)."""
    samples = tuple(expect(record, _pod(pod.replace("_", "-")), value) for pod, value in want.items())
    return Recording(
        record,
        f"max by ({by}) ({source})",
        meaning,
        (RuleTest(f"{record}: one value per pod", inputs, expr_cases=(ExprCase("1m", samples),)),),
    )


def _join(pod_level: str) -> str:
    return f"{pod_level} * on ({BY_POD}) group_left (workload, workload_type) {ENGINE_OWNER}"


def engine_owner_rule() -> Recording:
    """ENGINE_OWNER, for the workload group (rules/recording.py): the owners of the pods with a serving engine in any
    state, so a pod is in it before its engine is ready and the 15 s group's joins count it from its first figure."""
    owners = tuple(
        expect(ENGINE_OWNER, _pod(pod) | {"workload": workload, "workload_type": kind}, 1)
        for pod, (workload, kind) in _WORKLOADS.items()
    )
    return Recording(
        ENGINE_OWNER,
        f"{OWNER} and on ({BY_POD}) {POD_INFERENCE_STATE}",
        "The workload of each pod with a serving engine, ready or not (its owner as "
        f"`{OWNER}` names it): what the workload level joins.",
        (
            RuleTest(
                f"{ENGINE_OWNER}: the owners of the pods with an engine, warming ones too, not of other pods",
                _owners(),
                expr_cases=(ExprCase("1m", owners),),
            ),
        ),
    )


def inference_rules() -> tuple[Recording, ...]:
    queued = _gauge_inputs(POD_INFERENCE_QUEUED, 3, 5, 2)
    running = _gauge_inputs(POD_INFERENCE_RUNNING, 6, 2, 1)
    kv_cache = _gauge_inputs(POD_INFERENCE_KV_CACHE, 0.25, 0.75, 0.5)
    ttft, itl = _quantile_inputs(POD_INFERENCE_TTFT), _quantile_inputs(POD_INFERENCE_ITL)
    by_quantile = f"{BY_POD}, quantile"
    saturation_inputs = (
        *_series(POD_INFERENCE_QUEUED, CHAT_A, 3),
        *_series(POD_INFERENCE_QUEUED, CHAT_B, 5),
        *_series(POD_INFERENCE_QUEUED, EMBED_0, 2),
        *_series(POD_INFERENCE_KV_CACHE, CHAT_A, 0.25),
        *_series(POD_INFERENCE_KV_CACHE, CHAT_B, 0.75),
        *_series(POD_INFERENCE_KV_CACHE, EMBED_0, 0.5),
        *_owners(),
    )
    workload_quantile = f"{BY_WORKLOAD}, quantile"
    return (
        _pod_rule(
            POD_QUEUED,
            POD_INFERENCE_QUEUED,
            "Requests waiting in a pod's serving engine (its engine ready): the adapter's `inference_queued_requests`.",
            BY_POD,
            queued,
            chat_a=3,
            chat_b=5,
            embed_0=2,
        ),
        _pod_rule(
            POD_RUNNING,
            POD_INFERENCE_RUNNING,
            "Requests a pod's serving engine is working on: the adapter's `inference_running_requests`.",
            BY_POD,
            running,
            chat_a=6,
            chat_b=2,
            embed_0=1,
        ),
        _pod_rule(
            POD_KV_CACHE,
            POD_INFERENCE_KV_CACHE,
            "KV-cache use of a pod's serving engine, 0-1: the adapter's `inference_kv_cache_utilization` (x100).",
            BY_POD,
            kv_cache,
            chat_a=0.25,
            chat_b=0.75,
            embed_0=0.5,
        ),
        Recording(
            POD_TTFT,
            f"max by ({by_quantile}) ({POD_INFERENCE_TTFT})",
            "Time to first token of a pod's serving engine by `quantile`, seconds, over the exporter's window: the "
            "adapter's `inference_time_to_first_token_seconds` (p90).",
            (
                RuleTest(
                    f"{POD_TTFT}: one value per pod and quantile",
                    ttft,
                    expr_cases=(
                        ExprCase(
                            "1m",
                            (
                                expect(POD_TTFT, _pod("chat-a") | {"quantile": "0.9"}, 0.4),
                                expect(POD_TTFT, _pod("chat-a") | {"quantile": "0.99"}, 2),
                                expect(POD_TTFT, _pod("chat-b") | {"quantile": "0.9"}, 0.6),
                                expect(POD_TTFT, _pod("chat-b") | {"quantile": "0.99"}, 1.5),
                                expect(POD_TTFT, _pod("embed-0") | {"quantile": "0.9"}, 0.1),
                                expect(POD_TTFT, _pod("embed-0") | {"quantile": "0.99"}, 0.2),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Recording(
            POD_ITL,
            f"max by ({by_quantile}) ({POD_INFERENCE_ITL})",
            "Inter-token latency of a pod's serving engine by `quantile`, seconds, over the exporter's window: the "
            "adapter's `inference_inter_token_latency_seconds` (p90).",
            (
                RuleTest(
                    f"{POD_ITL}: one value per pod and quantile",
                    itl,
                    expr_cases=(
                        ExprCase(
                            "1m",
                            (
                                expect(POD_ITL, _pod("chat-b") | {"quantile": "0.9"}, 0.6),
                                expect(POD_ITL, _pod("chat-a") | {"quantile": "0.9"}, 0.4),
                                expect(POD_ITL, _pod("embed-0") | {"quantile": "0.9"}, 0.1),
                                expect(POD_ITL, _pod("chat-a") | {"quantile": "0.99"}, 2),
                                expect(POD_ITL, _pod("chat-b") | {"quantile": "0.99"}, 1.5),
                                expect(POD_ITL, _pod("embed-0") | {"quantile": "0.99"}, 0.2),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        _workload_rule(
            WORKLOAD_QUEUED,
            f"sum by ({BY_WORKLOAD}) ({_join(POD_QUEUED)})",
            "Requests waiting in a workload's serving engines, summed over its pods whose engine is ready.",
            queued,
            chat=8,
            embed=2,
        ),
        _workload_rule(
            WORKLOAD_RUNNING,
            f"sum by ({BY_WORKLOAD}) ({_join(POD_RUNNING)})",
            "Requests a workload's serving engines are working on, summed over its pods whose engine is ready.",
            running,
            chat=8,
            embed=1,
        ),
        _workload_rule(
            WORKLOAD_KV_CACHE,
            f"avg by ({BY_WORKLOAD}) ({_join(POD_KV_CACHE)})",
            "KV-cache use of a workload's serving engines, 0-1, mean over its pods whose engine is ready.",
            kv_cache,
            chat=0.5,
            embed=0.5,
        ),
        _workload_rule(
            WORKLOAD_TTFT,
            f"max by ({workload_quantile}) ({_join(POD_TTFT)})",
            "Time to first token of a workload by `quantile`, seconds: the slowest of its ready pods' percentiles.",
            ttft,
            quantiles=True,
        ),
        _workload_rule(
            WORKLOAD_ITL,
            f"max by ({workload_quantile}) ({_join(POD_ITL)})",
            "Inter-token latency of a workload by `quantile`, seconds: the slowest of its ready pods' percentiles.",
            itl,
            quantiles=True,
        ),
        *saturation_rules(POD_QUEUED, POD_KV_CACHE, ENGINE_OWNER, saturation_inputs, _token_counters()),
    )


def _workload_rule(
    record: str,
    expr: str,
    meaning: str,
    inputs: tuple[InputSeries, ...],
    *,
    chat: float = 0,
    embed: float = 0,
    quantiles: bool = False,
) -> Recording:
    """A workload level rule over the pod level's records (recorded earlier in the same group, so the test's inputs
    are the raw series: promtool evaluates the whole group)."""
    samples: tuple[Sample, ...]
    if quantiles:
        samples = (
            expect(record, _CHAT | {"quantile": "0.9"}, 0.6),  # chat-b's
            expect(record, _CHAT | {"quantile": "0.99"}, 2),  # chat-a's
            expect(record, _EMBED | {"quantile": "0.9"}, 0.1),
            expect(record, _EMBED | {"quantile": "0.99"}, 0.2),
        )
    else:
        samples = (expect(record, _CHAT, chat), expect(record, _EMBED, embed))
    return Recording(
        record,
        expr,
        meaning,
        (RuleTest(f"{record}: a workload's ready pods, each once", inputs, expr_cases=(ExprCase("1m", samples),)),),
    )
