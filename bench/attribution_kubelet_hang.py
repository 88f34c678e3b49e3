"""A scrape never waits on the kubelet: /metrics and /pods latency with a hanging kubelet vs a healthy one.

    python bench/attribution_kubelet_hang.py [--scrapes 400] [--rounds 3]

The real exporter (simulator -> collector -> attributor -> PollLoop -> aiohttp server) on the busy node of
attribution_node.py, polling every 0.5 s, with the fake kubelet listed every 0.5 s. Rounds alternate a healthy kubelet
and one that hangs every call (the client's deadline runs out, again and again). Each phase scrapes /metrics and /pods
sequentially over loopback and records latency. Prints p50/p99 per phase and the ratio hanging/healthy, which must be
1 within noise; and the age of the served snapshot, which must stay below a few intervals while the kubelet hangs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from attribution_node import Node, busy_node, node

from exporter.server import build_app
from toolkit.serving import start_server
from toolkit.settings import ListenAddress

INTERVAL = 0.5


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def scrape(session: aiohttp.ClientSession, url: str, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        start = time.perf_counter()
        async with session.get(url) as response:
            await response.read()
            assert response.status == 200, response.status
        latencies.append(time.perf_counter() - start)
    return latencies


async def wait_for(condition: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for the kubelet client to change state")
        await asyncio.sleep(0.05)


async def run(sim: Node, scrapes: int, rounds: int) -> float:
    """Returns the oldest snapshot served while the kubelet hung, in seconds."""
    assert sim.attributor is not None and sim.side is not None
    client, kubelet = sim.attributor.client, sim.side.kubelet
    server = await start_server(build_app(sim.loop), ListenAddress("127.0.0.1", 0))
    results: dict[tuple[str, str], list[float]] = {}
    ages: list[float] = []
    try:
        async with aiohttp.ClientSession() as session:
            await wait_for(lambda: sim.loop.published is not None)
            await scrape(session, f"{server.url}/metrics", 50)  # warm-up
            for _ in range(rounds):
                for phase in ("healthy", "hanging"):
                    if phase == "hanging":
                        kubelet.hang()
                        calls = kubelet.list_calls
                        await wait_for(lambda calls=calls: kubelet.list_calls > calls and not client.state.up)
                    else:
                        kubelet.release()
                        await wait_for(lambda: client.state.up)
                    for path in ("/metrics", "/pods"):
                        results.setdefault((phase, path), []).extend(
                            await scrape(session, f"{server.url}{path}", scrapes)
                        )
                    published = sim.loop.published
                    assert published is not None
                    if phase == "hanging":
                        ages.append(time.time() - published.snapshot.taken_at)
                        assert not client.state.up, "the kubelet answered while it should hang"
            kubelet.release()
    finally:
        await server.stop()

    print(f"{'phase':<8} {'path':<9} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for (phase, path), samples in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(
            f"{phase:<8} {path:<9} {statistics.median(samples) * 1e3:8.3f} {percentile(samples, 0.99) * 1e3:8.3f} "
            f"{statistics.fmean(samples) * 1e3:8.3f}"
        )
    for path in ("/metrics", "/pods"):
        healthy, hanging = results[("healthy", path)], results[("hanging", path)]
        print(
            f"{path}: hanging/healthy p50 {statistics.median(hanging) / statistics.median(healthy):.2f}x, "
            f"p99 {percentile(hanging, 0.99) / percentile(healthy, 0.99):.2f}x"
        )
    print(f"served snapshot age while the kubelet hung: max {max(ages):.2f} s (poll interval {INTERVAL} s)")
    print(f"kubelet calls: {kubelet.list_calls}, client errors: {client.state.errors_total}")
    return max(ages)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=400, help="scrapes per path per phase per round")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with node(busy_node(), interval=INTERVAL, kubelet_interval=INTERVAL) as sim:
        assert sim.attributor is not None
        sim.attributor.client.call_timeout = 0.4  # a hang costs the client this much per call, never a scrape
        oldest = asyncio.run(run(sim, options.scrapes, options.rounds))
    # the behaviour that matters: polling (and so what scrapes get) goes on while the kubelet hangs
    met = oldest <= 2 * INTERVAL
    print(f"budget: snapshots served while the kubelet hangs stay <= 2 intervals old: {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
