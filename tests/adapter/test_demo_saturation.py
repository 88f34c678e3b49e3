"""The demo's `inference_saturation` against the engines themselves (issue 38's first done-when): each llm-inference
pod's value, asked through the exact kubectl command the demo prints, equals the largest of its terms worked out here
from what that pod's vLLM endpoint showed at most 2 s before the answer, with the demo's configuration (the shipped
defaults: adapter/defaults.yaml, preset vllm: requests waiting over 5, `vllm:kv_cache_usage_perc` over 0.8).

The endpoints are read independently of the exporter, as tests/adapter/test_demo_inference.py reads them (its
helpers: each pod's IP and port annotation from the demo's API, a thread per pod polling it). The idle floor applies
only to a GPU below 5 % with an empty queue; a pod served 0 must have shown an empty queue then.
"""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

import pytest

from adapter.metrics_config import default_metrics_config
from tests.adapter.test_demo_inference import (
    FRESH_S,
    ROUNDS,
    EngineHistory,
    _ask,
    _engine_endpoints,
    polling,
)
from tests.adapter.test_demo_run import running_demo
from tests.support.tools import require_tool
from tests.support.waiting import patience, wait_for

pytestmark = pytest.mark.timeout(240)

QUEUE, KV = "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"
# the served precision: a quantity keeps three decimals of a percent (the HPA reads milli-units)
_SAME = Decimal("0.001")


def _targets() -> tuple[Decimal, Decimal]:
    metric = default_metrics_config().custom("inference_saturation")
    assert metric is not None and metric.saturation is not None
    spec = metric.saturation
    assert spec.queued_requests is not None and spec.kv_cache_utilization is not None
    assert spec.time_to_first_token is None and spec.inter_token_latency is None  # no SLO in the demo's config
    return spec.queued_requests, spec.kv_cache_utilization


def largest_term(shown: dict[str, Decimal], queue_target: Decimal, kv_target: Decimal) -> Decimal:
    return max(shown[QUEUE] * 100 / queue_target, shown[KV] * 100 / kv_target)


def age_of(
    history: EngineHistory, value: Decimal, answered: float, queue_target: Decimal, kv_target: Decimal
) -> float | None:
    """How long before `answered` the endpoint last showed figures whose largest term is `value` (or, for 0, an empty
    queue: the idle floor), None if never.

    The engine moves its figures every few tens of milliseconds, and on a loaded machine the poller may miss one
    reading between two of its own: a value strictly between the largest terms of two consecutive readings is one
    the engine passed through after the first of them, and counts as shown then."""
    with history.lock:
        shown = [
            (t, largest_term(v, queue_target, kv_target), v[QUEUE])
            for t, v in history.samples
            if QUEUE in v and KV in v
        ]
    found: float | None = None
    for i, (t, term, queue) in enumerate(shown):
        if t > answered:
            break
        if abs(term - value) <= _SAME or (value == 0 and queue == 0):
            found = t
        elif (
            i + 1 < len(shown)
            and shown[i + 1][0] <= answered
            and min(term, shown[i + 1][1]) < value < max(term, shown[i + 1][1])
        ):
            found = t
    return None if found is None else answered - found


def test_each_pods_saturation_is_the_largest_term_its_engine_showed_within_two_seconds(tmp_path: Path) -> None:
    require_tool("kubectl")
    queue_target, kv_target = _targets()
    with running_demo(tmp_path) as demo:
        [command] = [c for c in demo.commands() if "/pods/*/inference_saturation?" in c]
        endpoints = _engine_endpoints(demo)
        assert len(endpoints) == 4, endpoints
        histories = {pod: EngineHistory(url) for pod, url in endpoints.items()}
        seen: set[Decimal] = set()
        bound = patience(FRESH_S)  # stretched on a loaded machine, as test_demo_inference's
        with polling(histories):
            started = time.time()
            wait_for(
                lambda: set(_ask(demo, command).values) == set(endpoints) and time.time() - started > bound,
                "every llm-inference pod's inference_saturation in the adapter's answers",
                patience(60),
            )
            for _ in range(ROUNDS * 2):
                answer = _ask(demo, command)
                assert set(answer.values) == set(endpoints), answer
                for pod, value in answer.values.items():
                    age = age_of(histories[pod], value, answer.received, queue_target, kv_target)
                    with histories[pod].lock:
                        recent = [
                            (round(float(v.get(QUEUE, -1))), float(v.get(KV, -1)))
                            for t, v in histories[pod].samples
                            if answer.received - FRESH_S <= t <= answer.received
                        ]
                    assert age is not None and age <= bound, (
                        f"inference_saturation of {pod} is {value}: no (queue, KV cache) its engine showed in the "
                        f"{bound:.1f} s before the answer has that largest term; it showed {recent}"
                    )
                    seen.add(value)
        assert len(seen) > 1, seen  # live values, not one constant
