"""Per-pod serving-engine series (`gpu_pulse_pod_inference_*`) and the engine reader's self-metrics, identical in both
dialects: one series per pod (and quantile), labelled node, namespace, pod, engine and model.

Figures are served only while the pod's engine is `ready` and only those it gives (absent, never zero); the state
series says which state each pod is in, with its bounded reason. The two counters are the exporter's own totals of
the engine's counter deltas (exporter.engines.window.CounterTotal): they never fall, whatever the engine does.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.catalogue import (
    POD_INFERENCE_ITL,
    POD_INFERENCE_KV_CACHE,
    POD_INFERENCE_QUEUED,
    POD_INFERENCE_REQUESTS,
    POD_INFERENCE_RUNNING,
    POD_INFERENCE_STATE,
    POD_INFERENCE_TOKENS,
    POD_INFERENCE_TTFT,
    SELF_ENGINE_BYTES,
    SELF_ENGINE_ENDPOINTS,
    SELF_ENGINE_FAILURES,
    SELF_ENGINE_READS,
    SELF_ENGINE_SECONDS,
    MetricType,
)
from exporter.exposition.devices import Families
from exporter.exposition.families import FamilyHeader
from exporter.exposition.textformat import format_value, label_pairs
from exporter.snapshot import EngineReadStats, PodInference, Snapshot
from toolkit.pods_contract import LatencyQuantiles

G, C = MetricType.GAUGE, MetricType.COUNTER
WINDOW_NOTE = "over the window the /pods document states (default 60 s), from the engine's histogram bucket deltas"
QUEUED = FamilyHeader.of(POD_INFERENCE_QUEUED, G, "Requests waiting in the pod's serving engine (its own figure).")
RUNNING = FamilyHeader.of(POD_INFERENCE_RUNNING, G, "Requests in the pod's serving engine's running batch.")
KV_CACHE = FamilyHeader.of(
    POD_INFERENCE_KV_CACHE, G, "KV-cache use of the pod's serving engine, 0-1 (the mean of its schedulers' caches)."
)
TTFT = FamilyHeader.of(POD_INFERENCE_TTFT, G, f"Time to first token, in seconds, percentiles {WINDOW_NOTE}.")
ITL = FamilyHeader.of(POD_INFERENCE_ITL, G, f"Inter-token latency, in seconds, percentiles {WINDOW_NOTE}.")
REQUESTS = FamilyHeader.of(
    POD_INFERENCE_REQUESTS,
    C,
    "Requests the pod's serving engine finished since the exporter started reading it (the exporter's sum of the "
    "engine counter's increases: an engine restart is no reset).",
)
TOKENS = FamilyHeader.of(
    POD_INFERENCE_TOKENS,
    C,
    "Tokens the pod's serving engine generated since the exporter started reading it (the exporter's sum of the "
    "engine counter's increases).",
)
STATE = FamilyHeader.of(
    POD_INFERENCE_STATE,
    G,
    "The state of the pod's serving engine as the exporter reads it (value 1): ready, warming (not Ready, or not "
    "answering yet: left out of combined figures), unreachable, unrecognised (no known engine's names), refused (a "
    "bound broken, or annotations naming anything but the pod's IP); `reason` says why.",
)
READS = FamilyHeader.of(SELF_ENGINE_READS, C, "Reads of serving-engine metrics endpoints since the exporter started.")
FAILURES = FamilyHeader.of(
    SELF_ENGINE_FAILURES,
    C,
    "Engine reads that failed, by reason: connect, http_status, redirect, timeout, too_large, encoding, series "
    "(too many lines or samples), annotation (no port and path on the pod's IP), unrecognised.",
)
BYTES = FamilyHeader.of(
    SELF_ENGINE_BYTES, C, "Bytes received from serving-engine endpoints (as sent, compressed or not)."
)
SECONDS = FamilyHeader.of(SELF_ENGINE_SECONDS, C, "Seconds spent in engine reads that answered.")
ENDPOINTS = FamilyHeader.of(SELF_ENGINE_ENDPOINTS, G, "Pods whose serving-engine endpoint was read in the last cycle.")

_QUANTILES = (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"))
_GAUGES: tuple[tuple[FamilyHeader, Callable[[PodInference], float | None]], ...] = (
    (QUEUED, lambda p: p.figures.queued_requests),
    (RUNNING, lambda p: p.figures.running_requests),
    (KV_CACHE, lambda p: p.figures.kv_cache_utilization),
)


def _quantile_lines(name: str, labels: str, quantiles: LatencyQuantiles | None) -> list[str]:
    if quantiles is None:
        return []
    lines = []
    for label, attribute in _QUANTILES:
        value = getattr(quantiles, attribute)
        if value is not None:
            lines.append(f'{name}{{{labels},quantile="{label}"}} {format_value(value)}\n')
    return lines


class InferenceSeries:
    """Renders the per-pod engine series and the reader's self-metrics."""

    def render(self, snapshot: Snapshot, out: Families) -> int:
        stats = snapshot.engine_reads
        if stats is None:  # engines are not read
            return 0
        families: list[tuple[FamilyHeader, list[str]]] = []
        pods = sorted(snapshot.inference.items())
        labelled = [(p, self._labels(snapshot.node, key, p)) for key, p in pods]
        ready = [(p, labels) for p, labels in labelled if p.figures.state == "ready"]
        for header, value in _GAUGES:
            lines = [
                f"{header.name}{{{labels}}} {format_value(v)}\n" for p, labels in ready if (v := value(p)) is not None
            ]
            families.append((header, lines))
        families.append(
            (
                TTFT,
                [
                    line
                    for p, labels in ready
                    for line in _quantile_lines(TTFT.name, labels, p.figures.time_to_first_token_seconds)
                ],
            )
        )
        families.append(
            (
                ITL,
                [
                    line
                    for p, labels in ready
                    for line in _quantile_lines(ITL.name, labels, p.figures.inter_token_latency_seconds)
                ],
            )
        )
        families.append(
            (
                REQUESTS,
                [
                    f"{REQUESTS.name}{{{labels}}} {format_value(p.requests_total)}\n"
                    for p, labels in labelled
                    if p.requests_total is not None
                ],
            )
        )
        families.append(
            (
                TOKENS,
                [
                    f"{TOKENS.name}{{{labels}}} {format_value(p.generated_tokens_total)}\n"
                    for p, labels in labelled
                    if p.generated_tokens_total is not None
                ],
            )
        )
        families.append((STATE, [self._state_line(labels, p) for p, labels in labelled]))
        families = [(header, lines) for header, lines in families if lines]
        families += _self_families(stats)
        out.extend(families)
        return sum(len(lines) for _, lines in families)

    @staticmethod
    def _labels(node: str, key: tuple[str, str], pod: PodInference) -> str:
        return label_pairs(
            (
                ("node", node),
                ("namespace", key[0]),
                ("pod", key[1]),
                ("engine", pod.figures.engine or ""),
                ("model", pod.figures.model or ""),
            )
        )

    @staticmethod
    def _state_line(labels: str, pod: PodInference) -> str:
        extra = label_pairs((("state", pod.figures.state), ("reason", pod.figures.reason or "")))
        return f"{POD_INFERENCE_STATE}{{{labels},{extra}}} 1\n"


def _self_families(stats: EngineReadStats) -> list[tuple[FamilyHeader, list[str]]]:
    families = [
        (READS, [f"{SELF_ENGINE_READS} {stats.reads_total}\n"]),
        (BYTES, [f"{SELF_ENGINE_BYTES} {stats.bytes_total}\n"]),
        (SECONDS, [f"{SELF_ENGINE_SECONDS} {format_value(stats.seconds_total)}\n"]),
        (ENDPOINTS, [f"{SELF_ENGINE_ENDPOINTS} {stats.endpoints}\n"]),
    ]
    failures = [
        f"{SELF_ENGINE_FAILURES}{{{label_pairs((('reason', kind),))}}} {count}\n"
        for kind, count in sorted(stats.failures_total.items())
    ]
    if failures:
        families.append((FAILURES, failures))
    return families
