"""Series per node: what a Prometheus scraping one gpu-pulse exporter stores, per field set and dialect.

Each exporter runs as its own process on a simulated node (8 x H100 whole, and 8 x H100 split into 56 MIG instances),
with `--field-set default` and `--field-set all`, in both dialects, and is scraped once its pods are attributed (the
second snapshot after start-up); every sample line of the answer is one series. This is the exposition a fleet's
Prometheus holds (bench/fleet_prometheus.py serves it), and the sizing table of docs/install.md.

    python bench/series_budget.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass

from exporter_pipeline import ExporterProcess

SCENARIOS = ("h100x8", "h100-mig")
FIELD_SETS = ("default", "all")
DIALECTS = ("dcgm", "prometheus")
SETTLE_SECONDS = 3.0  # past the first poll and the first kubelet answer, so pod labels and pod series are there


@dataclass(frozen=True)
class Count:
    scenario: str
    field_set: str
    dialect: str
    series: int
    families: int
    body_bytes: int


def exposition(scenario: str, field_set: str, dialect: str) -> str:
    """The /metrics text an exporter serves once settled, as Prometheus' text format asks for it."""
    exporter = ExporterProcess(scenario, "--field-set", field_set, "--dialect", dialect, interval=1.0)
    try:
        time.sleep(SETTLE_SECONDS)
        request = urllib.request.Request(exporter.url + "/metrics", headers={"Accept": "text/plain;version=0.0.4"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(response.read().decode())
    finally:
        exporter.stop()


def count(text: str) -> tuple[int, int]:
    """(sample lines, families) of a text exposition."""
    lines = text.splitlines()
    series = sum(1 for line in lines if line and not line.startswith("#"))
    families = sum(1 for line in lines if line.startswith("# TYPE "))
    return series, families


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the counts to this file")
    args = parser.parse_args()
    counts = []
    print(f"{'node':10} {'dialect':10} {'field set':9} {'series':>7} {'families':>8} {'bytes':>8}")
    for scenario in SCENARIOS:
        for dialect in DIALECTS:
            for field_set in FIELD_SETS:
                text = exposition(scenario, field_set, dialect)
                series, families = count(text)
                counts.append(Count(scenario, field_set, dialect, series, families, len(text.encode())))
                print(f"{scenario:10} {dialect:10} {field_set:9} {series:7} {families:8} {len(text.encode()):8}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump([asdict(c) for c in counts], out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
