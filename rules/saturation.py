"""Saturation of LLM serving pods, recorded: each pod's largest term in fractions of its target, which term drives it,
a workload's mean (what an HPA targeting `averageValue: 100` of the adapter's `inference_saturation` compares), and
the generated tokens per second beside them.

A term is one engine figure over its target: requests waiting per pod over QUEUE_TARGET, KV-cache use over
KV_CACHE_TARGET. The recorded values are ratios (1 is a pod at its target, the adapter's 100 %), as every recorded
series here is in base units. The targets are the adapter's vLLM preset (tests/rules/test_saturation_targets.py); the
adapter also has latency terms and a GPU-utilization idle floor, which need an SLO per workload and are not recorded.
Runs in the inference group (rules/inference.py), after the pod figures it reads.
"""

from __future__ import annotations

from rules.examples import expect
from rules.model import ExprCase, InputSeries, Recording, RuleTest, Sample
from rules.names import BY_POD, BY_WORKLOAD, POD_INFERENCE_GENERATED_TOKENS

# llm-d's workload-variant-autoscaler: a replica is saturated at `queueLengthThreshold` requests waiting (default 5)
# or at `kvCacheThreshold` KV-cache use (default 0.80): llm-d-incubation/workload-variant-autoscaler,
# docs/capacity-scaling-config.md ("Default values"). The Gateway API Inference Extension's saturation detector has
# the same defaults (kubernetes-sigs/gateway-api-inference-extension, pkg/epp/saturationdetector/config.go:
# DefaultQueueDepthThreshold = 5, DefaultKVCacheUtilThreshold = 0.8).
QUEUE_TARGET = 5
KV_CACHE_TARGET = 0.8
QUEUE_TERM = "queue"
KV_CACHE_TERM = "kv_cache"

POD_TERMS = "namespace_pod_term:gpu_pulse_pod_inference_saturation:ratio"
POD_SATURATION = "namespace_pod:gpu_pulse_pod_inference_saturation:max"
POD_DRIVING = "namespace_pod_term:gpu_pulse_pod_inference_saturation:max"
WORKLOAD_SATURATION = "namespace_workload:gpu_pulse_pod_inference_saturation:avg"
WORKLOAD_DRIVING = "namespace_workload_term:gpu_pulse_pod_inference_saturation:count"
POD_TOKENS = "namespace_pod:gpu_pulse_pod_inference_generated_tokens:rate2m"
WORKLOAD_TOKENS = "namespace_workload:gpu_pulse_pod_inference_generated_tokens:rate2m"

BY_POD_TERM = f"{BY_POD}, term"
BY_WORKLOAD_TERM = f"{BY_WORKLOAD}, term"


def _pod(pod: str, **extra: str) -> dict[str, str]:
    return {"namespace": "serve", "pod": pod} | extra


def _workload(workload: str, kind: str, **extra: str) -> dict[str, str]:
    return {"namespace": "serve", "workload": workload, "workload_type": kind} | extra


