"""How fast a step in demand at zero replicas reaches the answers that wake a workload: gpu-pulse reading the gateway
directly, against the same signal through a real Prometheus and KEDA's Prometheus trigger, side by side in one run.

    PYTHONPATH=. python bench/demand_step.py [--steps 5] [--scrape-interval 15] [--polling-interval 30]

The demand is the requests an inference gateway holds for a pool with no ready endpoint: a simulated endpoint picker
(simulation/gateway.py) serving `inference_extension_flow_control_queue_size` on /metrics. Each step, requests are
POSTed to it at a random (seeded) point of the KEDA poll's and the scrape's cycles and wait; from that moment the
bench times, per path:
- `external`: the first `inference_pending_requests` External metric answer above 0, over HTTP as an HPA asks it
  (polled every 50 ms, not every 15 s as an HPA would: the time measured is the adapter's, not the HPA's sync period),
  from an adapter app (adapter.application.build_app, in this process) whose metrics file has one `demand` entry on the
  gateway with the shipped `refresh_seconds`;
- `keda-push`: the first StreamIsActive push of true, over real gRPC through KEDA's own externalscaler.proto
  (tests/support/keda.py), from the adapter's external scaler as `--keda-listen` builds it (adapter/keda/scaler.py,
  shipped settings but `--keda-deactivate-after 0`: the 60 s hold of a woken workload only delays the next step);
- `prometheus-keda`: a real `prometheus` scrapes the gateway every `--scrape-interval` (15 s: the shipped chart's
  ServiceMonitor interval, deploy/helm values serviceMonitor.interval, and inference_step.py's). The EPP's own chart
  scrapes it every 10 s (gateway-api-inference-extension config/charts/inferencepool/README.md, "Install with
  Monitoring": inferenceExtension.monitoring.interval); a ServiceMonitor without an interval gets
  prometheus-operator's 30 s, kube-prometheus-stack's default. KEDA's Prometheus trigger is emulated, since KEDA is a
  Go operator not run here: at zero replicas KEDA's scale loop asks the scaler every `--polling-interval` (its
  `pollingInterval`, default 30 s: keda.sh/docs/latest/reference/scaledobject-spec), at a phase of its own (a random,
  seeded offset here, fixed for the run as one ScaledObject's is); each poll is what kedacore/keda
  pkg/scalers/prometheus_scaler.go ExecutePromQuery sends, GET /api/v1/query with
  `sum(inference_extension_flow_control_queue_size{inference_pool="..."})` and `time` now in RFC 3339 (whole
  seconds), an empty result read as 0 (ignoreNullValues, default true), and GetMetricsAndActivity's activation
  `value > activationThreshold` (0). The time is the end of the first poll started after the step that reads active.
Then the requests are dispatched (the pool gets a ready endpoint); the next step waits until every path reads 0 again.
Prints p50/p99 of each path and their ratio; exits 1 when either direct path's p99 is 1 s or more (issue 38: IsActive
true within 1 s of requests waiting).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import grpc
from aiohttp import web
from local_prometheus import launch_prometheus, serve

from adapter.api.selfmetrics import AdapterMetrics
from adapter.application import build_app
from adapter.auth.sar import SubjectAccessReviewer
from adapter.demand.config import GIE_QUEUE, DemandDefinition
from adapter.demand.signals import DemandCollector, DemandSignals, build_reader
from adapter.keda.scaler import build_external_scaler
from adapter.metrics_config import default_metrics_config
from adapter.podcache.cache import PodCache
from adapter.quantity import parse_quantity
from adapter.settings import AdapterSettings
from adapter.sources.direct import DirectSource
from adapter.sources.exporters import StaticExporters
from adapter.sources.nodefeeds import NodeFeeds
from simulation.gateway import SimulatedGateway
from simulation.kubeapi.server import KubeApiServer
from tests.support import keda
from toolkit.backoff import Backoff
from toolkit.kubeclient import api_client
from toolkit.settings import ListenAddress

NAMESPACE, POOL = "serving", "llm-inference"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DEMAND = "inference_pending_requests"
SCRAPE_S = 15  # default of --scrape-interval: the shipped chart's ServiceMonitor interval (deploy/helm values.yaml)
POLLING_S = 30  # default of --polling-interval: KEDA's default pollingInterval
REQUESTS = 3  # waiting per step
DIRECT_BUDGET_S = 1.0
PROMQL = f'sum({GIE_QUEUE}{{inference_pool="{POOL}"}})'
EXTERNAL_QUERY = (
    f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/{DEMAND}"
    f"?labelSelector={urllib.parse.quote(f'inference_pool={POOL}', safe='')}"
)
TRIGGER = {"metric": DEMAND, "selector": f"inference_pool={POOL}", "target": "4", "activationTarget": "0"}
PATHS = ("external", "keda-push", "prometheus-keda")


class Timeline:
    """What one path said, when (time.monotonic()); awaiters wait for the first record after a moment."""

    def __init__(self) -> None:
        self.records: list[tuple[float, float]] = []
        self.failure: Exception | None = None  # the path broke: awaiters raise it rather than wait for ever
        self._changed = asyncio.Event()

    def record(self, value: float, at: float | None = None) -> None:
        self.records.append((time.monotonic() if at is None else at, value))
        self._wake()

    def fail(self, error: Exception) -> None:
        self.failure = error
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def first(self, since: float, test: Callable[[float], bool]) -> float:
        """The time of the first record at or after `since` whose value passes `test`."""
        while True:
            for at, value in self.records:
                if at >= since and test(value):
                    return at
            if self.failure is not None:
                raise RuntimeError(f"the path stopped answering: {self.failure}") from self.failure
            await self._changed.wait()


class KedaPrometheusPoll:
    """KEDA's scale loop on one Prometheus trigger at zero replicas: the instant query every `interval`, at `phase`."""

    def __init__(self, session: aiohttp.ClientSession, server: str, interval: float, phase: float) -> None:
        self._session = session
        self._server = server
        self._interval = interval
        self._phase = phase
        self.polls = Timeline()  # each poll's value, at the moment its answer came
        self.started: list[float] = []

    async def value(self) -> float:
        """As ExecutePromQuery: `time` now, whole seconds; no series is 0 (ignoreNullValues); one series' value."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        params = {"query": PROMQL, "time": now}
        async with self._session.get(f"{self._server}/api/v1/query", params=params) as response:
            body = await response.json()
        if response.status != 200 or body.get("status") != "success":
            raise RuntimeError(f"prometheus answered {response.status}: {str(body)[:200]}")
        result = body["data"]["result"]
        if not result:
            return 0.0
        if len(result) > 1:
            raise RuntimeError(f"{PROMQL} returned {len(result)} series, KEDA refuses more than one")
        return float(result[0]["value"][1])

    async def run(self) -> None:
        await asyncio.sleep(self._phase)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for tick in itertools.count(1):
            self.started.append(time.monotonic())
            try:
                value = await self.value()
            except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError, KeyError) as error:
                self.polls.fail(error)  # KEDA would log it and count the trigger inactive: the bench stops instead
                return
            self.polls.record(value)
            await asyncio.sleep(max(0.0, start + tick * self._interval - loop.time()))

    async def first_active_after(self, since: float) -> float:
        """When the first poll begun after `since` that reads above activationThreshold (0) answered."""
        while True:
            at = await self.polls.first(since, lambda v: v > 0)
            index = next(i for i, (t, _) in enumerate(self.polls.records) if t == at)
            if self.started[index] >= since:
                return at
            since = at + 1e-9  # a poll under way at the step: its answer may be older than the step


def start_prometheus(workdir: Path, target: str, scrape_s: int) -> tuple[subprocess.Popen[bytes], str]:
    """A real prometheus scraping the gateway's /metrics every `scrape_s` seconds."""
    config = {
        "global": {"scrape_interval": f"{scrape_s}s"},
        "scrape_configs": [{"job_name": "inference-gateway-epp", "static_configs": [{"targets": [target]}]}],
    }
    return launch_prometheus(workdir, config)


