"""The recorded saturation (rules/saturation.py, for the boards and alerts) and the adapter's default saturation
(adapter/saturation.py, what an HPA scales on) are the same figure: each term's target in the recording rules is the
adapter's vLLM preset, the engine of the shipped examples, so a board reads at 1 what the HPA reads at 100 %."""

from __future__ import annotations

from decimal import Decimal

from adapter.metrics_config import default_metrics_config
from adapter.saturation import PRESETS
from rules.saturation import KV_CACHE_TARGET, QUEUE_TARGET


def test_the_recorded_targets_are_the_adapters_vllm_preset() -> None:
    vllm = PRESETS["vllm"]
    assert Decimal(str(QUEUE_TARGET)) == vllm.queued_requests
    assert Decimal(str(KV_CACHE_TARGET)) == vllm.kv_cache_utilization


def test_the_shipped_saturation_metric_keeps_the_presets_targets() -> None:
    shipped = [m for m in default_metrics_config().metrics if m.name == "inference_saturation"]
    assert shipped, "the adapter's defaults serve inference_saturation"
    spec = shipped[0].saturation
    assert spec is not None
    resolved = spec.resolved()
    assert Decimal(str(QUEUE_TARGET)) == resolved.queued_requests
    assert Decimal(str(KV_CACHE_TARGET)) == resolved.kv_cache_utilization
