"""The PromQL the adapter builds for a saturation figure (adapter.saturation.prometheus_queries), with `promtool test
rules` as referee: over the exporter's series it gives each pod what the direct source's arithmetic gives from the
same signals, and the same driving term as label `term`: the largest term, the idle floor, the cap.
(tests/adapter/test_prometheus_source.py runs the shipped query against a live Prometheus too.)"""

from __future__ import annotations

import string
import subprocess
from decimal import Decimal
from pathlib import Path

import yaml

from adapter.saturation import GpuCap, LatencySlo, SaturationSpec, Signals, prometheus_queries, saturation
from tests.support.tools import require_tool

SPEC = SaturationSpec(
    preset="vllm",
    time_to_first_token=LatencySlo(slo_seconds=Decimal(2)),
    cap=GpuCap(gpu_utilization_below_percent=Decimal(40), percent=Decimal(90)),
).resolved()

# pod -> (GPU utilization ratio, queue, KV cache, TTFT p90 or None)
PODS: dict[str, tuple[str, str, str, str | None]] = {
    "idle": ("0.01", "0", "0.9", "3"),  # an idle GPU, an empty queue: 0 whatever the KV cache and TTFT read
    "capped": ("0.3", "1", "0.4", "4"),  # TTFT at 200 % of its SLO, on a GPU with headroom: held at 90
    "busy": ("0.95", "12", "0.5", "1"),  # 240 % of the queue target
    "filling": ("0.8", "2", "0.9", None),  # 112.5 % of the KV-cache target; no TTFT in the window
}


def _series(name: str, pod: str, value: str, extra: str = "") -> dict[str, str]:
    return {"series": f'{name}{{namespace="ml",pod="{pod}",node="gpu-1"{extra}}}', "values": f"{value}x10"}


def test_the_built_query_gives_each_pod_the_direct_source_s_value_and_term(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    query, _ = prometheus_queries(SPEC)
    series = []
    expected = []
    for pod, (gpu, queue, kv, ttft) in PODS.items():
        series += [
            _series("gpu_pulse_pod_gpu_utilization_ratio", pod, gpu),
            _series("gpu_pulse_pod_inference_queued_requests", pod, queue),
            _series("gpu_pulse_pod_inference_kv_cache_utilization_ratio", pod, kv),
        ]
        if ttft is not None:
            series.append(_series("gpu_pulse_pod_inference_time_to_first_token_seconds", pod, ttft, ',quantile="0.9"'))
        signals = Signals(
            queued_requests=Decimal(queue),
            kv_cache_utilization=Decimal(kv),
            time_to_first_token_seconds=None if ttft is None else Decimal(ttft),
            gpu_utilization_percent=Decimal(gpu) * 100,
        )
        reading = saturation(signals, SPEC)
        assert reading is not None
        expected.append(
            {"labels": f'{{namespace="ml",pod="{pod}",term="{reading.driver}"}}', "value": float(reading.percent)}
        )
    assert [e["value"] for e in expected] == [0, 90, 240, 112.5]  # the cases are what they say
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": string.Template(query).substitute(namespace_matcher='namespace="ml"'),
                        "eval_time": "5m",
                        "exp_samples": expected,
                    }
                ],
            }
        ],
    }
    (tmp_path / "saturation_test.yaml").write_text(yaml.safe_dump(test))
    done = subprocess.run(
        [promtool, "test", "rules", "saturation_test.yaml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
