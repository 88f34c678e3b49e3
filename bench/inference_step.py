"""How fast a step in a serving engine's queue reaches the adapter's answer: through the direct source, and through a
real Prometheus (15 s scrape) and the adapter's prometheus source, side by side in one run.

    PYTHONPATH=. python bench/inference_step.py [--steps 5]

This process serves one simulated vLLM (simulation/engines) on a loopback port; one exporter (`--simulate`, a pod
fronting that endpoint by its `gpu-pulse.dev/engine-port` annotation, `--engines --engine-interval 1`) reads it; a
real `prometheus` scrapes the exporter every 15 s with the shipped rule file loaded; the Kubernetes API stand-in holds
the pod; two adapter apps (adapter.application.build_app, in this process, shipped default metrics) answer
`inference_queued_requests` for the pod, one with the direct source, one with the prometheus source.

Each step: the engine's arrivals jump from none to far past its saturation rate, so its queue is non-empty from its
next scheduler step (simulation/engines/model.py, 0.1 s); the time from the jump to the first answer of each adapter
with a queue above zero is the step's latency. Then arrivals stop and the queue is emptied at once (the bench reaches
into the simulated engine: a real one would drain for minutes), and the next step waits until both answers read 0
again, then a random part of the scrape interval (seeded), so the steps fall at any phase of Prometheus' scrapes.
Prints p50/p99 of each path; exits 1 when the direct source's p99 is 2 s or more (issue 37's done-when).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))

from exporter_pipeline import ExporterProcess
from local_prometheus import launch_prometheus, serve

from adapter.api.selfmetrics import AdapterMetrics
from adapter.application import build_app
from adapter.metrics_config import default_metrics_config
from adapter.podcache.cache import PodCache
from adapter.quantity import parse_quantity
from adapter.settings import AdapterSettings
from adapter.sources.direct import DirectSource
from adapter.sources.exporters import StaticExporters
from adapter.sources.nodefeeds import NodeFeeds
from adapter.sources.prometheus import PrometheusSource
from exporter.catalogue import Dialect
from simulation.engines.server import EngineFleet, simulated_engine
from simulation.kubeapi.server import KubeApiServer
from simulation.scenario import Pod
from tests.support.prometheus import rule_file
from toolkit.backoff import Backoff
from toolkit.kubeclient import api_client
from toolkit.pods_contract import parse_node_pods

NAMESPACE, POD, NODE = "serving", "llm-0", "bench-node"
SCRAPE_S = 15  # Prometheus's default global scrape_interval, and the chart's ServiceMonitor's
FLOOD_PERCENT = 100_000.0  # of the saturation rate: one 0.1 s scheduler step overfills the 256-request batch
DIRECT_BUDGET_S = 2.0
# the adapter's own default --exporter-refresh: the documents come as often as a shipped adapter asks for them
SHIPPED_REFRESH = AdapterSettings.model_fields["exporter_refresh"].default
QUERY = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NAMESPACE}/pods/*/inference_queued_requests"


class SteppedEngine:
    """One simulated vLLM whose arrivals the bench sets: 0 or FLOOD_PERCENT of its saturation rate."""

    def __init__(self) -> None:
        self.level = 0.0
        pod = Pod.model_validate(
            {
                "namespace": NAMESPACE,
                "name": POD,
                "containers": [{"name": "vllm"}],
                "engine": {"kind": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct"},
            }
        )
        self.engine = simulated_engine(pod, lambda _t: self.level, time.time())
        started = time.monotonic()
        self.fleet = EngineFleet([self.engine], lambda: time.monotonic() - started, lambda _ref, _load: None)

    def flood(self) -> None:
        self.level = FLOOD_PERCENT

    def empty(self) -> None:
        with self.engine.lock:
            self.level = 0.0
            self.engine.engine.state.queued = 0.0
            self.engine.engine.state.running = 0.0


def scenario(port: int) -> dict[str, object]:
    return {
        "name": "inference-step",
        "node": NODE,
        "gpus": [{"model": "H100-SXM5-80GB", "load": {"baseline": 90}}],
        "processes": [{"pid": 61000, "gpu": 0, "name": "python3", "memory_mib": 70000}],
        "pods": [
            {
                "namespace": NAMESPACE,
                "name": POD,
                "labels": {"app": "llm"},
                "containers": [{"name": "vllm", "gpus": [{"gpu": 0}], "pids": [61000]}],
                "ip": "127.0.0.1",
                "annotations": {"gpu-pulse.dev/engine-port": str(port)},
            }
        ],
    }


def start_prometheus(workdir: Path, target: str) -> tuple[subprocess.Popen[bytes], str]:
    """A real prometheus scraping `target` every SCRAPE_S with the shipped rules (evaluated as often)."""
    config = {
        "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
        "rule_files": [str(rule_file(Dialect.PROMETHEUS))],
        "scrape_configs": [
            {"job_name": "gpu-pulse-exporter", "honor_labels": True, "static_configs": [{"targets": [target]}]}
        ],
    }
    return launch_prometheus(workdir, config)


def queued(session: aiohttp.ClientSession, url: str) -> Callable[[], Awaitable[float | None]]:
    async def ask() -> float | None:
        async with session.get(f"{url}{QUERY}") as response:
            body = await response.json()
        values = [
            float(parse_quantity(i["value"])) for i in body.get("items", []) if i["describedObject"]["name"] == POD
        ]
        return values[0] if values else None

    return ask


async def first_above_zero(ask: Callable[[], Awaitable[float | None]], since: float, period: float) -> float:
    """Seconds from `since` to the first answer with a queue above zero."""
    while True:
        value = await ask()
        if value is not None and value > 0:
            return time.monotonic() - since
        await asyncio.sleep(period)


async def until_zero(ask: Callable[[], Awaitable[float | None]], period: float) -> None:
    while (await ask()) != 0:
        await asyncio.sleep(period)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(steps: int) -> int:
    stepped = SteppedEngine()
    stepped.fleet.start()
    port = stepped.fleet.ports()[f"{NAMESPACE}/{POD}"]
    with tempfile.TemporaryDirectory() as workdir:
        path = Path(workdir) / "scenario.yaml"
        path.write_text(yaml.safe_dump(scenario(port), sort_keys=False), encoding="utf-8")
        exporter = ExporterProcess(str(path), "--engines", "--engine-interval", "1", "--dialect", "prometheus")
        prometheus, prometheus_url = start_prometheus(Path(workdir), exporter.url.removeprefix("http://"))
        kube = KubeApiServer()
        await kube.start()
        runners: list[web.AppRunner] = []
        cache = None
        try:
            with urllib.request.urlopen(f"{exporter.url}/pods", timeout=5) as response:
                [pod] = parse_node_pods(response.read()).pods
            kube.put_pod(NAMESPACE, POD, node=NODE, labels={"app": "llm"}, uid=pod.uid)
            cache = PodCache(api_client(base_url=kube.url), backoff=Backoff(initial=0.05, maximum=0.2))
            await cache.start()
            assert await cache.wait_synced(10)
            config = default_metrics_config()
            locator = StaticExporters({NODE: exporter.url})
            direct_app = build_app(
                config=config,
                pods=cache,
                source=DirectSource(locator, NodeFeeds(refresh=SHIPPED_REFRESH)),
                metrics=AdapterMetrics("direct"),
            )
            prom_app = build_app(
                config=config, pods=cache, source=PrometheusSource(prometheus_url), metrics=AdapterMetrics("prometheus")
            )
            (direct_runner, direct_url), (prom_runner, prom_url) = await serve(direct_app), await serve(prom_app)
            runners = [direct_runner, prom_runner]
            direct: list[float] = []
            via_prometheus: list[float] = []
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
                ask_direct, ask_prometheus = queued(session, direct_url), queued(session, prom_url)
                print(f"waiting for both paths to read the engine's empty queue (up to {SCRAPE_S} s + a scrape)")
                await asyncio.wait_for(
                    asyncio.gather(until_zero(ask_direct, 0.2), until_zero(ask_prometheus, 0.5)), 120
                )
                phases = random.Random(37)
                for step in range(steps):
                    # a step comes at any moment of the scrape cycle: right after the zero was scraped, Prometheus'
                    # path would always read its worst case
                    await asyncio.sleep(phases.uniform(0, SCRAPE_S))
                    stepped.flood()
                    since = time.monotonic()
                    a, b = await asyncio.wait_for(
                        asyncio.gather(
                            first_above_zero(ask_direct, since, 0.05), first_above_zero(ask_prometheus, since, 0.25)
                        ),
                        3 * SCRAPE_S + 30,
                    )
                    direct.append(a)
                    via_prometheus.append(b)
                    print(f"step {step + 1}: direct {a:6.2f} s, prometheus {b:6.2f} s", flush=True)
                    stepped.empty()
                    await asyncio.wait_for(
                        asyncio.gather(until_zero(ask_direct, 0.2), until_zero(ask_prometheus, 0.5)),
                        3 * SCRAPE_S + 30,
                    )
        finally:
            for runner in runners:
                await runner.cleanup()
            if cache is not None:
                await cache.stop()
            await kube.stop()
            prometheus.terminate()
            prometheus.wait(20)
            exporter.stop()
            stepped.fleet.stop()
    report = {
        "steps": steps,
        "scrape_interval_s": SCRAPE_S,
        "direct_p50_s": round(statistics.median(direct), 3),
        "direct_p99_s": round(percentile(direct, 0.99), 3),
        "prometheus_p50_s": round(statistics.median(via_prometheus), 3),
        "prometheus_p99_s": round(percentile(via_prometheus, 0.99), 3),
    }
    print(json.dumps(report))
    ok = report["direct_p99_s"] < DIRECT_BUDGET_S
    print(f"direct p99 under {DIRECT_BUDGET_S:g} s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    return asyncio.run(run(parser.parse_args().steps))


if __name__ == "__main__":
    sys.exit(main())
