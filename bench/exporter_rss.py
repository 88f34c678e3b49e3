"""Resident memory of the exporter after 1,000 and 10,000 scrapes (h100x8 and mig56, --interval 1).

The exporter runs as its own process; 8 concurrent clients scrape /metrics with the four kinds of request in turn
(text, text+gzip, OpenMetrics, OpenMetrics+gzip) and /pods. RSS is read from /proc after start-up, after 1,000 and
after 10,000 scrapes. The baseline is the RSS after start-up (the interpreter and its libraries).
Budget: under 80 MiB after 10,000 scrapes, and growing by less than 2 MiB from 1,000 to 10,000 (exit code 1 otherwise).

    python bench/exporter_rss.py [--scrapes N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from exporter_pipeline import SCENARIOS, ExporterProcess, rss_mib, scenario_argument

LIMIT_MIB = 80.0
GROWTH_MIB = 2.0
HEADERS = [
    {"Accept-Encoding": "identity"},
    {"Accept-Encoding": "gzip"},
    {"Accept": "application/openmetrics-text;version=1.0.0", "Accept-Encoding": "identity"},
    {"Accept": "application/openmetrics-text;version=1.0.0", "Accept-Encoding": "gzip"},
]


async def scrape(url: str, count: int, clients: int = 8) -> None:
    async def client(session: aiohttp.ClientSession, offset: int) -> None:
        for i in range(offset, count, clients):
            path = "/pods" if i % 10 == 9 else "/metrics"
            async with session.get(url + path, headers=HEADERS[i % 4]) as response:
                await response.read()
                assert response.status == 200, response.status

    async with aiohttp.ClientSession(auto_decompress=False) as session:
        await asyncio.gather(*(client(session, offset) for offset in range(clients)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=10_000)
    args = parser.parse_args()
    first = args.scrapes // 10
    ok = True
    print(f"{'scenario':8} {'start-up':>9} {f'{first} scrapes':>15} {f'{args.scrapes} scrapes':>16} {'growth':>8}")
    for scenario in SCENARIOS:
        with tempfile.TemporaryDirectory() as tmp:
            exporter = ExporterProcess(scenario_argument(scenario, Path(tmp)), "--field-set", "all")
            try:
                time.sleep(3)
                start = rss_mib(exporter.pid)
                asyncio.run(scrape(exporter.url, first))
                after_first = rss_mib(exporter.pid)
                asyncio.run(scrape(exporter.url, args.scrapes - first))
                after_all = rss_mib(exporter.pid)
            finally:
                exporter.stop()
        growth = after_all - after_first
        ok &= after_all < LIMIT_MIB and growth < GROWTH_MIB
        print(f"{scenario:8} {start:7.1f}MiB {after_first:13.1f}MiB {after_all:14.1f}MiB {growth:+6.1f}MiB")
    print(
        f"budget: under {LIMIT_MIB:g} MiB after {args.scrapes} scrapes and under {GROWTH_MIB:g} MiB growth from "
        f"{first} to {args.scrapes}: {'met' if ok else 'NOT MET'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
