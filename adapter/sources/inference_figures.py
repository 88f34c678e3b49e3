"""From a pod's serving engine figures (toolkit.pods_contract.InferenceFigures) to the one figure a metric reads.

An inference figure is one per pod, not one per GPU: what the engine in the pod reports, read by its node's exporter.
Only an engine in the `ready` state has figures: a pod that is not Ready, whose engine does not answer yet, answers
no more, is not recognised or was refused gives none, so it is left out of every pod answer and of every figure
combined over a workload's pods, as the HPA leaves unready pods out for CPU (the exporter sends every figure as None
then too; the state is checked here as well, so that a figure beside another state is never served).

Its sample time is when the engine was read, not when the pod's GPUs were; that time is taken as no later than the
document's own (`generated_at`), so an inference figure never looks fresher than the document it came in.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from operator import attrgetter
from types import MappingProxyType

from adapter.metrics_config import Figure, MetricDefinition, Percentile
from toolkit.pods_contract import (
    MAX_LATENCY_SECONDS,
    MAX_RATE_PER_SECOND,
    MAX_REQUESTS,
    InferenceFigures,
    LatencyQuantiles,
)

# What each inference figure's unit allows (the /pods contract's bounds).
INFERENCE_BOUNDS: dict[Figure, tuple[Decimal, Decimal]] = {
    Figure.QUEUED_REQUESTS: (Decimal(0), Decimal(MAX_REQUESTS)),
    Figure.RUNNING_REQUESTS: (Decimal(0), Decimal(MAX_REQUESTS)),
    Figure.KV_CACHE_UTILIZATION: (Decimal(0), Decimal(1)),
    Figure.TIME_TO_FIRST_TOKEN_SECONDS: (Decimal(0), Decimal(MAX_LATENCY_SECONDS)),
    Figure.INTER_TOKEN_LATENCY_SECONDS: (Decimal(0), Decimal(MAX_LATENCY_SECONDS)),
    Figure.REQUESTS_PER_SECOND: (Decimal(0), Decimal(MAX_RATE_PER_SECOND)),
    Figure.GENERATED_TOKENS_PER_SECOND: (Decimal(0), Decimal(MAX_RATE_PER_SECOND)),
}

READY = "ready"


InferenceReader = Callable[[InferenceFigures], float | None]


def _never(inference: InferenceFigures) -> float | None:
    return None


def inference_reader(metric: MetricDefinition) -> InferenceReader:
    """What reads the number `metric` reads of a pod's engine figures, in the /pods unit (None where the engine does
    not give it), whatever the engine's state: worked out once per metric, as a document's pods are read in a loop."""
    figure = metric.figure
    if figure.is_latency:
        attribute = (
            "time_to_first_token_seconds"
            if figure is Figure.TIME_TO_FIRST_TOKEN_SECONDS
            else ("inter_token_latency_seconds")
        )
        percentile = str(metric.percentile or Percentile.P90)

        def latency(inference: InferenceFigures) -> float | None:
            quantiles: LatencyQuantiles | None = getattr(inference, attribute)
            return None if quantiles is None else getattr(quantiles, percentile)  # type: ignore[no-any-return]

        return latency
    if not figure.of_inference or figure is Figure.SATURATION:
        return _never  # a device figure (not the engine's), or one worked out of several (saturation_figures)
    return attrgetter(str(figure))


def inference_number(inference: InferenceFigures | None, metric: MetricDefinition) -> float | None:
    """The number `metric` reads of a pod's engine figures, in the /pods unit; None when the pod has no engine
    figures, its engine is not ready, or it does not give this one."""
    if inference is None or inference.state != READY:
        return None
    return inference_reader(metric)(inference)


def inference_labels(node: str, inference: InferenceFigures) -> MappingProxyType[str, str]:
    """The labels `metricLabelSelector` matches on an inference figure: the node, and the engine and model the exporter
    recognised (named like the exporter's `gpu_pulse_pod_inference_*` series)."""
    labels = {"node": node}
    if inference.engine is not None:
        labels["engine"] = inference.engine
    if inference.model is not None:
        labels["model"] = inference.model
    return MappingProxyType(labels)


def inference_sampled_at(inference: InferenceFigures, generated_at: float | None) -> float:
    """When the engine was read, on the exporter's clock (Unix seconds), taken as no later than `generated_at` (the
    document's time) when given."""
    sampled = inference.sampled_at.timestamp()
    return sampled if generated_at is None else min(sampled, generated_at)
