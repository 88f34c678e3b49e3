"""The `prometheus` source's own share of the HPA's question: a 1,000-pod namespace's two answers turned into values.

    PYTHONPATH=. python bench/prometheus_answers.py [--pods 1000] [--requests 300]

A stand-in for Prometheus in a process of its own answers `/api/v1/query` with canned instant-vector answers of the
size and shape a real one gives for the adapter's default gpu_utilization queries over `--pods` pods (the value
query's series carry the labels the exporter's per-pod series carry after the shipped scrape job; the sample-time
query's carry namespace and pod only). In this process, alternating round by round so both share the machine's noise:
- baseline: the same two GETs sent at once over the same kind of client session, each body read whole, nothing
  decoded (what fetching the answers costs);
- the source: `PrometheusSource.pod_values` for the `--pods` pods (both queries at once, the answers read, decoded
  without trust, joined with the pods, each pod's value made), as the HPA's question runs it.

Prints p50 and p99 of both and the source's cost over the baseline at p50 (the decoding and joining the adapter adds
to the round trip). Goal: the source's p50 within 6x the baseline's, a guard on what decoding and joining cost
(2026-11-29: 8.0x before the HPA's question skipped the labels, 5.1-5.2x after; docs/performance.md); exits 1 when
missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import socket
import statistics
import sys
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapter.metrics_config import default_metrics_config
from adapter.sources.prometheus import PrometheusSource, namespace_matcher
from toolkit.pods import Pod

NAMESPACE = "bench"
GOAL_RATIO = 6.0


def pod_name(index: int) -> str:
    return f"infer-7d9f5c6b8-{index:05d}"


def answers(pods: int, now: float) -> tuple[bytes, bytes]:
    """The value query's answer (a series per pod with the exporter's labels) and the sample-time query's."""

    def labels(i: int) -> dict[str, str]:
        node = f"gpu-{i // 8:04d}"
        return {
            "DCGM_FI_DRIVER_VERSION": "580.95.05",
            "Hostname": node,
            "UUID": f"GPU-{i:08x}-0000-4000-8000-{i:012x}",
            "container": "vllm",
            "device": f"nvidia{i % 8}",
            "gpu": str(i % 8),
            "instance": f"10.1.{i // 2048}.{i // 8 % 256}:9400",
            "job": "gpu-pulse-exporter",
            "modelName": "NVIDIA H100 80GB HBM3",
            "namespace": NAMESPACE,
            "node": node,
            "pci_bus_id": f"00000000:{0x18 + i % 8:02X}:00.0",
            "pod": pod_name(i),
        }

    def vector(result: list[dict[str, object]]) -> bytes:
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()

    values = vector([{"metric": labels(i), "value": [now, repr(40 + (i * 7919) % 600 / 10)]} for i in range(pods)])
    identities = [{"namespace": NAMESPACE, "pod": pod_name(i)} for i in range(pods)]
    times = vector([{"metric": identity, "value": [now, f"{now - 3:.3f}"]} for identity in identities])
    return values, times


def serve(sock: socket.socket, pods: int) -> None:
    """The Prometheus stand-in: the time query's answer for a `timestamp(` query, the value query's otherwise."""
    values, times = answers(pods, time.time())

    async def query(request: web.Request) -> web.Response:
        body = times if "timestamp(" in request.query.get("query", "") else values
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    web.run_app(app, sock=sock, print=None, handle_signals=True)


async def measure(url: str, pods: int, requests: int) -> tuple[list[float], list[float]]:
    metric = next(m for m in default_metrics_config().metrics if m.name == "gpu_utilization")
    assert metric.prometheus is not None
    asked = [Pod(NAMESPACE, pod_name(i), node=f"gpu-{i // 8:04d}") for i in range(pods)]
    value_query, time_query = metric.prometheus_queries(namespace_matcher([NAMESPACE]))
    source = PrometheusSource(url, max_age=3600)
    await source.start()
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16))
    endpoint = url + "/api/v1/query"

    async def fetch(promql: str) -> bytes:
        async with session.get(endpoint, params={"query": promql}) as response:
            return await response.read()

    async def baseline() -> None:
        await asyncio.gather(fetch(value_query), fetch(time_query))

    async def served() -> None:
        values = await source.pod_values(metric, asked)
        if sum(value is not None for value in values) != pods:
            raise SystemExit("the source left pods out: the stand-in's answers are not what it expects")

    timings: dict[str, list[float]] = {"baseline": [], "source": []}
    try:
        for _ in range(20):  # warm-up: connections, caches
            await baseline()
            await served()
        for _ in range(requests):
            for name, ask in (("baseline", baseline), ("source", served)):
                started = time.perf_counter()
                await ask()
                timings[name].append(time.perf_counter() - started)
    finally:
        await session.close()
        await source.close()
    return timings["baseline"], timings["source"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000, help="pods in the namespace, one GPU each")
    parser.add_argument("--requests", type=int, default=300, help="rounds of each")
    args = parser.parse_args()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    stand_in = multiprocessing.get_context("fork").Process(target=serve, args=(sock, args.pods), daemon=True)
    stand_in.start()
    sock.close()
    try:
        values, times = answers(args.pods, time.time())
        baseline, source = asyncio.run(measure(url, args.pods, args.requests))
    finally:
        stand_in.terminate()
        stand_in.join(10)
    print(
        f"{args.pods} pods: answers of {len(values):,} and {len(times):,} bytes; {args.requests} rounds of each,"
        " alternating"
    )
    for name, timing in (("baseline (both GETs, bodies read)", baseline), ("the source's pod_values", source)):
        print(
            f"{name:36s} p50 {percentile(timing, 0.5) * 1e3:7.2f} ms   p99 {percentile(timing, 0.99) * 1e3:7.2f} ms"
            f"   mean {statistics.fmean(timing) * 1e3:7.2f} ms"
        )
    ratio = percentile(source, 0.5) / percentile(baseline, 0.5)
    added = (percentile(source, 0.5) - percentile(baseline, 0.5)) * 1e3
    met = ratio <= GOAL_RATIO
    print(f"the source adds {added:.2f} ms at p50: {ratio:.2f}x the baseline")
    print(f"goal: p50 <= {GOAL_RATIO:g}x the baseline: {'met' if met else 'NOT met'} ({ratio:.2f}x)")
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
