"""What reading the serving engines costs the exporter: CPU and RSS with 8 GPU pods whose vLLM endpoints are read every
second, against the same exporter without `--engines`, side by side in one run.

    PYTHONPATH=. python bench/engine_reading.py [--seconds 60]

This process serves 8 simulated vLLM engines (simulation/engines: vLLM's exposition at its real size, each a
data-parallel vLLM of two engine cores, every family once per `engine` label, with prometheus_client's own families:
about 800 lines) on loopback ports, under load so their histograms move. Two
exporter processes run the same 8 x H100 scenario whose pods front those endpoints (pod IP 127.0.0.1, the
`gpu-pulse.dev/engine-port` annotation): one with `--engines --engine-interval 1`, one without. After a warm-up both
are measured over the same seconds: CPU (user + system, /proc) as a share of one core, and RSS at the end. Budget
(issue 37): at most 2% of a core and 10 MiB above the exporter without engines.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from exporter_pipeline import ExporterProcess, cpu_seconds, rss_mib

from simulation.curves import constant
from simulation.engines.server import EngineFleet, simulated_engine
from simulation.scenario import Pod
from toolkit.pods_contract import parse_node_pods

PODS = 8
BUDGET_CPU_SHARE = 0.02
BUDGET_RSS_MIB = 10.0
WARM_UP_S = 10.0


def scenario(ports: dict[str, int]) -> dict[str, object]:
    pods = []
    for i in range(PODS):
        ref = f"serving/llm-{i}"
        pods.append(
            {
                "namespace": "serving",
                "name": f"llm-{i}",
                "labels": {"app": "llm"},
                "containers": [{"name": "vllm", "gpus": [{"gpu": i}], "pids": [60000 + i]}],
                "ip": "127.0.0.1",
                "annotations": {"gpu-pulse.dev/engine-port": str(ports[ref])},
            }
        )
    return {
        "name": "engines-bench",
        "node": "bench-node",
        "gpus": [{"model": "H100-SXM5-80GB", "load": {"baseline": 90}} for _ in range(PODS)],
        "processes": [{"pid": 60000 + i, "gpu": i, "name": "python3", "memory_mib": 70000} for i in range(PODS)],
        "pods": pods,
    }


def engines() -> EngineFleet:
    fleet = []
    for i in range(PODS):
        pod = Pod.model_validate(
            {
                "namespace": "serving",
                "name": f"llm-{i}",
                "containers": [{"name": "vllm"}],
                "engine": {"kind": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct", "data_parallel": 2},
            }
        )
        fleet.append(simulated_engine(pod, constant(60.0 + 10 * i), time.time()))
    started = time.monotonic()

    def ignore(_: str, __: float) -> None:  # these engines drive no simulated GPU here
        return None

    return EngineFleet(fleet, lambda: time.monotonic() - started, ignore)


def ready_pods(url: str) -> int:
    with urllib.request.urlopen(f"{url}/pods", timeout=5) as response:
        document = parse_node_pods(response.read())
    return sum(1 for p in document.pods if p.inference is not None and p.inference.state == "ready")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    seconds = parser.parse_args().seconds
    fleet = engines()
    fleet.start()
    try:
        ports = fleet.ports()
        sample = urllib.request.urlopen(f"http://127.0.0.1:{next(iter(ports.values()))}/metrics", timeout=5).read()
        lines = sample.count(b"\n")
        print(f"each engine's /metrics: {lines} lines, {len(sample) / 1024:.0f} KiB")
        with tempfile.TemporaryDirectory() as workdir:
            path = Path(workdir) / "engines.yaml"
            path.write_text(yaml.safe_dump(scenario(ports), sort_keys=False), encoding="utf-8")
            reading = ExporterProcess(str(path), "--engines", "--engine-interval", "1")
            plain = ExporterProcess(str(path))
            try:
                deadline = time.monotonic() + 60
                while ready_pods(reading.url) < PODS:
                    if time.monotonic() > deadline:
                        print("the engines never all read ready", file=sys.stderr)
                        return 1
                    time.sleep(0.5)
                time.sleep(WARM_UP_S)
                cpu0 = {p: cpu_seconds(p.pid) for p in (reading, plain)}
                t0 = time.monotonic()
                time.sleep(seconds)
                elapsed = time.monotonic() - t0
                share = {p: (cpu_seconds(p.pid) - cpu0[p]) / elapsed for p in (reading, plain)}
                rss = {p: rss_mib(p.pid) for p in (reading, plain)}
                assert ready_pods(reading.url) == PODS
            finally:
                reading.stop()
                plain.stop()
    finally:
        fleet.stop()
    extra_cpu = share[reading] - share[plain]
    extra_rss = rss[reading] - rss[plain]
    print(f"over {elapsed:.0f} s, --interval 1, 8 x H100 with {PODS} GPU pods:")
    print(f"  without --engines   CPU {share[plain] * 100:6.2f}% of a core   RSS {rss[plain]:6.1f} MiB")
    print(f"  with --engines      CPU {share[reading] * 100:6.2f}% of a core   RSS {rss[reading]:6.1f} MiB")
    print(f"  engines add         CPU {extra_cpu * 100:+6.2f}% of a core   RSS {extra_rss:+6.1f} MiB")
    ok = extra_cpu <= BUDGET_CPU_SHARE and extra_rss <= BUDGET_RSS_MIB
    print(f"budget: +{BUDGET_CPU_SHARE * 100:g}% of a core, +{BUDGET_RSS_MIB:g} MiB: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
