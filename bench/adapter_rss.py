"""Resident memory of the adapter with 10,000 pods in its pod cache.

    PYTHONPATH=. python bench/adapter_rss.py [--pods 10000] [--namespace-pods 1000]

Runs the real adapter CLI (bench/adapter_cluster.py starts it, with TLS and client-certificate auth) twice against the
simulated cluster: once with no pods at all (the baseline: interpreter, libraries, server), once with `--pods` pods.
After the pod cache has synced, it answers HPA queries for the `bench` namespace and namespace-wide queries for a
while (so the node documents of the direct source are cached too), then reads VmRSS and VmHWM from /proc.
Prints both, the difference per cached pod, and the goal: RSS < 150 MiB with 10,000 pods.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from adapter_cluster import Launched, launch

GOAL_BYTES = 150 * 2**20
QUERIES = (
    "/apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/pods/*/gpu_utilization?labelSelector=app%3Dinfer",
    "/apis/custom.metrics.k8s.io/v1beta1/namespaces/bench/pods/*/gpu_memory_used_bytes",
    "/apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/deployments.apps/infer/gpu_power_watts",
    "/apis/custom.metrics.k8s.io/v1beta2/namespaces/*/gpu_utilization",
    "/apis/external.metrics.k8s.io/v1beta1/namespaces/bench/namespace_gpu_utilization?labelSelector=app%3Dinfer",
)


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
    return found


async def exercise(launched: Launched, seconds: float) -> int:
    answered = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    async with aiohttp.ClientSession() as session:
        while loop.time() < deadline:
            for query in QUERIES:
                async with session.get(launched.url + query, ssl=launched.client_ssl) as response:
                    await response.read()
                    answered += response.status == 200
            await asyncio.sleep(0.05)
    return answered


def measure(pods: int, namespace_pods: int, seconds: float) -> dict[str, int]:
    with tempfile.TemporaryDirectory(prefix="gpu-pulse-bench-") as tmp:
        launched = launch(pods, namespace_pods, Path(tmp))
        try:
            answered = asyncio.run(exercise(launched, seconds))
            assert launched.adapter is not None
            figures = memory(launched.adapter.pid)
            figures["answered"] = answered
            return figures
        finally:
            launched.stop()


def mib(value: int) -> str:
    return f"{value / 2**20:7.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--namespace-pods", type=int, default=1_000)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to query before measuring")
    args = parser.parse_args()
    empty = measure(0, 0, args.seconds)
    full = measure(args.pods, args.namespace_pods, args.seconds)
    print(f"adapter, 0 pods            RSS {mib(empty['VmRSS'])}   peak {mib(empty['VmHWM'])}")
    print(
        f"adapter, {args.pods} pods cached RSS {mib(full['VmRSS'])}   peak {mib(full['VmHWM'])}"
        f"   ({full['answered']} answers served)"
    )
    per_pod = (full["VmRSS"] - empty["VmRSS"]) / max(args.pods, 1)
    print(f"per cached pod             {per_pod / 1024:.2f} KiB (difference of the two, node documents included)")
    verdict = "met" if full["VmHWM"] < GOAL_BYTES else "NOT met"
    print(f"goal      peak RSS < {GOAL_BYTES // 2**20} MiB with {args.pods} pods: {verdict}")
    if full["VmHWM"] >= GOAL_BYTES:
        sys.exit(1)


if __name__ == "__main__":
    main()