def saturation_rules(
    pod_queued: str, pod_kv_cache: str, owner: str, inputs: tuple[InputSeries, ...], tokens: tuple[InputSeries, ...]
) -> tuple[Recording, ...]:
    """The saturation rules over the pod level's records `pod_queued` and `pod_kv_cache` (recorded earlier in the
    same group), joining pods to workloads through `owner` (recorded earlier too); `inputs` are the raw series of the
    inference example (rules/inference.py) that promtool evaluates the whole group on: queue chat-a 3, chat-b 5,
    embed-0 2; KV cache 0.25, 0.75, 0.5; chat-c warming (none). `tokens` the generated-token counters of the same
    pods."""
    # chat-a: queue 3/5 = 0.6 against KV 0.25/0.8 = 0.3125 (the queue drives); chat-b: 5/5 = 1 against 0.9375 (the
    # queue); embed-0: 2/5 = 0.4 against 0.5/0.8 = 0.625 (the KV cache)
    terms = (
        expect(POD_TERMS, _pod("chat-a", term=QUEUE_TERM), 0.6),
        expect(POD_TERMS, _pod("chat-a", term=KV_CACHE_TERM), 0.3125),
        expect(POD_TERMS, _pod("chat-b", term=QUEUE_TERM), 1),
        expect(POD_TERMS, _pod("chat-b", term=KV_CACHE_TERM), 0.9375),
        expect(POD_TERMS, _pod("embed-0", term=QUEUE_TERM), 0.4),
        expect(POD_TERMS, _pod("embed-0", term=KV_CACHE_TERM), 0.625),
    )
    term = f'label_replace({pod_queued} / {QUEUE_TARGET}, "term", "{QUEUE_TERM}", "", "")'
    kv_term = f'label_replace({pod_kv_cache} / {KV_CACHE_TARGET}, "term", "{KV_CACHE_TERM}", "", "")'
    join = f"* on ({BY_POD}) group_left (workload, workload_type) {owner}"
    return (
        Recording(
            POD_TERMS,
            f"{term} or {kv_term}",
            f"Each saturation term of a pod's serving engine (`term`: `{QUEUE_TERM}`, requests waiting over "
            f"{QUEUE_TARGET}; `{KV_CACHE_TERM}`, KV-cache use over {KV_CACHE_TARGET}), 1 at its target: llm-d's "
            "saturation thresholds.",
            (_test(f"{POD_TERMS}: each term over its target", inputs, terms),),
        ),
        Recording(
            POD_SATURATION,
            f"max by ({BY_POD}) ({POD_TERMS})",
            "Saturation of a pod's serving engine: the largest of its terms, 1 at its target (the adapter's "
            "`inference_saturation`, x100, with the same targets).",
            (
                _test(
                    f"{POD_SATURATION}: the largest term",
                    inputs,
                    (
                        expect(POD_SATURATION, _pod("chat-a"), 0.6),
                        expect(POD_SATURATION, _pod("chat-b"), 1),
                        expect(POD_SATURATION, _pod("embed-0"), 0.625),
                    ),
                ),
            ),
        ),
        Recording(
            POD_DRIVING,
            f"{POD_TERMS} == on ({BY_POD}) group_left () {POD_SATURATION}",
            "The term that drives a pod's saturation (`term`), valued at the pod's saturation; both terms where they "
            "tie.",
            (
                _test(
                    f"{POD_DRIVING}: the driving term of each pod",
                    inputs,
                    (
                        expect(POD_DRIVING, _pod("chat-a", term=QUEUE_TERM), 0.6),
                        expect(POD_DRIVING, _pod("chat-b", term=QUEUE_TERM), 1),
                        expect(POD_DRIVING, _pod("embed-0", term=KV_CACHE_TERM), 0.625),
                    ),
                ),
            ),
        ),
        Recording(
            WORKLOAD_SATURATION,
            f"avg by ({BY_WORKLOAD}) ({POD_SATURATION} {join})",
            "Saturation of a workload: the mean of its ready pods' saturation, 1 at the target (what an HPA with "
            "`averageValue: 100` on the adapter's `inference_saturation` compares).",
            (
                _test(
                    f"{WORKLOAD_SATURATION}: the mean over a workload's ready pods",
                    inputs,
                    (
                        expect(WORKLOAD_SATURATION, _workload("chat", "Deployment"), 0.8),
                        expect(WORKLOAD_SATURATION, _workload("embed", "StatefulSet"), 0.625),
                    ),
                ),
            ),
        ),
        Recording(
            WORKLOAD_DRIVING,
            f"count by ({BY_WORKLOAD_TERM}) ({POD_DRIVING} {join})",
            "Pods of a workload whose saturation each term drives (`term`).",
            (
                _test(
                    f"{WORKLOAD_DRIVING}: the pods each term drives",
                    inputs,
                    (
                        expect(WORKLOAD_DRIVING, _workload("chat", "Deployment", term=QUEUE_TERM), 2),
                        expect(WORKLOAD_DRIVING, _workload("embed", "StatefulSet", term=KV_CACHE_TERM), 1),
                    ),
                ),
            ),
        ),
        Recording(
            POD_TOKENS,
            f"sum by ({BY_POD}) (rate({POD_INFERENCE_GENERATED_TOKENS}[2m]))",
            "Tokens a pod's serving engine generates per second, over 2 minutes (the exporter's counter: an engine "
            "restart is no reset).",
            (
                _test(
                    f"{POD_TOKENS}: tokens per second",
                    tokens,
                    (
                        expect(POD_TOKENS, _pod("chat-a"), 50),
                        expect(POD_TOKENS, _pod("chat-b"), 100),
                        expect(POD_TOKENS, _pod("embed-0"), 10),
                    ),
                    at="5m",
                ),
            ),
        ),
        Recording(
            WORKLOAD_TOKENS,
            f"sum by ({BY_WORKLOAD}) ({POD_TOKENS} {join})",
            "Tokens a workload's serving engines generate per second, over 2 minutes.",
            (
                _test(
                    f"{WORKLOAD_TOKENS}: a workload's pods' sum",
                    tokens,
                    (
                        expect(WORKLOAD_TOKENS, _workload("chat", "Deployment"), 150),
                        expect(WORKLOAD_TOKENS, _workload("embed", "StatefulSet"), 10),
                    ),
                    at="5m",
                ),
            ),
        ),
    )


def _test(name: str, inputs: tuple[InputSeries, ...], samples: tuple[Sample, ...], at: str = "1m") -> RuleTest:
    return RuleTest(name, inputs, expr_cases=(ExprCase(at, samples),))
