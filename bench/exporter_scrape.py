"""Scrape latency of the exporter against the floor: a bare aiohttp handler returning the same bytes.

The exporter runs as its own process (`python -m exporter --simulate ...`, polling every second in its worker thread);
the floor is another process whose handler only returns the bytes the exporter served, with the same headers. A client
in this process sends one request at a time, alternating blocks between the two, for two kinds of request: `plain`
(text 0.0.4, no compression, as curl asks) and `prometheus` (OpenMetrics + gzip, as Prometheus asks). Scenarios:
h100x8 and mig56 (8 GPUs x 7 MIG instances). Budget: exporter p99 <= 1.5x the floor's p99 (exit code 1 otherwise).

    python bench/exporter_scrape.py [--requests N]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web
from exporter_pipeline import SCENARIOS, ExporterProcess, percentile, scenario_argument

BUDGET = 1.5
KINDS = {
    "plain": {"Accept": "text/plain", "Accept-Encoding": "identity"},
    "prometheus": {
        "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        "Accept-Encoding": "gzip",
    },
}


# ---- the floor ------------------------------------------------------------------------------------------------------
def serve_floor(directory: Path) -> None:
    """Serve /metrics?kind=K with the body and headers recorded from the exporter for kind K."""
    answers = {}
    for kind in KINDS:
        headers = json.loads((directory / f"{kind}.json").read_text())
        answers[kind] = ((directory / f"{kind}.bin").read_bytes(), headers)

    async def metrics(request: web.Request) -> web.Response:
        body, headers = answers[request.query["kind"]]
        return web.Response(body=body, headers=headers)

    async def run() -> None:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(f"listening on {runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


# ---- the client -----------------------------------------------------------------------------------------------------
async def record(url: str, directory: Path) -> None:
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        for kind, headers in KINDS.items():
            async with session.get(url + "/metrics", headers=headers) as response:
                body = await response.read()
                keep = {k: v for k, v in response.headers.items() if k in ("Content-Type", "Content-Encoding", "Vary")}
            (directory / f"{kind}.bin").write_bytes(body)
            (directory / f"{kind}.json").write_text(json.dumps(keep))


async def latencies(session: aiohttp.ClientSession, url: str, headers: dict[str, str], count: int) -> list[float]:
    out = []
    for _ in range(count):
        started = time.perf_counter()
        async with session.get(url, headers=headers) as response:
            await response.read()
            assert response.status == 200
        out.append(time.perf_counter() - started)
    return out


async def compare(exporter_url: str, floor_url: str, requests: int) -> dict[str, tuple[list[float], list[float]]]:
    results: dict[str, tuple[list[float], list[float]]] = {}
    block = 100
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        for kind, headers in KINDS.items():
            ours: list[float] = []
            floor: list[float] = []
            await latencies(session, exporter_url + "/metrics", headers, 50)  # warm up connections
            await latencies(session, f"{floor_url}/metrics?kind={kind}", headers, 50)
            while len(ours) < requests:
                ours += await latencies(session, exporter_url + "/metrics", headers, block)
                floor += await latencies(session, f"{floor_url}/metrics?kind={kind}", headers, block)
            results[kind] = (ours, floor)
    return results


def gzip_cost(body: bytes) -> float:
    started = time.perf_counter()
    for _ in range(20):
        gzip.compress(body, compresslevel=6, mtime=0)
    return (time.perf_counter() - started) / 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000, help="requests per target and kind")
    parser.add_argument("--floor", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor is not None:
        serve_floor(args.floor)
        return 0
    print(
        f"{'scenario':8} {'request':10} {'bytes':>7} {'p50':>8} {'p99':>8} "
        f"{'floor p50':>10} {'floor p99':>10} {'p99 ratio':>9}"
    )
    ok = True
    for scenario in SCENARIOS:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            exporter = ExporterProcess(scenario_argument(scenario, directory))
            floor = None
            try:
                time.sleep(2.5)  # a few polls in
                asyncio.run(record(exporter.url, directory))
                floor = subprocess.Popen(
                    [sys.executable, __file__, "--floor", str(directory)], stdout=subprocess.PIPE, text=True
                )
                assert floor.stdout is not None
                port = floor.stdout.readline().split()[-1]
                results = asyncio.run(compare(exporter.url, f"http://127.0.0.1:{port}", args.requests))
            finally:
                exporter.stop()
                if floor is not None:
                    floor.terminate()
                    floor.wait(timeout=10)
            for kind, (ours, base) in results.items():
                size = len((directory / f"{kind}.bin").read_bytes())
                ratio = percentile(ours, 99) / percentile(base, 99)
                ok &= ratio <= BUDGET
                print(
                    f"{scenario:8} {kind:10} {size:7d} {percentile(ours, 50) * 1e3:6.2f}ms "
                    f"{percentile(ours, 99) * 1e3:6.2f}ms {percentile(base, 50) * 1e3:8.2f}ms "
                    f"{percentile(base, 99) * 1e3:8.2f}ms {ratio:8.2f}x"
                )
            plain = (directory / "plain.bin").read_bytes()  # the same size as the OpenMetrics body
            print(
                f"{scenario:8} gzip of the OpenMetrics body, once per snapshot on first request: "
                f"{gzip_cost(plain) * 1e3:.2f}ms (in a worker thread)"
            )
    print(f"budget: exporter p99 <= {BUDGET:g}x the floor's p99 in every case: {'met' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