async def pending(session: aiohttp.ClientSession, url: str) -> float:
    async with session.get(f"{url}{EXTERNAL_QUERY}") as response:
        body = await response.json()
    if response.status != 200:
        raise RuntimeError(f"the External metric answered {response.status}: {body}")
    [item] = body["items"]
    return float(parse_quantity(item["value"]))


async def first_external_above_zero(session: aiohttp.ClientSession, url: str) -> float:
    while (await pending(session, url)) <= 0:
        await asyncio.sleep(0.05)
    return time.monotonic()


async def wait_at_gateway(session: aiohttp.ClientSession, gateway: str) -> int:
    """One completion request through the gateway: held until the pool has a ready endpoint; its status."""
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 16}
    async with session.post(f"{gateway}/v1/completions", json=body) as response:
        return response.status


async def follow_stream(stream: Any, pushes: Timeline) -> None:
    """Every StreamIsActive push, as KEDA's push scaler loop receives it."""
    try:
        async for message in stream:
            pushes.record(1.0 if message.result else 0.0)
    except grpc.aio.AioRpcError as error:
        pushes.fail(error)
        return
    pushes.fail(RuntimeError("the adapter ended the stream"))


async def all_read_zero(
    session: aiohttp.ClientSession, url: str, scaler: keda.ScalerClient, poll: KedaPrometheusPoll, since: float
) -> None:
    """Every path reads 0 again: the External metric, IsActive, and a KEDA poll begun after `since`."""
    ref = keda.scaled_object(NAMESPACE, TRIGGER)
    while (await pending(session, url)) != 0 or (await scaler.is_active(ref)).result:
        await asyncio.sleep(0.2)
    while True:
        at = await poll.polls.first(since, lambda v: v == 0)
        index = next(i for i, (t, _) in enumerate(poll.polls.records) if t == at)
        if poll.started[index] >= since:
            return
        since = at + 1e-9


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(steps: int, scrape_s: int, polling_s: int) -> dict[str, list[float]]:
    gateway = SimulatedGateway({POOL: MODEL}, ttl=600)
    await gateway.start()
    kube = KubeApiServer()
    await kube.start()
    timings: dict[str, list[float]] = {path: [] for path in PATHS}
    runners: list[web.AppRunner] = []
    tasks: list[asyncio.Task[None]] = []
    cache = scaler_server = channel = None
    with tempfile.TemporaryDirectory() as workdir:
        prometheus, prometheus_url = start_prometheus(Path(workdir), gateway.url.removeprefix("http://"), scrape_s)
        try:
            cache = PodCache(api_client(base_url=kube.url), backoff=Backoff(initial=0.05, maximum=0.2))
            await cache.start()
            assert await cache.wait_synced(10)
            spec = DemandDefinition.model_validate(
                {"name": DEMAND, "namespace": NAMESPACE, "url": f"{gateway.url}/metrics",
                 "preset": "gateway-api-inference-extension", "labels": {"service": POOL}}
            )  # fmt: skip
            config = default_metrics_config().model_copy(update={"demand": (spec,)})
            metrics = AdapterMetrics("direct")
            signals = DemandSignals([build_reader(spec)])  # one set of readers for both, as adapter/parts.py builds
            metrics.registry.register(DemandCollector(signals))
            source = DirectSource(StaticExporters({}), NodeFeeds())
            app = build_app(config=config, pods=cache, source=source, metrics=metrics, demand=signals)
            runner, adapter_url = await serve(app)
            runners.append(runner)
            settings = AdapterSettings(keda_listen=ListenAddress("127.0.0.1", 0), keda_deactivate_after=0)
            reviewer = SubjectAccessReviewer(api_client(base_url=kube.url))  # asked only with --keda-client-ca-file
            scaler_server = build_external_scaler(settings, config, cache, source, metrics.registry, reviewer, signals)
            await scaler_server.start()
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{scaler_server.port}")
            scaler = keda.ScalerClient.on(channel)
            ref = keda.scaled_object(NAMESPACE, TRIGGER | {"scalerAddress": f"127.0.0.1:{scaler_server.port}"})
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=660)) as clients,
            ):
                phases = random.Random(38)
                poll = KedaPrometheusPoll(session, prometheus_url, polling_s, phases.uniform(0, polling_s))
                pushes = Timeline()
                stream = scaler.stream_is_active(ref)
                tasks = [asyncio.create_task(poll.run()), asyncio.create_task(follow_stream(stream, pushes))]
                print(f"waiting for every path to read 0 (a scrape and a KEDA poll: up to {scrape_s + polling_s} s)")
                await asyncio.wait_for(all_read_zero(session, adapter_url, scaler, poll, time.monotonic()), 120)
                for step in range(steps):
                    # the wait for 0 ends at a KEDA poll: a step a random part of the longer cycle later falls at any
                    # moment of the poll's cycle, and of the scrape's where one interval divides the other (defaults)
                    await asyncio.sleep(phases.uniform(0, max(scrape_s, polling_s)))
                    since = time.monotonic()
                    held = [asyncio.create_task(wait_at_gateway(clients, gateway.url)) for _ in range(REQUESTS)]
                    answered = await asyncio.wait_for(
                        asyncio.gather(
                            first_external_above_zero(session, adapter_url),
                            pushes.first(since, lambda v: v > 0),
                            poll.first_active_after(since),
                        ),
                        2 * (scrape_s + polling_s) + 30,
                    )
                    for path, at in zip(PATHS, answered, strict=True):
                        timings[path].append(at - since)
                    shown = ", ".join(f"{path} {timings[path][-1]:6.2f} s" for path in PATHS)
                    print(f"step {step + 1}: {shown}", flush=True)
                    gateway.set_ready_endpoints(POOL, 1)  # the first pod is ready: the held requests are dispatched
                    statuses = await asyncio.gather(*held)
                    assert statuses == [200] * REQUESTS, statuses
                    gateway.set_ready_endpoints(POOL, 0)
                    if step + 1 < steps:
                        dispatched = time.monotonic()
                        await asyncio.wait_for(
                            all_read_zero(session, adapter_url, scaler, poll, dispatched),
                            2 * (scrape_s + polling_s) + 30,
                        )
                stream.cancel()
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                    await task
            if channel is not None:
                await channel.close(grace=None)
            if scaler_server is not None:
                await scaler_server.stop(grace=0.5)
            for runner in runners:
                await runner.cleanup()
            if cache is not None:
                await cache.stop()
            await kube.stop()
            await gateway.stop()
            prometheus.terminate()
            prometheus.wait(20)
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--steps", type=int, default=5, help="steps in demand to time (default 5)")
    parser.add_argument(
        "--scrape-interval", type=int, default=SCRAPE_S, metavar="SECONDS",
        help=f"Prometheus' scrape interval of the gateway (default {SCRAPE_S}; the EPP's own chart: 10)",
    )  # fmt: skip
    parser.add_argument(
        "--polling-interval", type=int, default=POLLING_S, metavar="SECONDS",
        help=f"KEDA's pollingInterval (default {POLLING_S}, KEDA's)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if not 1 <= args.scrape_interval <= 300 or not 1 <= args.polling_interval <= 600:
        parser.error("--scrape-interval must be 1-300 s and --polling-interval 1-600 s")
    steps, scrape_s, polling_s = args.steps, args.scrape_interval, args.polling_interval
    timings = asyncio.run(measure(steps, scrape_s, polling_s))
    report: dict[str, object] = {"steps": steps, "scrape_interval_s": scrape_s, "polling_interval_s": polling_s}
    for path in PATHS:
        key = path.replace("-", "_")
        report[f"{key}_p50_s"] = round(statistics.median(timings[path]), 3)
        report[f"{key}_p99_s"] = round(percentile(timings[path], 0.99), 3)
    direct_p99 = max(percentile(timings["external"], 0.99), percentile(timings["keda-push"], 0.99))
    report["prometheus_keda_over_direct_p50"] = round(
        statistics.median(timings["prometheus-keda"]) / statistics.median(timings["keda-push"]), 1
    )
    print(json.dumps(report))
    ok = direct_p99 < DIRECT_BUDGET_S
    print(f"direct p99 (External metric and StreamIsActive) under {DIRECT_BUDGET_S:g} s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
