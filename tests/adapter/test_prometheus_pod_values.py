"""The `prometheus` source's answer to the HPA's question (`pod_values`: labels left undecoded, no sample built) is
exactly what its general path gives (`samples`, then each pod's value), whatever Prometheus answers: values out of
bounds or not numbers, sample times missing, old or in the future, pods with several devices, series repeated."""

from __future__ import annotations

import json

from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from adapter.metrics_config import default_metrics_config
from adapter.sources.aggregation import pod_value
from adapter.sources.prometheus import FUTURE_TOLERANCE_SECONDS, PrometheusSource
from toolkit.pods import Pod

NOW = 1_800_000_000.0
MAX_AGE = 60.0
PODS = ["infer-a", "infer-b", "infer-c", "train-0"]
VALUES = st.sampled_from(["42.5", "0", "100", "57.25000000000001"]) | st.sampled_from(
    ["1e300", "-3", "NaN", "+Inf", "x"]
)
# seconds before NOW (negative: in the future), within max_age and the future's tolerance or not
AGES = st.sampled_from([1.0, 30.0, 59.0, -3.0]) | st.sampled_from([61.0, 600.0, -60.0])
DEVICE = st.sampled_from(["0", "1", "2"])
SERIES = st.lists(st.tuples(st.sampled_from(PODS), DEVICE, VALUES), max_size=10)
TIMES = st.dictionaries(st.sampled_from(PODS), AGES)
METRICS = st.sampled_from(["gpu_utilization", "gpu_memory_used_bytes", "gpu_memory_utilization"])


def answer(result: list[dict[str, object]]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(
    [("infer-a", "0", "42.5"), ("infer-a", "1", "0"), ("infer-b", "0", "7")], {"infer-a": 1.0}, "gpu_utilization", PODS
)
@example(
    [("infer-a", "0", "42.5"), ("infer-a", "0", "42.5"), ("infer-b", "2", "1e300")],
    {"infer-a": 1.0},
    "gpu_memory_used_bytes",
    PODS,
)
@given(SERIES, TIMES, METRICS, st.lists(st.sampled_from(PODS), min_size=1, max_size=4, unique=True))
async def test_the_hpas_answer_is_each_pods_value_of_its_samples(
    series: list[tuple[str, str, str]], ages: dict[str, float], name: str, asked: list[str]
) -> None:
    values = answer(
        [
            {"metric": {"gpu": gpu, "namespace": "ml", "node": "n1", "pod": pod}, "value": [NOW, text]}
            for pod, gpu, text in series
        ]
    )
    times = answer(
        [{"metric": {"namespace": "ml", "pod": pod}, "value": [NOW, repr(NOW - age)]} for pod, age in ages.items()]
    )

    async def handler(request: web.Request) -> web.Response:
        body = times if "timestamp(" in request.query["query"] else values
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/query", handler)
    metric = next(m for m in default_metrics_config().metrics if m.name == name)
    pods = [Pod("ml", pod) for pod in asked]
    async with TestServer(app, host="127.0.0.1", port=0) as server:
        source = PrometheusSource(str(server.make_url("")), clock=lambda: NOW, max_age=MAX_AGE)
        await source.start()
        try:
            served = await source.pod_values(metric, pods)
            samples = await source.samples(metric, pods)
        finally:
            await source.close()
    expected = [pod_value(metric, s) if (s := samples.get(("ml", pod.name))) is not None else None for pod in pods]
    assert served == expected
    for pod in pods:  # a pod without a sample time, or with one too old or in the future, is left out
        age = ages.get(pod.name)
        if age is None or not -FUTURE_TOLERANCE_SECONDS <= age <= MAX_AGE:
            assert ("ml", pod.name) not in samples, pod
