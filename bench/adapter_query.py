"""HPA-style query latency of the adapter: 1,000 pods in the namespace, 10,000 in the pod cache, direct source.

    PYTHONPATH=. python bench/adapter_query.py [--requests 1000] [--pods 10000] [--namespace-pods 1000]

Starts the simulated cluster (bench/adapter_cluster.py: the Kubernetes API test server, simulated exporter `/pods`
endpoints on loopback for the 125 nodes of the namespace) and the real adapter CLI (TLS, client-certificate auth,
SubjectAccessReview), then asks what the HPA asks every 15 s,
    GET /apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/pods/*/gpu_utilization?labelSelector=app%3Dinfer
sequentially over one kept-alive TLS connection (as the aggregator does), while the adapter refreshes the nodes'
documents in the background every exporter interval (1 s). Baseline, in the same run and the same way: a bare aiohttp
TLS server, in its own process, answering a prebuilt body of the same size. Rounds alternate the two, to share the
machine's noise. Prints p50/p99/mean of both, the ratio, and the goal: adapter p99 < 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

from adapter_cluster import Launched, launch, start_baseline_server

QUERY = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/pods/*/gpu_utilization?labelSelector=app%3Dinfer"
GOAL_P99_SECONDS = 0.020


async def timed_requests(session: aiohttp.ClientSession, url: str, launched: Launched, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        async with session.get(url, ssl=launched.client_ssl) as response:
            body = await response.read()
            if response.status != 200:
                raise SystemExit(f"{url} answered {response.status}: {body[:300]!r}")
        latencies.append(time.perf_counter() - started)
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def line(name: str, latencies: list[float]) -> str:
    return (
        f"{name:<9} p50 {percentile(latencies, 0.50) * 1e3:7.2f} ms   p99 {percentile(latencies, 0.99) * 1e3:7.2f} ms"
        f"   mean {statistics.fmean(latencies) * 1e3:7.2f} ms   ({len(latencies)} requests)"
    )


async def measure(launched: Launched, baseline_url: str, requests: int, rounds: int) -> tuple[list[float], list[float]]:
    adapter_latencies: list[float] = []
    baseline_latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=1)  # one kept-alive connection each, as the aggregator keeps
    async with (
        aiohttp.ClientSession(connector=connector) as adapter_session,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as baseline_session,
    ):
        await timed_requests(adapter_session, launched.url + QUERY, launched, 50)  # warm up: documents, caches
        await timed_requests(baseline_session, baseline_url + QUERY, launched, 50)
        per_round = max(1, requests // rounds)
        for _ in range(rounds):
            adapter_latencies += await timed_requests(adapter_session, launched.url + QUERY, launched, per_round)
            baseline_latencies += await timed_requests(baseline_session, baseline_url + QUERY, launched, per_round)
    return adapter_latencies, baseline_latencies


async def server_side(launched: Launched) -> str:
    """The adapter's own view (its request-duration histogram): the share of answers within each bucket."""
    async with aiohttp.ClientSession() as session:
        async with session.get(launched.url + "/metrics", ssl=launched.client_ssl) as response:
            text = await response.text()
    buckets: list[tuple[float, float]] = []
    for family in text_string_to_metric_families(text):
        if family.name != "gpu_pulse_adapter_request_duration_seconds":
            continue
        for sample in family.samples:
            labels = sample.labels
            if sample.name.endswith("_bucket") and labels["version"] == "v1beta2" and labels["code"] == "200":
                buckets.append((float(labels["le"]), sample.value))
    total = buckets[-1][1] if buckets else 0
    shown = [f"<= {le * 1e3:g} ms: {count / total:.1%}" for le, count in buckets if total and le <= 0.05]
    return "server    " + ", ".join(shown)


async def body_size(launched: Launched) -> tuple[int, int]:
    async with aiohttp.ClientSession() as session:
        async with session.get(launched.url + QUERY, ssl=launched.client_ssl) as response:
            body = await response.json()
            return len(await response.read()), len(body["items"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--namespace-pods", type=int, default=1_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpu-pulse-bench-") as tmp:
        launched = launch(args.pods, args.namespace_pods, Path(tmp))
        baseline: subprocess.Popen[bytes] | None = None
        try:
            size, items = asyncio.run(body_size(launched))
            baseline, baseline_url = start_baseline_server(b"x" * size, launched.serving_cert, launched.serving_key)
            adapter_latencies, baseline_latencies = asyncio.run(
                measure(launched, baseline_url, args.requests, args.rounds)
            )
            server = asyncio.run(server_side(launched))
        finally:
            if baseline is not None:
                baseline.terminate()
                baseline.wait()
            launched.stop()
    print(f"HPA query: {items} pods of {args.namespace_pods} in the namespace, {args.pods} in the cache, {size} bytes")
    print(line("adapter", adapter_latencies))
    print(line("baseline", baseline_latencies))
    print(server)
    ratio = percentile(adapter_latencies, 0.99) / percentile(baseline_latencies, 0.99)
    print(f"ratio     p99 adapter / baseline = {ratio:.1f}")
    p99 = percentile(adapter_latencies, 0.99)
    verdict = "met" if p99 < GOAL_P99_SECONDS else "NOT met"
    print(f"goal      p99 < {GOAL_P99_SECONDS * 1e3:.0f} ms: {verdict} ({p99 * 1e3:.2f} ms)")
    if p99 >= GOAL_P99_SECONDS:
        sys.exit(1)


if __name__ == "__main__":
    main()
